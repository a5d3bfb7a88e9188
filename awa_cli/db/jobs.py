"""The gateway of ``awa.jobs`` for producers and readers: insert, fetch, list, count.

The client (:mod:`awa_cli.client`) and its module-level ``insert`` / ``insert_async`` call
these; the statements are in ``sql/inserts.sql``, ``sql/jobs.sql`` and ``sql/stats.sql``.
Counts per queue and state come from :func:`awa_cli.db.dashboard.job_counts`, the one
large-table-safe count that the dashboard, ``awa queue stats`` and the metrics share.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, NamedTuple
from uuid import UUID

import psycopg
from psycopg.rows import DictRow, dict_row
from psycopg_pool import AsyncConnectionPool

from awa_cli.db.dashboard import CountRow, job_counts
from awa_cli.db.params import insert_many_params, insert_params
from awa_cli.db.statements import SQL
from awa_cli.jobs import PreparedJob


class WaitState(NamedTuple):
    """What a handler waiting inside ``wait_for_callback`` finds on a wake-up."""

    state: str  # "deleted" when the row is gone
    callback_id: UUID | None
    callback_result: Any
    run_lease: int


def insert_one_sync(conn: psycopg.Connection[Any], prepared: PreparedJob) -> tuple[Any, Any]:
    """``(row, holder)``: the inserted row's values, or None and the unique key's holder."""
    with conn.cursor() as cur:
        cur.execute(SQL["insert_one"], insert_params(prepared))
        record = cur.fetchone()
        holder = None
        if record is None:
            cur.execute(SQL["find_unique_holder"], {"unique_key": prepared.unique_key})
            holder = cur.fetchone()
    return record, holder


async def insert_one(conn: psycopg.AsyncConnection[Any], prepared: PreparedJob) -> tuple[Any, Any]:
    """:func:`insert_one_sync` on an async connection."""
    async with conn.cursor() as cur:
        await cur.execute(SQL["insert_one"], insert_params(prepared))
        record = await cur.fetchone()
        holder = None
        if record is None:
            await cur.execute(SQL["find_unique_holder"], {"unique_key": prepared.unique_key})
            holder = await cur.fetchone()
    return record, holder


async def insert_many(conn: psycopg.AsyncConnection[Any], prepared: list[PreparedJob]) -> int:
    """One statement for a batch with unique keys (conflicts skipped); the rows inserted."""
    async with conn.cursor() as cur:
        await cur.execute(SQL["insert_many"], insert_many_params(prepared))
        return cur.rowcount


async def get(conn: psycopg.AsyncConnection[Any], job_id: int) -> DictRow | None:
    async with conn.cursor(row_factory=dict_row) as cur:
        await cur.execute(SQL["get_job"], {"id": job_id})
        return await cur.fetchone()


async def newest(
    conn: psycopg.AsyncConnection[Any], filters: Mapping[str, Any], limit: int
) -> list[DictRow]:
    """The newest ``limit`` jobs matching ``state`` / ``kind`` / ``queue`` (None: any)."""
    async with conn.cursor(row_factory=dict_row) as cur:
        await cur.execute(SQL["list_jobs"], {**filters, "limit": limit})
        return await cur.fetchall()


async def counts(conn: psycopg.AsyncConnection[Any]) -> list[CountRow]:
    """Jobs per (queue, state): exact on a small table, the backlog exact and the history
    estimated on a large one (see :func:`awa_cli.db.dashboard.job_counts`)."""
    return await job_counts(conn)


async def completed_last_minute(
    conn: psycopg.AsyncConnection[Any], queue: str | None
) -> dict[str, int]:
    """Completions of the last minute per queue, from the retention index's range."""
    rows = await (await conn.execute(SQL["completed_last_minute"], {"queue": queue})).fetchall()
    return {name: int(n) for name, n in rows}


async def seconds_until_due(
    pool: AsyncConnectionPool,
    queue: str,
    rated: Mapping[str, Any] | None = None,
    since: float = 0.0,
) -> float | None:
    """Seconds until the queue's next scheduled or retryable job falls due, or, with a rate
    limit's claim parameters (``ClaimPlan.params``), until one of its keys that was out of
    rate budget ``since`` seconds ago (when the short claim began) gets budget again
    (``limit_rate_free_in``; 0 when it already has); None: neither."""
    async with pool.connection() as conn:
        if rated is None:
            row = await (await conn.execute(SQL["next_due"], {"queue": queue})).fetchone()
            return None if row is None or row[0] is None else float(row[0])
        params = {**rated, "since": since, "queue": queue}
        free = await (await conn.execute(SQL["limit_rate_free_in"], params)).fetchone()
    if free is None:
        return None
    due = None if free[1] is None else float(free[1])
    if free[0] is not None:
        # a millisecond late rather than early: an early claim finds no budget yet
        free_in = max(0.0, float(free[0])) + 0.001
        due = free_in if due is None else min(due, free_in)
    return due


async def wait_state(pool: AsyncConnectionPool, job_id: int) -> WaitState:
    """What a handler waiting in place checks on each wake-up: the job's state, callback,
    result and lease (``deleted`` when the row is gone)."""
    async with pool.connection() as conn:
        row = await (await conn.execute(SQL["poll_wait"], {"id": job_id})).fetchone()
    if row is None:
        return WaitState("deleted", None, None, -1)
    return WaitState(str(row[0]), row[1], row[2], int(row[3]))
