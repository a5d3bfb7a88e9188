"""The test suite's PostgreSQL: one throwaway server per test run, a migrated template, a clone per test.

How it fits together:

* ``pg_server`` (session) starts a scratch server with :func:`start_throwaway_cluster` (below:
  :class:`awa_cli.db.embedded.EmbeddedPostgres` tuned for tests: system binaries preferred,
  unix socket only, ``fsync=off``, ``max_connections=200``; run as the ``awa`` system user
  when the suite runs as root) and stops and deletes it at the end.
* ``awa_database_url`` (session) points awa's own pytest plugin (``awa_cli.testing_plugin``,
  the fixtures users get) at that server. The plugin migrates a template database once per
  session and gives each test a fresh clone of it: ``awa_dsn``, dropped afterwards. The suite
  uses those fixtures rather than a second implementation of its own.
* ``dsn`` (function) is that clone's connection string (``awa_dsn``), for code that opens its
  own connections (clients, workers, CLI invocations via ``--database-url``).
* ``db`` (function) is an open psycopg connection to the same clone.
* ``own_server`` (function) is a whole server for one test, for tests that restart it.
* ``fresh_dsn`` (function) is an empty database (no awa schema) on the session's server.

Tests that only need a server, not a migrated database, can use ``pg_server.dsn_for(name)``.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest

from awa_cli.db.embedded import EmbeddedPostgres
from tests.helpers import stopped_at_exit


class ThrowawayCluster:
    """A scratch server for the test suite: its own temp dir, removed by :meth:`stop`."""

    def __init__(self, base_dir: Path, server: EmbeddedPostgres) -> None:
        self.base_dir = base_dir
        self.server = server
        self.host = str(server.socket_dir)  # a unix socket dir: what libpq calls host
        self.port = server.port
        self.user = server.user
        self.password: str | None = None

    def dsn_for(self, dbname: str) -> str:
        return self.server.dsn_for(dbname)

    def stop(self) -> None:
        try:
            self.server.stop(mode="immediate")
        finally:
            shutil.rmtree(self.base_dir, ignore_errors=True)
            if self.server.socket_dir != self.server.data_dir:
                shutil.rmtree(self.server.socket_dir, ignore_errors=True)


def start_throwaway_cluster(base_dir: Path | str | None = None) -> ThrowawayCluster:
    """Start a fresh cluster in a new temp dir under ``base_dir`` (default: the system temp dir).

    System binaries are preferred; ``fsync`` and ``full_page_writes`` are off for speed
    (``synchronous_commit`` keeps its default), ``max_connections`` is 200. Only the
    maintenance database ``postgres`` exists. ``AWA_TEST_PG_SETTINGS`` adds server settings
    (``name=value`` separated by spaces) for every session, whatever options a connection
    string sets: ``AWA_TEST_PG_SETTINGS="awa.dependency_shard_min=1"`` runs the suite with
    every child of a dependency wide (docs/testing.md).
    """
    root = Path(tempfile.mkdtemp(prefix="awa-pg-", dir=base_dir))
    settings: dict[str, str | int] = {
        "fsync": "off",
        "full_page_writes": "off",
        "max_connections": 200,
    }
    for pair in os.environ.get("AWA_TEST_PG_SETTINGS", "").split():
        name, _, value = pair.partition("=")
        settings[name] = value
    server = EmbeddedPostgres(
        root / "data",
        prefer_system=True,
        database=None,
        fast_init=True,
        settings=settings,
    )
    try:
        server.start()
    except BaseException:
        shutil.rmtree(root, ignore_errors=True)
        raise
    return ThrowawayCluster(root, server)


@contextlib.contextmanager
def throwaway_cluster() -> Iterator[ThrowawayCluster]:
    """A started throwaway cluster, stopped at the end."""
    with stopped_at_exit(start_throwaway_cluster()) as cluster:
        yield cluster


@pytest.fixture(scope="session")
def pg_server() -> Iterator[ThrowawayCluster]:
    with throwaway_cluster() as cluster:
        yield cluster


@pytest.fixture(scope="session")
def awa_database_url(pg_server: ThrowawayCluster) -> str:
    """The server awa's pytest plugin creates its template and per-test databases on
    (overrides the plugin's fixture of the same name, which reads ``--awa-database-url``)."""
    return pg_server.dsn_for("postgres")


@pytest.fixture
def own_server() -> Iterator[ThrowawayCluster]:
    """A server of this test's own, so restarting it disturbs no other test."""
    with throwaway_cluster() as cluster:
        yield cluster


@pytest.fixture
def dsn(awa_dsn: str) -> str:
    """The connection string of the test's migrated clone (the plugin's ``awa_dsn``)."""
    return awa_dsn


@pytest.fixture
def db(dsn: str) -> Iterator[psycopg.Connection]:
    """An open connection to the test's migrated clone (the same database as ``dsn``)."""
    with psycopg.connect(dsn) as conn:
        yield conn


@pytest.fixture
def fresh_dsn(pg_server: ThrowawayCluster) -> Iterator[str]:
    """An empty database (no awa schema) on the session's server, dropped afterwards."""
    name = f"awa_fresh_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(pg_server.dsn_for("postgres"), autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{name}"')
    try:
        yield pg_server.dsn_for(name)
    finally:
        with psycopg.connect(pg_server.dsn_for("postgres"), autocommit=True) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
