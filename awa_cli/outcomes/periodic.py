"""Periodic jobs (architecture §9): the leader's firing sweep, a worker's registration of its
schedules, and the operator's pause, resume, trigger and delete.

* :func:`sweep` — ONE transaction: lock the due schedules, record each due fire time in
  ``awa.periodic_fires`` (the dedup on (name, fire time)), insert the jobs of the new ones
  with ``insert_each`` (the follow-ups' statement: a periodic job is an ordinary job), advance
  the schedules, read when the next one is due; commit; only then NOTIFY the queues that got
  jobs. A leader killed before the commit leaves nothing; a second leader finds the fires
  taken. So there is exactly one job per fire time (``awa_cli/db/periodic.py``).
* :func:`register` — a worker's schedules at its start (one upsert); the leader is woken on
  ``awa_periodic`` when a row was written, so a new schedule's first fire is not late.
* :func:`pause`, :func:`resume`, :func:`trigger`, :func:`delete` — one transaction each, with
  an ``awa.audit_log`` entry when an actor is given (``cli:<os user>`` from ``awa cron``).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

import psycopg

from awa_cli.db import periodic as calls
from awa_cli.db.params import insert_params
from awa_cli.db.statements import SQL
from awa_cli.errors import PeriodicNotFound, UniqueConflict
from awa_cli.jobs import JobRow
from awa_cli.outcomes import audit
from awa_cli.periodic import PeriodicJob, Schedule, iso_utc

if TYPE_CHECKING:
    from awa_cli.outcomes.transaction import CoreState

log = logging.getLogger("awa.periodic")

# A stored definition that does not validate is logged once per process and message.
_INVALID_LOGGED: dict[str, str] = {}


@dataclass(frozen=True)
class PeriodicSweep:
    """One committed sweep: what it did, and when the next schedule is due (``due_in``
    seconds by the database's clock, negative when overdue; None: nothing will fire)."""

    result: calls.SweepResult
    due_in: float | None


async def sweep(core: CoreState) -> PeriodicSweep:
    """Fire every due schedule (the database's clock) in one transaction; then wake queues."""
    async with core.pool.connection() as conn:
        async with conn.transaction():
            result = await calls.sweep(conn)
            _, due_in = await calls.next_due_in(conn)
    for row in result.fired:
        if row["job_id"] is not None:
            log.info(
                "action=periodic_fired name=%s fire_at=%s job_id=%s",
                row["name"],
                iso_utc(row["fire_at"]),
                row["job_id"],
                extra={"action": "periodic_fired", "schedule": row["name"], "job": row["job_id"]},
            )
    for name, error in result.invalid:
        if _INVALID_LOGGED.get(name) != error:
            _INVALID_LOGGED[name] = error
            log.error(
                "action=periodic_invalid name=%s: %s (it fires nothing until a worker upserts "
                "a valid definition or `awa cron delete %s`)",
                name,
                error,
                name,
                extra={"action": "periodic_invalid", "schedule": name},
            )
    await _wake(core, result.queues)
    return PeriodicSweep(result, due_in)


async def _wake(core: CoreState, queues: Iterable[str]) -> None:
    """After the commit: NOTIFY the queues that got jobs (a worker's sessions defer the insert
    trigger's NOTIFY; the poll backstop still finds the jobs if this fails)."""
    names = sorted(set(queues))
    if not names:
        return
    try:
        async with core.pool.connection() as conn:
            await conn.execute(SQL["notify_queues"], {"queues": names})
    except (psycopg.Error, OSError) as exc:
        log.warning("waking queues %s failed: %s", names, exc, extra={"action": "notify_failed"})


async def prune_fires(core: CoreState) -> int:
    """Forget recorded fires a day behind their schedule's last fire (they are never due
    again)."""
    async with core.pool.connection() as conn:
        return await calls.prune_fires(conn)


@dataclass(frozen=True)
class Registered:
    """What :func:`register` did: the names it wrote (new or changed) and the stored schedules
    the app does not define (they keep firing until ``awa cron delete``)."""

    written: tuple[str, ...]
    not_defined: tuple[str, ...]


async def register(core: CoreState, schedules: Iterable[Schedule]) -> Registered:
    """Upsert the app's schedules in one transaction, waking the leader if any was written."""
    ordered = list(schedules)
    async with core.pool.connection() as conn:
        async with conn.transaction():
            written = await calls.upsert(conn, ordered)
            if written:
                await calls.wake_leader(conn)
            stored = [job.name for job in await calls.list_all(conn)]
    defined = {s.name for s in ordered}
    return Registered(
        tuple(r["name"] for r in written), tuple(n for n in stored if n not in defined)
    )


def _found(name: str, job: PeriodicJob | None) -> PeriodicJob:
    if job is None:
        raise PeriodicNotFound(f"periodic job {name!r} not found")
    return job


async def set_paused(
    core: CoreState, name: str, paused: bool, actor: str | None = None
) -> PeriodicJob:
    """Pause or resume ``name`` (a resume wakes the leader: the schedule is due at once)."""
    async with core.pool.connection() as conn:
        async with conn.transaction():
            if not await calls.set_paused(conn, name, paused):
                raise PeriodicNotFound(f"periodic job {name!r} not found")
            if not paused:
                await calls.wake_leader(conn)
            await audit.record(
                conn, actor, "cron.pause" if paused else "cron.resume", f"periodic:{name}"
            )
            return _found(name, await calls.get(conn, name))


async def delete(core: CoreState, name: str, actor: str | None = None) -> PeriodicJob:
    """Drop ``name`` and its recorded fires; the row as it was."""
    async with core.pool.connection() as conn:
        async with conn.transaction():
            job = _found(name, await calls.get(conn, name))
            await calls.delete(conn, name)
            await audit.record(conn, actor, "cron.delete", f"periodic:{name}")
            return job


async def trigger(core: CoreState, name: str, actor: str | None = None) -> JobRow:
    """Enqueue the schedule's job now (``awa.fire_at`` = now) through the ordinary insert;
    the schedule itself is left as it is. UniqueConflict when its unique key is held."""
    async with core.pool.connection() as conn:
        async with conn.transaction():
            job = _found(name, await calls.get(conn, name))
            schedule = Schedule.from_definition(name, _definition(job))
            prepared = calls.trigger_job(schedule, datetime.now(UTC))
            async with conn.cursor() as cur:
                await cur.execute(SQL["insert_one"], insert_params(prepared))
                record = await cur.fetchone()
            if record is None:
                raise UniqueConflict(prepared.kind)
            row = JobRow.inserted(prepared, record)
            await audit.record(
                conn, actor, "cron.trigger", f"periodic:{name}", detail={"job_id": row.id}
            )
    await _wake(core, [row.queue])
    return row


def _definition(job: PeriodicJob) -> Mapping[str, Any]:
    return {
        "cron": job.cron,
        "timezone": job.timezone,
        "catch_up": job.catch_up,
        "kind": job.kind,
        "args": job.args,
        "options": job.options,
    }
