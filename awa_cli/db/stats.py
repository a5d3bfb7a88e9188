"""Statistics over ``awa.jobs`` for the gauges (the ``queue_depth`` statement of ``sql/metrics.sql``)."""

from __future__ import annotations

from typing import Any

import psycopg

from awa_cli.db.statements import SQL


async def queue_depth(conn: psycopg.AsyncConnection[Any]) -> list[tuple[Any, ...]]:
    """``(queue, available, oldest_available_age_seconds)`` of every queue with a backlog."""
    return await (await conn.execute(SQL["queue_depth"])).fetchall()
