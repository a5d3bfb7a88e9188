"""Shared fixtures.

The PostgreSQL ones live in ``tests/pgcluster.py`` (see its docstring): ``pg_server``
(session: the throwaway server, ``dsn_for(dbname)``), ``db`` (a psycopg connection to a fresh,
migrated clone per test), ``dsn`` (that clone's connection string) and ``fresh_dsn`` (an empty
database without the awa schema).
"""

try:  # `python -m pytest` from the checkout, or tests/ made a package
    from tests.pgcluster import awa_pg_noproc, db, dsn, fresh_dsn, own_server, pg_server
except ModuleNotFoundError:  # rootdir-relative import of this conftest's folder
    from pgcluster import awa_pg_noproc, db, dsn, fresh_dsn, own_server, pg_server  # type: ignore[no-redef]  # noqa: F401
