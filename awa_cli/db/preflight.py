"""Checks made before a long-running command starts: is the URL a PostgreSQL one, can it be
reached, is the awa schema there? Each problem becomes one line for people.

A worker that starts against a database it cannot use would otherwise log "started" and then
retry forever; a one-shot command would print the raw driver error. Both go through here.
"""

from __future__ import annotations

import re

import psycopg
from psycopg.conninfo import conninfo_to_dict

from awa_cli.db.dsn import redact
from awa_cli.errors import DatabaseUnusable, SchemaTooNew

URL_SCHEMES = ("postgresql", "postgres")
CONNECT_TIMEOUT = 5  # seconds: an unreachable host fails fast instead of hanging the start

_SERVER_PREFIX = re.compile(r"^(connection failed: )?(connection to server (at|on) .*? failed: )?")
_SEVERITY = re.compile(r"^(FATAL|ERROR):\s+")
_AWA_NAME = re.compile(r'"awa[."]|\bawa\.')
_SCHEMA_ERRORS = (
    psycopg.errors.UndefinedTable,
    psycopg.errors.UndefinedObject,
    psycopg.errors.InvalidSchemaName,
    psycopg.errors.UndefinedFunction,
)


def check_url(url: str) -> None:
    """Raise ``ValueError`` unless ``url`` is a ``postgresql://`` URL or libpq key=value text."""
    scheme, sep, _ = url.partition("://")
    if sep and scheme.lower() not in URL_SCHEMES:
        raise ValueError(f"unsupported scheme {scheme + '://'!r}")
    if not sep and "=" not in url:
        raise ValueError("neither a URL nor key=value connection parameters")
    try:
        conninfo_to_dict(url)
    except psycopg.ProgrammingError as exc:
        raise ValueError(str(exc).strip().splitlines()[0]) from None


def connection_problem(exc: psycopg.Error) -> str:
    """The reason a connection failed, as a short phrase (``connection refused``)."""
    text = str(exc).strip()
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    first = lines[0] if lines else type(exc).__name__
    reason = _SEVERITY.sub("", _SERVER_PREFIX.sub("", first))
    return (reason[:1].lower() + reason[1:]) or type(exc).__name__


def is_missing_schema(exc: BaseException) -> bool:
    """Whether a database error says an object of the awa schema does not exist."""
    return isinstance(exc, _SCHEMA_ERRORS) and bool(_AWA_NAME.search(str(exc)))


def missing_schema_message(dbname: str | None = None) -> str:
    where = f" in {dbname}" if dbname else ""
    return f"awa schema not found{where}: run awa migrate"


def check_database(dsn: str, *, timeout: float = CONNECT_TIMEOUT) -> None:
    """Connect once and check the schema; raise :class:`DatabaseUnusable` with one line.

    Needs no grant beyond the least-privilege worker role's: the migration ledger is
    consulted (for pending migrations) only when the role may read it.
    """
    shown = redact(dsn)
    try:
        conn = psycopg.connect(dsn, autocommit=True, connect_timeout=max(1, round(timeout)))
    except psycopg.Error as exc:
        raise DatabaseUnusable(f"cannot connect to {shown}: {connection_problem(exc)}") from exc
    with conn:
        from awa_cli.db import migrations
        from awa_cli.db.statements import SQL

        dbname = conn.info.dbname
        try:
            row = conn.execute(SQL["schema_presence"]).fetchone()
            has_jobs, ledger_readable = row if row is not None else (False, False)
            rows = migrations.status(conn) if has_jobs and ledger_readable else []
            newer = migrations.newer_than_code(conn) if has_jobs and ledger_readable else []
        except psycopg.Error as exc:
            raise DatabaseUnusable(f"cannot read the awa schema in {shown}: {exc}") from exc
    if newer:
        raise SchemaTooNew(migrations.too_new_message(newer, dbname))
    if not has_jobs:
        raise DatabaseUnusable(missing_schema_message(dbname))
    pending = [r for r in rows if r.applied_at is None]
    if pending:
        names = ", ".join(f"{r.version:04d}_{r.name}" for r in pending)
        raise DatabaseUnusable(
            f"awa schema in {dbname} is not up to date ({names} pending): run awa migrate"
        )
