"""Claiming: available / scheduled / retryable -> running, the lease +1, in one statement.

The worker claims by queue (``claim_by_queue``), the test harness by kind
(``claim_by_kind``): the very same transition. Pause-aware and limit-aware claims belong
here too, as further named statements in ``db/sql/claim.sql``.
"""

from __future__ import annotations

import os
import socket

from psycopg.rows import dict_row

from awa_cli.db.statements import SQL
from awa_cli.jobs import JobRow
from awa_cli.outcomes.transaction import CoreState


_IDENTITY: tuple[int, str] | None = None


def worker_identity() -> str:
    """``host:pid`` of this process, recorded on each attempt it claims (``attempted_by``).
    Computed once per process (a forked worker has its own pid)."""
    global _IDENTITY
    pid = os.getpid()
    if _IDENTITY is None or _IDENTITY[0] != pid:
        _IDENTITY = (pid, f"{socket.gethostname()}:{pid}")
    return _IDENTITY[1]


async def claim_by_queue(
    core: CoreState, queue: str, limit: int, deadline: float | None
) -> list[JobRow]:
    """Claim up to ``limit`` runnable jobs of ``queue`` (priority → run_at → id order);
    ``deadline`` is the queue's deadline in seconds for jobs without their own (0: none)."""
    async with core.claim_pool.connection() as conn, conn.cursor() as cur:
        await cur.execute(
            SQL["claim_by_queue"],
            {
                "queue": queue,
                "limit": limit,
                "deadline": deadline,
                "worker": worker_identity(),
            },
        )
        rows = [JobRow.from_values(r) for r in await cur.fetchall()]
    rows.sort(key=lambda r: (r.priority, r.run_at, r.id))
    return rows


async def claim_by_kind(core: CoreState, kind: str, queue: str | None = None) -> JobRow | None:
    """Claim one job of ``kind`` (in any queue, or ``queue``) the way a worker does."""
    async with core.claim_pool.connection() as conn, conn.cursor(row_factory=dict_row) as cur:
        await cur.execute(
            SQL["claim_by_kind"],
            {
                "kind": kind,
                "queue": queue,
                "limit": 1,
                "deadline": 0,
                "worker": worker_identity(),
            },
        )
        record = await cur.fetchone()
    return None if record is None else JobRow.from_record(record)


async def seconds_until_due(core: CoreState, queue: str) -> float | None:
    """Seconds until the queue's next scheduled or retryable job falls due (None: none)."""
    async with core.pool.connection() as conn:
        cur = await conn.execute(SQL["next_due"], {"queue": queue})
        row = await cur.fetchone()
    if row is None or row[0] is None:
        return None
    return float(row[0])
