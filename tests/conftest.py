"""Shared fixtures.

The PostgreSQL ones live in ``tests/pgcluster.py`` (see its docstring): ``pg_server``
(session: the throwaway server, ``dsn_for(dbname)``), ``awa_database_url`` (that server, for
awa's own pytest plugin, whose ``awa_dsn`` clones a migrated template per test), ``dsn`` (the
clone's connection string), ``db`` (a psycopg connection to it) and ``fresh_dsn`` (an empty
database without the awa schema).

Here:

* ``isolated_environment`` (autouse): every test runs without the developer's ``AWA_*``
  variables and without ``NOTIFY_SOCKET`` / ``WATCHDOG_*``, so a shell with
  ``AWA_DATABASE_URL`` set cannot point a test at the wrong database.
* ``runner``: the one CliRunner of the suite (``NO_COLOR=1``, a fixed terminal width, and
  exceptions propagate instead of turning into exit code 1).
"""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator

import hypothesis
import pytest

try:  # `python -m pytest` from the checkout, or tests/ made a package
    from tests.helpers import AwaRunner
    from tests.pgcluster import awa_database_url, db, dsn, fresh_dsn, own_server, pg_server
except ModuleNotFoundError:  # rootdir-relative import of this conftest's folder
    from helpers import AwaRunner  # type: ignore[no-redef]
    from pgcluster import awa_database_url, db, dsn, fresh_dsn, own_server, pg_server  # type: ignore[no-redef]  # noqa: F401

STRIPPED_EXACT = ("NOTIFY_SOCKET", "WATCHDOG_USEC", "WATCHDOG_PID")

# In CI (.ci/run sets CI=true) the property tests draw the same examples on every run, so a
# build fails for a change and not for a lucky draw; a developer's runs keep drawing new ones
# (which is how the escaped-character and "~user" config errors were found), and each find
# becomes an @example.
hypothesis.settings.register_profile("ci", derandomize=True)
if os.environ.get("CI"):
    hypothesis.settings.load_profile("ci")

# A shell that starts the suite in the background (`.ci/run &`, nohup, a CI runner without job
# control) hands it SIGINT ignored, and an ignored signal stays ignored across exec: every
# `awa` a test starts would then shrug off the Ctrl-C the test sends it (the `--watch` and
# blocked-migration tests waited out their timeouts so). A handled signal is reset to the
# default at exec, so handling SIGINT here gives each child Python's usual Ctrl-C.
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)


@pytest.fixture(autouse=True)
def isolated_environment(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Strip ``AWA_*`` and the systemd notify variables from each test's environment."""
    for name in list(os.environ):
        if name.startswith("AWA_") or name in STRIPPED_EXACT:
            monkeypatch.delenv(name)
    yield


@pytest.fixture
def runner() -> AwaRunner:
    """The suite's CliRunner (see :class:`AwaRunner`)."""
    return AwaRunner()
