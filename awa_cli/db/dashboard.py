"""The dashboard's reads of ``awa.jobs``, shaped to stay fast on a large table (issue 20).

* :func:`job_counts`: below :data:`EXACT_BELOW` rows (the planner's estimate,
  ``pg_class.reltuples``) one exact pass; above it the unfinished states are counted exactly
  from ``jobs_active_idx`` (index-only, so the cost is the backlog, not the history) and the
  terminal states (completed, failed, cancelled — usually nearly all rows) are estimated from
  a block sample of about :data:`SAMPLE_ROWS` rows, and flagged ``estimated``.
* :func:`jobs_page`: the keyset page, composed per filter combination from named conditions
  (no ``IS NULL OR``), so a state or kind filter walks its ``(state, id)`` / ``(kind, id)``
  index backwards and stops after ``limit`` rows.

Everything here is a plain read: no locks beyond a snapshot, bounded work, so serving the
dashboard does not hold up workers.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import psycopg
from psycopg import sql
from psycopg.rows import dict_row

from awa_cli.db.statements import SQL

EXACT_BELOW = 200_000
SAMPLE_ROWS = 50_000
TERMINAL = ("completed", "failed", "cancelled")
# Each filter's condition, in the order they are joined.
CONDITIONS = {
    "state": "inspect_where_state",
    "kind": "inspect_where_kind",
    "queue": "inspect_where_queue",
    "tag": "inspect_where_tag",
    "before_id": "inspect_where_before_id",
}
FILTERS = tuple(CONDITIONS)


@dataclass(frozen=True)
class CountRow:
    queue: str
    state: str
    count: int
    oldest_available_seconds: float | None
    estimated: bool


def _rows(records: list[dict[str, Any]], estimated: bool) -> list[CountRow]:
    return [
        CountRow(
            r["queue"],
            r["state"],
            int(r["count"]),
            None if r["oldest_available_seconds"] is None else float(r["oldest_available_seconds"]),
            estimated,
        )
        for r in records
    ]


async def job_counts(
    conn: psycopg.AsyncConnection[Any], *, exact_below: int = EXACT_BELOW
) -> list[CountRow]:
    """Jobs per (queue, state), ordered by queue then state (see the module docstring)."""
    async with conn.cursor(row_factory=dict_row) as cur:
        await cur.execute(SQL["inspect_table_size"])
        size = await cur.fetchone()
        rows = float(size["rows"]) if size else -1.0
        if rows < exact_below:  # -1: never analysed (a new table is small)
            await cur.execute(SQL["inspect_job_counts"])
            return _rows(await cur.fetchall(), estimated=False)
        await cur.execute(SQL["inspect_active_counts"])
        active = _rows(await cur.fetchall(), estimated=False)
        percent = min(100.0, max(0.01, 100.0 * SAMPLE_ROWS / rows))
        await cur.execute(SQL["inspect_terminal_sample"], {"percent": percent})
        terminal = _rows(await cur.fetchall(), estimated=percent < 100.0)
    return sorted(active + terminal, key=lambda r: (r.queue, r.state))


async def throughput(
    conn: psycopg.AsyncConnection[Any], queue: str | None = None
) -> list[tuple[Any, str, int]]:
    """``(minute, state, count)`` for completed and failed jobs over the last hour (of one
    ``queue``: its dead letters of the hour count as failed)."""
    async with conn.cursor(row_factory=dict_row) as cur:
        if queue is None:
            await cur.execute(SQL["inspect_throughput"])
        else:
            await cur.execute(SQL["inspect_queue_throughput"], {"queue": queue})
        return [(r["minute"], r["state"], int(r["count"])) for r in await cur.fetchall()]


async def running_by_worker(conn: psycopg.AsyncConnection[Any], queue: str) -> dict[str, int]:
    """``{host:pid: n}``: one queue's running jobs per worker process."""
    async with conn.cursor(row_factory=dict_row) as cur:
        await cur.execute(SQL["inspect_queue_running"], {"queue": queue})
        return {str(r["worker"]): int(r["running"]) for r in await cur.fetchall()}


def jobs_page_query(filters: Mapping[str, Any]) -> sql.Composed:
    """The page's statement for the filters that are set (``None`` means not filtered)."""
    names = [name for name in FILTERS if filters.get(name) is not None]
    conditions = [sql.SQL(SQL[CONDITIONS[name]]) for name in names] or [
        sql.SQL(SQL["inspect_where_none"])
    ]
    return sql.SQL(SQL["inspect_jobs_page"]).format(conditions=sql.SQL(" AND ").join(conditions))


async def jobs_page(
    conn: psycopg.AsyncConnection[Any], filters: Mapping[str, Any], limit: int
) -> list[dict[str, Any]]:
    """One keyset page of raw job records, newest first."""
    params = {name: filters.get(name) for name in FILTERS} | {"limit": limit}
    async with conn.cursor(row_factory=dict_row) as cur:
        await cur.execute(jobs_page_query(filters), params)
        return await cur.fetchall()
