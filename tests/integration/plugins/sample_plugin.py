"""A pluggy plugin for the tests: records every hook call in module-level lists.

Tests configure it through ``CONFIG`` (reset with :func:`reset`):

- ``dsn``: read the job's state from the database inside ``awa_job_event``;
- ``sleep``: ``{event name: seconds}`` to sleep in ``awa_job_event``;
- ``gate``: ``{event name: asyncio.Event}`` to wait on in ``awa_job_event``.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import psycopg

import awa_cli

EVENTS: list[Any] = []  # every event received (after any sleep / gate)
FINISHED_AT: list[tuple[int, str, float]] = []  # (job id, event name, monotonic time)
SEEN_STATES: list[tuple[int, str, str]] = []  # (job id, event name, state read from the db)
WORKERS: list[tuple[str, Any]] = []  # ("started" | "stopping", worker)
CONFIG: dict[str, Any] = {}


def reset() -> None:
    for collection in (EVENTS, FINISHED_AT, SEEN_STATES, WORKERS):
        collection.clear()
    CONFIG.clear()


def events_of(job_id: int) -> list[Any]:
    return [e for e in EVENTS if e.job.id == job_id]


@awa_cli.hookimpl
async def awa_job_event(event: Any) -> None:
    dsn = CONFIG.get("dsn")
    if dsn:
        async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
            cur = await conn.execute(
                "SELECT state::text FROM awa.jobs WHERE id = %s", (event.job.id,)
            )
            row = await cur.fetchone()
        SEEN_STATES.append((event.job.id, event.name, row[0] if row else "missing"))
    gate = CONFIG.get("gate", {}).get(event.name)
    if gate is not None:
        await gate.wait()
    delay = CONFIG.get("sleep", {}).get(event.name)
    if delay:
        await asyncio.sleep(delay)
    EVENTS.append(event)
    FINISHED_AT.append((event.job.id, event.name, time.monotonic()))


@awa_cli.hookimpl
def awa_worker_started(worker: Any) -> None:
    WORKERS.append(("started", worker))


@awa_cli.hookimpl
async def awa_worker_stopping(worker: Any) -> None:
    WORKERS.append(("stopping", worker))
