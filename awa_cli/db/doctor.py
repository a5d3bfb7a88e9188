"""The gateway of `awa doctor`'s reads (statements in ``sql/doctor.sql``): the server's
settings, the schema ledger, the leader lock, the workers' claims and the jobs they hold, the
tables' dead tuples and the long transactions. Each returns dict rows; the verdicts are
``awa_cli/doctor.py``'s."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, LiteralString

import psycopg
from psycopg.rows import DictRow, dict_row

from awa_cli.db.statements import SQL


async def _all(
    conn: psycopg.AsyncConnection[Any], name: LiteralString, params: Mapping[str, Any] | None = None
) -> list[DictRow]:
    async with conn.cursor(row_factory=dict_row) as cur:
        await cur.execute(SQL[name], params)
        return await cur.fetchall()


async def _one(
    conn: psycopg.AsyncConnection[Any], name: LiteralString, params: Mapping[str, Any] | None = None
) -> DictRow:
    [row] = await _all(conn, name, params)
    return row


async def limit_statements(conn: psycopg.AsyncConnection[Any]) -> None:
    """No check may hang the doctor: a statement timeout for this session."""
    await conn.execute(SQL["doctor_statement_timeout"])


async def server(conn: psycopg.AsyncConnection[Any]) -> DictRow:
    return await _one(conn, "doctor_server")


async def schema_presence(conn: psycopg.AsyncConnection[Any]) -> DictRow:
    """``has_ledger``, ``has_jobs`` and ``can_read_ledger`` (None without a ledger)."""
    return await _one(conn, "doctor_schema_versions")


async def applied_versions(conn: psycopg.AsyncConnection[Any]) -> list[int]:
    return [int(r["version"]) for r in await _all(conn, "doctor_applied_migrations")]


async def leader(conn: psycopg.AsyncConnection[Any], key: int, stale: float) -> list[DictRow]:
    """The sessions holding the leader lock, with the live worker row that names each (no
    names before migration 0013)."""
    try:
        return await _all(conn, "doctor_leader", {"key": key, "stale": stale})
    except (psycopg.errors.UndefinedTable, psycopg.errors.UndefinedColumn):
        return await _all(conn, "doctor_leader_unnamed", {"key": key})


async def failing_claims(conn: psycopg.AsyncConnection[Any], stale: float) -> list[DictRow]:
    return await _all(conn, "doctor_failing_claims", {"stale": stale})


async def held_jobs(conn: psycopg.AsyncConnection[Any], stale: float) -> list[DictRow]:
    return await _all(conn, "doctor_held_jobs", {"stale": stale})


async def stuck_rescues(conn: psycopg.AsyncConnection[Any], threshold: float) -> DictRow:
    return await _one(conn, "doctor_stuck_rescues", {"threshold": threshold})


async def oldest_available(conn: psycopg.AsyncConnection[Any]) -> list[DictRow]:
    return await _all(conn, "doctor_oldest_available")


async def table_stats(conn: psycopg.AsyncConnection[Any]) -> list[DictRow]:
    return await _all(conn, "doctor_table_stats")


async def long_transactions(conn: psycopg.AsyncConnection[Any], threshold: float) -> list[DictRow]:
    return await _all(conn, "doctor_long_transactions", {"threshold": threshold})
