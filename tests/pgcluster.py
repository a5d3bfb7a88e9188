"""The test suite's PostgreSQL: one throwaway cluster per test run, a migrated template, a clone per test.

How it fits together:

* ``pg_server`` (session) starts a scratch server with :func:`awa_cli.db.embedded.start_throwaway_cluster`
  (system binaries preferred, unix socket only, ``fsync=off``, ``max_connections=200``; run as
  the ``awa`` system user when the suite runs as root) and stops and deletes it at the end.
* ``awa_pg_noproc`` (session) is pytest-postgresql's ``postgresql_noproc`` pointed at that server
  (through ``depends_on="pg_server"``): it creates the template database ``awa_tests_tmpl`` and
  runs the awa migrations into it ONCE.
* ``db`` (function) is pytest-postgresql's client fixture: a fresh database ``awa_tests`` cloned
  from the template for each test (a cheap file copy), dropped afterwards; an open psycopg
  connection to it.
* ``own_server`` (function) is a whole server for one test, for tests that restart it.
* ``dsn`` (function) is the connection string of that same clone, for code that opens its own
  connections (clients, workers, CLI invocations via ``--database-url``).

Tests that only need a server, not a migrated database, can use ``pg_server.dsn_for(name)``.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from psycopg.conninfo import make_conninfo
from pytest_postgresql import factories

from awa_cli.db.embedded import ThrowawayCluster, start_throwaway_cluster
from awa_cli.db.migrations import migrate_dsn

TEST_DBNAME = "awa_tests"


class PgServer:
    """The session's server; quacks like a pytest-postgresql executor for ``depends_on``."""

    def __init__(self, cluster: ThrowawayCluster) -> None:
        self.cluster = cluster
        self.host = cluster.host  # the unix socket directory
        self.socket_dir = cluster.host
        self.port = cluster.port
        self.user = cluster.user
        self.password: str | None = None
        self.options = ""
        self.maintenance_dbname = "postgres"
        self.template_dbname: str | None = None  # databases are created from template1

    def dsn_for(self, dbname: str) -> str:
        """A libpq URL for database ``dbname`` on this server."""
        return self.cluster.dsn_for(dbname)


def load_awa_schema(
    *, host: str, port: int | str, user: str, dbname: str, password: str | None = None, **_: Any
) -> None:
    """pytest-postgresql ``load`` callable: run the awa migrations into the template database."""
    migrate_dsn(
        make_conninfo(
            host=host, port=str(port), user=user, dbname=dbname, password=password or None
        )
    )


@pytest.fixture(scope="session")
def pg_server() -> Iterator[PgServer]:
    cluster = start_throwaway_cluster()
    try:
        yield PgServer(cluster)
    finally:
        cluster.stop()


@pytest.fixture
def own_server() -> Iterator[ThrowawayCluster]:
    """A server of this test's own, so restarting it disturbs no other test."""
    cluster = start_throwaway_cluster()
    try:
        yield cluster
    finally:
        cluster.stop()


awa_pg_noproc = factories.postgresql_noproc(
    user="postgres",
    dbname=TEST_DBNAME,
    load=[load_awa_schema],
    depends_on="pg_server",
)

db = factories.postgresql("awa_pg_noproc", dbname=TEST_DBNAME)


@pytest.fixture
def dsn(db: psycopg.Connection) -> str:
    """The connection string of the test's migrated clone (the same database as ``db``)."""
    info = db.info
    return make_conninfo(host=info.host, port=str(info.port), user=info.user, dbname=info.dbname)


@pytest.fixture
def fresh_dsn(pg_server: PgServer) -> Iterator[str]:
    """An empty database (no awa schema) on the session's server, dropped afterwards."""
    name = f"awa_fresh_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(pg_server.dsn_for("postgres"), autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{name}"')
    try:
        yield pg_server.dsn_for(name)
    finally:
        with psycopg.connect(pg_server.dsn_for("postgres"), autocommit=True) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
