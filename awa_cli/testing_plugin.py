"""Opt-in pytest fixtures for testing code that uses awa.

Installed as a ``pytest11`` entry point, so pytest loads it wherever awa is installed, but
nothing happens until a test asks for one of its fixtures:

* ``awa_database_url`` (session): a PostgreSQL server where the test user may create
  databases, from ``--awa-database-url``, else the ini option ``awa_database_url``, else
  ``$AWA_TEST_DATABASE_URL``. Its own database is only used to create and drop test
  databases. Never falls back to ``$AWA_DATABASE_URL``: tests must not touch a real queue.
* ``awa_dsn`` (function): a fresh database with the awa schema for each test (a clone of a
  template migrated once per session), dropped afterwards.
* ``awa_app`` (function): override it in your ``conftest.py`` to return your ``awa.App``.
* ``awa_test_client`` (function): an :class:`awa_cli.testing.AwaTestClient` on ``awa_dsn``
  and ``awa_app``.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

ENV_VAR = "AWA_TEST_DATABASE_URL"
INI_NAME = "awa_database_url"


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("awa", "awa job queue test fixtures")
    group.addoption(
        "--awa-database-url",
        dest="awa_database_url",
        default=None,
        help=f"PostgreSQL server for the awa fixtures (databases are created per test); "
        f"also ini '{INI_NAME}' or ${ENV_VAR}.",
    )
    parser.addini(INI_NAME, "PostgreSQL server URL for the awa_dsn fixture", default="")


def _configured_url(config: pytest.Config) -> str | None:
    return (
        config.getoption("awa_database_url", default=None)
        or (config.getini(INI_NAME) or None)
        or os.environ.get(ENV_VAR)
        or None
    )


def _with_dbname(url: str, dbname: str) -> str:
    from psycopg.conninfo import conninfo_to_dict, make_conninfo

    params = conninfo_to_dict(url)
    params["dbname"] = dbname
    return make_conninfo("", **params)


def _drop(url: str, dbname: str) -> None:
    from awa_cli.db import databases

    databases.drop(url, dbname)


@pytest.fixture(scope="session")
def awa_database_url(pytestconfig: pytest.Config) -> str:
    url = _configured_url(pytestconfig)
    if not url:
        pytest.fail(
            "the awa fixtures need a PostgreSQL server: pass --awa-database-url URL, set "
            f"'{INI_NAME}' in the pytest ini section, or set ${ENV_VAR}",
            pytrace=False,
        )
    return url


@pytest.fixture(scope="session")
def _awa_template_db(awa_database_url: str) -> Iterator[str]:
    """A database migrated once per session; each test's database is a clone of it."""
    from awa_cli.db import databases
    from awa_cli.db.migrations import migrate_dsn

    name = f"awa_test_tmpl_{uuid.uuid4().hex[:12]}"
    databases.create(awa_database_url, name)
    try:
        migrate_dsn(_with_dbname(awa_database_url, name))
        yield name
    finally:
        _drop(awa_database_url, name)


@pytest.fixture
def awa_dsn(awa_database_url: str, _awa_template_db: str) -> Iterator[str]:
    """The connection string of a fresh, migrated database for this test."""
    from awa_cli.db import databases

    name = f"awa_test_{uuid.uuid4().hex[:12]}"
    databases.clone(awa_database_url, name, _awa_template_db)
    try:
        yield _with_dbname(awa_database_url, name)
    finally:
        _drop(awa_database_url, name)


@pytest.fixture
def awa_app() -> Any:
    """Override in your conftest.py: ``@pytest.fixture def awa_app(): return myapp.jobs.app``."""
    pytest.fail("override the awa_app fixture to return your awa.App", pytrace=False)


@pytest.fixture
def awa_test_client(awa_dsn: str, awa_app: Any) -> Iterator[Any]:
    """An :class:`awa_cli.testing.AwaTestClient` on this test's database and ``awa_app``."""
    from awa_cli.testing import AwaTestClient

    client = AwaTestClient(awa_dsn, awa_app)
    try:
        yield client
    finally:
        client.close()
