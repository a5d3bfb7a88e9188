"""Claiming: available / scheduled / retryable -> running, the lease +1, in one statement.

The worker claims by queue (``claim_by_queue``), the test harness by kind
(``claim_by_kind``): the very same transition. A queue with a concurrency limit or priority
aging (a :class:`~awa_cli.limits.ClaimPlan` that is ``needed``) claims with
:func:`claim_limited` instead: the statements of ``db/sql/claim_limits.sql``, whose header
says why no limit can be over-run.
"""

from __future__ import annotations

import time
from typing import Any

from psycopg import AsyncConnection
import os
import socket


from awa_cli.db.statements import SQL
from awa_cli.jobs import JobRow
from awa_cli.limits import (
    CANDIDATES_PER_SCAN,
    LIMIT_LOCK_CLASS,
    Candidate,
    Candidates,
    array_literal,
    ClaimPlan,
)
from awa_cli.outcomes.transaction import CoreState


_IDENTITY: tuple[int, str] | None = None

# A claim's result: the rows, and the parents of the children among them by child id (the
# claim's last column, sql: claim_returning), for job.parents and job.parent_outputs.
Parents = dict[int, list[Any]]


def _claimed(records: list[Any], parents: Parents | None) -> list[JobRow]:
    """Rows from a claim's records (JOB_ROW_FIELDS, then the parents); a child's parents go
    to ``parents`` when given."""
    rows = []
    for record in records:
        row = JobRow.from_values(record[:-1])
        if record[-1] is not None and parents is not None:
            parents[row.id] = record[-1]
        rows.append(row)
    return rows


def worker_identity() -> str:
    """``host:pid`` of this process, recorded on each attempt it claims (``attempted_by``).
    Computed once per process (a forked worker has its own pid)."""
    global _IDENTITY
    pid = os.getpid()
    if _IDENTITY is None or _IDENTITY[0] != pid:
        _IDENTITY = (pid, f"{socket.gethostname()}:{pid}")
    return _IDENTITY[1]


async def claim_by_queue(
    core: CoreState,
    queue: str,
    limit: int,
    deadline: float | None,
    parents: Parents | None = None,
) -> list[JobRow]:
    """Claim up to ``limit`` runnable jobs of ``queue`` (priority → run_at → id order);
    ``deadline`` is the queue's deadline in seconds for jobs without their own (0: none).
    The claimed children's parents go to ``parents`` when given."""
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
        rows = _claimed(await cur.fetchall(), parents)
    rows.sort(key=lambda r: (r.priority, r.run_at, r.id))
    return rows


# candidates a limited take gets beyond its request (claim_limited_on)
CHUNK_SPARE = 2


async def claim_limited(
    core: CoreState,
    queue: str,
    limit: int,
    deadline: float | None,
    plan: ClaimPlan,
    parents: Parents | None = None,
) -> list[JobRow]:
    """Claim up to ``limit`` jobs of ``queue`` that its limits allow, round-robin between
    keys, in (aged) priority order within a key; see ``db/sql/claim_limits.sql``.

    Candidates come from the queue's :class:`~awa_cli.limits.Candidates` while they last
    (with the jobs inserted since merged in every ``CANDIDATES_MAX_AGE``); when a chunk of
    them claims less than asked, one more claim from a fresh scan follows (each take is one
    statement that holds its key locks until it commits)."""
    cache = core.claim_candidates.setdefault(queue, Candidates())
    rows: list[JobRow] = []
    for _ in range(2):
        cached = cache.usable(time.monotonic())
        # Autocommit: the take is one statement (its key locks last until it commits)
        async with core.claim_pool.connection() as conn:
            got = await claim_limited_on(
                conn, queue, limit - len(rows), deadline, plan, cache, parents
            )
        rows.extend(got)
        if len(rows) >= limit or not cached:
            break
        cache.clear()
    rows.sort(key=lambda r: (r.priority, r.run_at, r.id))
    return rows


async def claim_limited_on(
    conn: AsyncConnection[Any],
    queue: str,
    limit: int,
    deadline: float | None,
    plan: ClaimPlan,
    cache: Candidates | None = None,
    parents: Parents | None = None,
) -> list[JobRow]:
    """The statements of :func:`claim_limited` on ``conn`` (in a transaction the caller
    opened, the key locks are held until it ends); without ``cache``, from a scan of its own."""
    shared = plan.params
    # Two spare candidates, for ones another claimer took or a key at its limit: the take
    # locks and counts every key of its chunk, so a wider chunk costs a key lookup per spare
    # (a chunk of twice the request cost `drain_limited` 0.2 ms per claim). A claim that
    # comes back short clears the cache, and the next ranks afresh without the full keys.
    chunk_size = limit + CHUNK_SPARE
    now = time.monotonic()
    if cache is not None and cache.usable(now):
        if cache.stale_arrivals(now):  # rank only the jobs inserted since the last look
            cur = await conn.execute(
                SQL["claim_limited_arrivals"],
                {**shared, "queue": queue, "after": cache.watermark, "fetch": CANDIDATES_PER_SCAN},
            )
            arrivals, upto = _ranked(await cur.fetchall())
            cache.merge(arrivals, now, upto)
    else:
        fetch = chunk_size if cache is None else max(CANDIDATES_PER_SCAN, chunk_size)
        cur = await conn.execute(
            SQL["claim_limited_candidates"], {**shared, "queue": queue, "fetch": fetch}
        )
        scanned, upto = _ranked(await cur.fetchall())
        cache = cache if cache is not None else Candidates()
        cache.refill(scanned, now, upto)
    chunk = cache.take(chunk_size)
    if not chunk:
        return []
    ids, names, keys = (array_literal(c[i] for c in chunk) for i in range(3))
    cur = await conn.execute(
        SQL["claim_limited_take"],
        {
            **shared,
            "queue": queue,
            "limit": limit,
            "deadline": deadline,
            "worker": worker_identity(),
            "lock_class": LIMIT_LOCK_CLASS,
            "ids": ids,
            "names": names,
            "keys": keys,
        },
    )
    rows = _claimed(await cur.fetchall(), parents)
    if len(rows) < limit:
        cache.clear()  # keys at their limit, or candidates gone: the next claim scans afresh
    else:
        claimed = {r.id for r in rows}
        cache.put_back([c for c in chunk if c[0] not in claimed])
    return rows


def _ranked(rows: list[Any]) -> tuple[list[Candidate], int]:
    """A ranking's candidates and the watermark beside them (one row of NULLs but the
    watermark when there is no candidate)."""
    watermark = int(rows[0][4]) if rows else 0
    return [(r[0], r[1], r[2], r[3]) for r in rows if r[0] is not None], watermark


async def claim_by_kind(
    core: CoreState, kind: str, queue: str | None = None, parents: Parents | None = None
) -> JobRow | None:
    """Claim one job of ``kind`` (in any queue, or ``queue``) the way a worker does; a
    claimed child's parents go to ``parents`` when given."""
    async with core.claim_pool.connection() as conn, conn.cursor() as cur:
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
        rows = _claimed(await cur.fetchall(), parents)
    return rows[0] if rows else None
