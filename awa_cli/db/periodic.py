"""The periodic statements of ``db/sql/periodic.sql``: their parameters, and thin async calls.

The leader's sweep (architecture §9) runs, in one transaction: ``periodic_due`` → for each row
:func:`awa_cli.periodic.due_fires` → ``periodic_fire`` with :func:`fire_params` (the
dedup) → ``insert_each`` for the jobs of the new fires (:func:`fire_job`; the statement every
follow-up goes through, so a periodic job is an ordinary job) →
``periodic_advance`` with :func:`sweep_advance_params` (:func:`awa_cli.periodic.plan_sweep`
makes the plan of the whole sweep); :func:`sweep` does exactly that on a connection.

None of the calls here opens or commits a transaction: the caller (the outcome core's
transaction frame) does, so that a sweep is one transaction and its NOTIFYs follow the commit.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from psycopg import AsyncConnection
from psycopg.rows import dict_row

from awa_cli.db.channels import PERIODIC_CHANNEL
from awa_cli.db.statements import SQL
from awa_cli.db.params import insert_each_params
from awa_cli.jobs import PreparedJob, prepare
from awa_cli.periodic import (
    DEFAULT_GRACE,
    DEFAULT_LIMIT,
    DueRow,
    PeriodicJob,
    Schedule,
    SweepPlan,
    plan_sweep,
)


def upsert_params(
    schedules: Iterable[Schedule], next_fire_ats: Mapping[str, datetime | None] | None = None
) -> dict[str, Any]:
    """``periodic_upsert`` for a worker's schedules. ``next_fire_ats`` by name; a name left
    out (or None) lets the leader compute the first fire time (the row is due at once)."""
    ordered = sorted(schedules, key=lambda s: s.name)
    chosen = next_fire_ats or {}
    return {
        "names": [s.name for s in ordered],
        "definitions": [s.definition_json() for s in ordered],
        "next_fire_ats": [chosen.get(s.name) for s in ordered],
    }


def fire_params(fires: Sequence[tuple[Schedule, datetime]]) -> dict[str, Any]:
    """``periodic_fire`` for (schedule, fire time) pairs: the fire times to record."""
    return {
        "names": [schedule.name for schedule, _ in fires],
        "fire_ats": [fire_at for _, fire_at in fires],
    }


def fire_job(schedule: Schedule, fire_at: datetime) -> PreparedJob:
    """The job of one fire time, validated as every insert is (``run_at`` = the fire time,
    the ``awa.periodic``/``awa.fire_at`` metadata). A unique key with ``by_period`` buckets
    the fire time, not the moment of the sweep."""
    return prepare(schedule.args, schedule.insert_opts(fire_at), now=fire_at.timestamp())


def trigger_job(schedule: Schedule, now: datetime) -> PreparedJob:
    """The job ``awa cron trigger`` enqueues: the schedule's job with ``awa.fire_at`` = now,
    to run at once (the database's now, whatever this host's clock says)."""
    opts = dataclasses.replace(schedule.insert_opts(now), run_at=None)
    return prepare(schedule.args, opts, now=now.timestamp())


def advance_params(
    rows: Sequence[tuple[str, datetime | None, datetime | None, int | None]],
) -> dict[str, Any]:
    """``periodic_advance`` for (name, last_fire_at, next_fire_at, last_job_id) per swept
    schedule; None for last_fire_at / last_job_id keeps the stored value."""
    return {
        "names": [row[0] for row in rows],
        "last_fire_ats": [row[1] for row in rows],
        "next_fire_ats": [row[2] for row in rows],
        "last_job_ids": [row[3] for row in rows],
    }


def sweep_advance_params(plan: SweepPlan, fired: Iterable[Mapping[str, Any]]) -> dict[str, Any]:
    """``periodic_advance`` after ``periodic_fire`` returned ``fired`` for ``plan.fires``: each
    schedule's last job is the one inserted for its last fire time (none: the stored id stays,
    as when that fire was already taken or its unique key held)."""
    job_of = {(r["name"], r["fire_at"]): r["job_id"] for r in fired if r["job_id"] is not None}
    return advance_params(
        [
            (name, last, following, None if last is None else job_of.get((name, last)))
            for name, (last, following) in plan.advances.items()
        ]
    )


# --- calls (on the caller's connection and transaction) --------------------------------------


async def _rows(
    conn: AsyncConnection[Any], name: str, params: Mapping[str, Any] | None = None
) -> list[dict[str, Any]]:
    async with conn.cursor(row_factory=dict_row) as cur:
        await cur.execute(SQL[name], params or {})
        return await cur.fetchall() if cur.description else []


async def upsert(
    conn: AsyncConnection[Any],
    schedules: Iterable[Schedule],
    next_fire_ats: Mapping[str, datetime | None] | None = None,
) -> list[dict[str, Any]]:
    """A worker's schedules at its start (see ``periodic_upsert``); the rows written."""
    params = upsert_params(schedules, next_fire_ats)
    if not params["names"]:
        return []
    return await _rows(conn, "periodic_upsert", params)


@dataclass(frozen=True)
class SweepResult:
    """What one sweep did: ``fired`` the result rows of ``periodic_fire`` (name, fire_at,
    new_fire, job_id), ``queues`` the queues that got available jobs (to NOTIFY after the
    commit), ``invalid`` (name, error) of stored definitions that do not validate."""

    swept: int
    fired: tuple[Mapping[str, Any], ...]
    queues: frozenset[str]
    invalid: tuple[tuple[str, str], ...]

    @property
    def inserted(self) -> int:
        return sum(1 for row in self.fired if row["job_id"] is not None)


async def sweep(
    conn: AsyncConnection[Any],
    *,
    now: datetime | None = None,
    schedules_per_sweep: int = 1000,
    limit: int = DEFAULT_LIMIT,
    grace: timedelta = DEFAULT_GRACE,
) -> SweepResult:
    """One sweep of the due schedules (``now`` None: the database's clock), inside the
    caller's transaction: lock the due rows, enqueue their fire times, advance them."""
    rows = await _rows(conn, "periodic_due", {"now": now, "limit": schedules_per_sweep})
    if not rows:
        return SweepResult(0, (), frozenset(), ())
    due = [DueRow(r["name"], r["definition"], r["active_since"], r["last_fire_at"]) for r in rows]
    plan = plan_sweep(due, rows[0]["now"], limit=limit, grace=grace)
    fired: list[dict[str, Any]] = []
    queues: set[str] = set()
    if plan.fires:
        fired = await _rows(conn, "periodic_fire", fire_params(plan.fires))
        new = [(row, fire_job(s, t)) for row, (s, t) in zip(fired, plan.fires, strict=True)]
        new = [(row, job) for row, job in new if row["new_fire"]]
        for row in fired:
            row["job_id"] = None
        if new:
            ids = await insert_jobs(conn, [job for _, job in new])
            for (row, job), job_id in zip(new, ids, strict=True):
                row["job_id"] = job_id
                if job_id is not None:
                    queues.add(job.queue)
    await _rows(conn, "periodic_advance", sweep_advance_params(plan, fired))
    return SweepResult(len(rows), tuple(fired), frozenset(queues), plan.invalid)


async def insert_jobs(conn: AsyncConnection[Any], jobs: Sequence[PreparedJob]) -> list[int | None]:
    """Insert the jobs of new fires with ``insert_each``, the statement follow-ups go through:
    each one's id, or None where its own unique key is held (the fire still counts as done)."""
    async with conn.cursor() as cur:
        await cur.execute(SQL["insert_each"], insert_each_params(jobs))
        return [None if r[0] is None else int(r[0]) for r in await cur.fetchall()]


async def next_due(conn: AsyncConnection[Any]) -> datetime | None:
    """The earliest next_fire_at of the unpaused schedules (None: nothing will fire)."""
    return (await next_due_in(conn))[0]


async def next_due_in(conn: AsyncConnection[Any]) -> tuple[datetime | None, float | None]:
    """The earliest next_fire_at of the unpaused schedules and the seconds until it by the
    database's clock (negative: overdue; both None: nothing will fire)."""
    rows = await _rows(conn, "periodic_next_due")
    return rows[0]["next_fire_at"], rows[0]["seconds"]


async def wake_leader(conn: AsyncConnection[Any]) -> None:
    """NOTIFY the maintenance leader that a schedule is due at once (sent on commit)."""
    await _rows(conn, "periodic_wake", {"channel": PERIODIC_CHANNEL})


async def list_all(conn: AsyncConnection[Any]) -> list[PeriodicJob]:
    return [PeriodicJob.from_record(r) for r in await _rows(conn, "periodic_list")]


async def get(conn: AsyncConnection[Any], name: str) -> PeriodicJob | None:
    rows = await _rows(conn, "periodic_get", {"name": name})
    return PeriodicJob.from_record(rows[0]) if rows else None


async def set_paused(conn: AsyncConnection[Any], name: str, paused: bool) -> bool:
    """Pause or resume; False: no schedule of that name."""
    statement = "periodic_pause" if paused else "periodic_resume"
    return bool(await _rows(conn, statement, {"name": name}))


async def delete(conn: AsyncConnection[Any], name: str) -> bool:
    """Drop the schedule and its recorded fires; False: no schedule of that name."""
    return bool(await _rows(conn, "periodic_delete", {"name": name}))


async def prune_fires(conn: AsyncConnection[Any], keep: timedelta = timedelta(days=1)) -> int:
    """Forget recorded fires more than ``keep`` behind their schedule's last fire."""
    async with conn.cursor() as cur:
        await cur.execute(SQL["periodic_prune_fires"], {"keep": keep})
        return cur.rowcount
