"""Reading a job's history (``AsyncClient.job_history``): the row, its follow-ups and the
job that produced it, assembled into the pure :class:`~awa_cli.history.JobTimeline`."""

from __future__ import annotations

from typing import Any

import psycopg
from psycopg.rows import dict_row

from awa_cli.db.statements import SQL
from awa_cli.history import JobTimeline, RelatedJob, timeline, trigger_of
from awa_cli.jobs import JobRow


async def read_timeline(conn: psycopg.AsyncConnection[Any], row: JobRow) -> JobTimeline:
    """The timeline of ``row``: its follow-ups (both tables) and its trigger, if any."""
    async with conn.cursor(row_factory=dict_row) as cur:
        await cur.execute(SQL["job_follow_ups"], {"id": row.id})
        follow_ups = [RelatedJob(r["id"], r["kind"], r["state"]) for r in await cur.fetchall()]
        trigger = None
        trigger_id = trigger_of(row)
        if trigger_id is not None:
            await cur.execute(SQL["job_summary"], {"id": trigger_id})
            found = await cur.fetchone()
            trigger = (
                RelatedJob(found["id"], found["kind"], found["state"])
                if found
                else RelatedJob(trigger_id, None, None)
            )
    return timeline(row, follow_ups, trigger)
