"""Ordered SQL migrations shipped in the wheel (package ``awa_cli.sql``), applied under an
advisory lock and recorded in the ledger table ``awa.schema_migrations``."""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from importlib import resources

import psycopg

from awa_cli.db.statements import SQL
from awa_cli.errors import SchemaTooNew

# Any constant works; it only has to be the same for every awa process.
MIGRATION_LOCK_KEY = 0x6177615F6D6967  # "awa_mig"

_FILE_NAME = re.compile(r"^(\d{4})_([a-z0-9_]+)\.sql$")


@dataclass(frozen=True)
class Migration:
    version: int
    name: str
    sql: str


@dataclass(frozen=True)
class MigrationStatus:
    version: int
    name: str
    applied_at: datetime | None


def available() -> list[Migration]:
    """Every migration file in the package, in version order."""
    found = []
    for entry in resources.files("awa_cli.sql").iterdir():
        match = _FILE_NAME.match(entry.name)
        if match:
            found.append(Migration(int(match[1]), match[2], entry.read_text(encoding="utf-8")))
    found.sort(key=lambda m: m.version)
    return found


def _applied(conn: psycopg.Connection) -> dict[int, datetime]:
    exists = conn.execute(SQL["migrations_ledger_exists"]).fetchone()
    if not exists or not exists[0]:
        return {}
    rows = conn.execute(SQL["migrations_applied"]).fetchall()
    return {version: applied_at for version, applied_at in rows}


def newer_than_code(conn: psycopg.Connection) -> list[int]:
    """Applied versions above the newest this awa ships (a newer awa migrated the database)."""
    known = max((m.version for m in available()), default=0)
    return sorted(v for v in _applied(conn) if v > known)


def too_new_message(versions: list[int], dbname: str | None = None) -> str:
    """The one line for a schema newer than the code, naming both versions."""
    known = max((m.version for m in available()), default=0)
    where = f" in {dbname}" if dbname else ""
    return (
        f"the awa schema{where} is at version {max(versions):04d}, newer than this awa knows "
        f"({known:04d}): upgrade awa (or restore the database from before that migration)"
    )


def check_not_newer(conn: psycopg.Connection) -> None:
    """Raise :class:`SchemaTooNew` when a newer awa migrated this database."""
    newer = newer_than_code(conn)
    if newer:
        raise SchemaTooNew(too_new_message(newer, conn.info.dbname))


def status(conn: psycopg.Connection) -> list[MigrationStatus]:
    applied = _applied(conn)
    return [MigrationStatus(m.version, m.name, applied.get(m.version)) for m in available()]


def migrate(
    conn: psycopg.Connection, *, starting: Callable[[Migration], None] | None = None
) -> list[Migration]:
    """Apply pending migrations in order; returns those applied (empty when up to date).

    The advisory lock makes concurrent runs safe: the second waits, then finds nothing to do.
    Each migration is one transaction, so an interruption (Ctrl-C, a lost connection) rolls
    back the one in progress and keeps those before it; ``starting`` is told which one is
    about to run, so the caller can say which was rolled back.
    """
    conn.autocommit = True
    conn.execute(SQL["migrations_lock"], {"key": MIGRATION_LOCK_KEY})
    try:
        with conn.transaction():
            conn.execute(SQL["migrations_ledger"])
        check_not_newer(conn)
        applied = _applied(conn)
        done = []
        for migration in available():
            if migration.version in applied:
                continue
            if starting is not None:
                starting(migration)
            with conn.transaction():
                conn.execute(migration.sql.encode())  # trusted SQL text from the package
                conn.execute(
                    SQL["migrations_record"],
                    {"version": migration.version, "name": migration.name},
                )
            done.append(migration)
        return done
    finally:
        try:
            conn.execute(SQL["migrations_unlock"], {"key": MIGRATION_LOCK_KEY})
        except psycopg.Error:  # a broken connection: closing it releases the lock anyway
            pass


def migrate_dsn(dsn: str) -> list[Migration]:
    with psycopg.connect(dsn, autocommit=True) as conn:
        return migrate(conn)
