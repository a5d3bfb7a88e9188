"""The gateway of ``awa.dead_letters`` for readers: one dead letter, the newest ones, the
depth per queue. Moving jobs in and out is the outcome core's (``outcomes/dead_letters.py``)."""

from __future__ import annotations

from psycopg.rows import dict_row
from psycopg_pool import AsyncConnectionPool

from awa_cli.db.statements import SQL
from awa_cli.dead_letters import DeadLetter, DlqDepth


async def get(pool: AsyncConnectionPool, job_id: int) -> DeadLetter | None:
    async with pool.connection() as conn, conn.cursor(row_factory=dict_row) as cur:
        await cur.execute(SQL["dead_letter_get"], {"id": job_id})
        record = await cur.fetchone()
    return None if record is None else DeadLetter.from_record(record)


async def newest(
    pool: AsyncConnectionPool, queue: str | None, kind: str | None, limit: int
) -> list[DeadLetter]:
    """Dead letters, newest first."""
    async with pool.connection() as conn, conn.cursor(row_factory=dict_row) as cur:
        await cur.execute(SQL["dead_letter_list"], {"queue": queue, "kind": kind, "limit": limit})
        return [DeadLetter.from_record(r) for r in await cur.fetchall()]


async def depth(pool: AsyncConnectionPool, queue: str | None) -> DlqDepth:
    async with pool.connection() as conn, conn.cursor(row_factory=dict_row) as cur:
        await cur.execute(SQL["dead_letter_depth"], {"queue": queue})
        return DlqDepth.from_rows(await cur.fetchall())
