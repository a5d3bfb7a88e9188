"""The gateway of ``awa.queues`` for readers: one queue's control state, the known queues,
the paused ones, the dead-lettering ones. The writes (pause, resume, a worker's
announcement) are transitions of the outcome core (``outcomes/queues.py``)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from psycopg.rows import dict_row
from psycopg_pool import AsyncConnectionPool

from awa_cli.queues import QueueInfo
from awa_cli.db.statements import SQL


async def get(pool: AsyncConnectionPool, queue: str) -> QueueInfo:
    """The control state of ``queue`` (a queue without a row: not paused)."""
    async with pool.connection() as conn, conn.cursor(row_factory=dict_row) as cur:
        await cur.execute(SQL["queue_get"], {"queue": queue})
        record = await cur.fetchone()
    return QueueInfo(queue) if record is None else QueueInfo.from_record(record)


async def list_queues(pool: AsyncConnectionPool, configured: Iterable[str] = ()) -> list[QueueInfo]:
    """Every known queue (rows of awa.queues, queues with runnable jobs, ``configured``); a
    row nothing keeps listed is forgotten after ``defaults.QUEUE_FORGET_AFTER`` (queue_list)."""
    async with pool.connection() as conn, conn.cursor(row_factory=dict_row) as cur:
        await cur.execute(SQL["queue_list"], {"configured": sorted(set(configured))})
        return [QueueInfo.from_record(r) for r in await cur.fetchall()]


async def paused_names(pool: AsyncConnectionPool) -> list[str]:
    """The paused queues, by name."""
    async with pool.connection() as conn, conn.cursor() as cur:
        await cur.execute(SQL["queue_paused_names"])
        return [str(r[0]) for r in await cur.fetchall()]


async def dead_letter_names(conn: Any) -> set[str]:
    """The queues announced with dead-lettering on (``awa.queues.dead_letter``), read on the
    caller's connection (the finaliser asks inside its transaction)."""
    async with conn.cursor() as cur:
        await cur.execute(SQL["queue_dead_letter_names"])
        return {r[0] for r in await cur.fetchall()}
