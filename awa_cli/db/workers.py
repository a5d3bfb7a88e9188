"""The gateway of ``awa.workers`` (statements in ``sql/workers.sql``): a worker's own row
(register, heartbeat, remove) and the live-workers reads of the dashboard and the CLI."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import psycopg
from psycopg.rows import DictRow, dict_row

from awa_cli.db.statements import SQL


async def register(conn: psycopg.AsyncConnection[Any], params: Mapping[str, Any]) -> None:
    """Insert (or replace) this worker's row."""
    await conn.execute(SQL["worker_register"], params)


async def heartbeat(
    conn: psycopg.AsyncConnection[Any],
    worker_id: str,
    running: int,
    failing_since: float | None = None,
    claim_error: str | None = None,
) -> bool:
    """Touch this worker's row (and say whether its claims fail, since when, why); False
    when it is gone (pruned: register again)."""
    cur = await conn.execute(
        SQL["worker_heartbeat"],
        {
            "id": worker_id,
            "running": running,
            "failing_since": failing_since,
            "claim_error": claim_error,
        },
    )
    return cur.rowcount == 1


async def remove(conn: psycopg.AsyncConnection[Any], worker_id: str) -> None:
    await conn.execute(SQL["worker_remove"], {"id": worker_id})


async def live(conn: psycopg.AsyncConnection[Any], stale: float) -> list[DictRow]:
    """The rows of workers that heartbeated in the last ``stale`` seconds, newest first."""
    async with conn.cursor(row_factory=dict_row) as cur:
        await cur.execute(SQL["workers_live"], {"stale": stale})
        return await cur.fetchall()


async def kinds_with_available(conn: psycopg.AsyncConnection[Any]) -> list[DictRow]:
    """Every (kind, queue) with jobs that could run now, and how many."""
    async with conn.cursor(row_factory=dict_row) as cur:
        await cur.execute(SQL["kinds_with_available"])
        return await cur.fetchall()
