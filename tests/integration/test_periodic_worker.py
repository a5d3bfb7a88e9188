"""Periodic jobs in a real Worker (in this process) against PostgreSQL: registration at start,
firing by the maintenance leader within a second, ordinary-job behaviour (hooks, follow-ups,
unique options), the leader's wake-up, and what is logged."""

from __future__ import annotations

import itertools
import logging
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import psycopg
import pytest
from tests.helpers import add_noop_tasks, running_worker, wait_until

import awa_cli as awa
from awa_cli.db import periodic as calls
from awa_cli.periodic import Schedule

pytestmark = pytest.mark.integration

FAST = {
    "rescue_interval": 5.0,  # long: firing on time must not wait for the rescue interval
    "leader_election_interval": 0.2,
    "heartbeat_interval": 0.5,
    "heartbeat_staleness": 5.0,
}


@dataclass
class Tick:
    n: int = 0


@dataclass
class Tock:
    of: int


def tick_app() -> awa.App:
    return add_noop_tasks(awa.App(), Tick, Tock)


def rows(dsn: str, sql: str, *params: Any) -> list[tuple[Any, ...]]:
    with psycopg.connect(dsn, autocommit=True) as conn:
        return conn.execute(sql, params).fetchall()  # type: ignore[arg-type]


def periodic_jobs(dsn: str, name: str) -> list[tuple[Any, ...]]:
    """(id, run_at, created_at, state) of the jobs of schedule ``name``, oldest fire first."""
    return rows(
        dsn,
        "SELECT id, run_at, created_at, state::text FROM awa.jobs"
        " WHERE metadata->>'awa.periodic' = %s ORDER BY run_at",
        name,
    )


@pytest.mark.asyncio
async def test_fires_every_second_within_a_second_as_ordinary_jobs(dsn: str) -> None:
    app = tick_app()
    app.periodic("every_second", "* * * * * *", Tick(1))
    hooks: list[str] = []
    app.on_event_kind("tick", lambda event: hooks.append(type(event).__name__))

    @app.on_completed_enqueue(Tick, Tock)
    def tock_after(args: Tick, job: awa.JobRow) -> Tock:
        return Tock(job.id)

    async with running_worker(app, dsn, **FAST) as worker:
        await wait_until(worker.schedules_registered.is_set, timeout=10)
        await wait_until(lambda: len(periodic_jobs(dsn, "every_second")) >= 4, timeout=15)
        await wait_until(lambda: "Completed" in hooks, timeout=10)
        await wait_until(lambda: rows(dsn, "SELECT 1 FROM awa.jobs WHERE kind = 'tock'"), 10)
    fired = periodic_jobs(dsn, "every_second")
    fire_times = [r[1] for r in fired]
    assert len(set(fire_times)) == len(fire_times)  # one job per fire time
    # consecutive seconds: nothing skipped between the first and the last fire
    assert all(b - a == timedelta(seconds=1) for a, b in itertools.pairwise(fire_times))
    # within 1 s of the fire time although the rescue interval is 5 s (the leader woke at it);
    # the first fire after the schedule was stored may wait for the leader's first sweep
    lateness = sorted((created - run_at).total_seconds() for _, run_at, created, _ in fired[1:])
    assert lateness[len(lateness) // 2] < 1.0, lateness
    [(metadata,)] = rows(dsn, "SELECT metadata FROM awa.jobs WHERE id = %s", fired[0][0])
    assert metadata["awa.periodic"] == "every_second"
    assert metadata["awa.fire_at"] == fire_times[0].strftime("%Y-%m-%dT%H:%M:%SZ")
    [(state, last_fire, last_job)] = rows(
        dsn,
        "SELECT paused, last_fire_at, last_job_id FROM awa.periodic_jobs"
        " WHERE name = 'every_second'",
    )
    assert state is False and last_fire >= fire_times[-1]
    assert last_job in {r[0] for r in periodic_jobs(dsn, "every_second")}


@pytest.mark.asyncio
async def test_unique_options_apply_to_periodic_jobs(dsn: str) -> None:
    app = tick_app()
    # unique by args (held while pending): the first fire's job waits in a queue no worker
    # runs, so each later fire finds its key held and inserts nothing
    app.periodic(
        "unique_tick",
        "* * * * * *",
        Tick(2),
        queue="nobody_works_this",
        unique_opts=awa.UniqueOpts(by_args=True),
    )
    async with running_worker(app, dsn, **FAST):
        await wait_until(
            lambda: (
                rows(dsn, "SELECT 1 FROM awa.periodic_fires WHERE name = 'unique_tick'")
                and len(rows(dsn, "SELECT 1 FROM awa.periodic_fires")) >= 3
            ),
            timeout=15,
        )
    assert len(periodic_jobs(dsn, "unique_tick")) == 1  # the fires counted, one job held the key


@pytest.mark.asyncio
async def test_stored_schedules_the_app_does_not_define_are_warned_and_keep_firing(
    dsn: str, caplog: pytest.LogCaptureFixture
) -> None:
    orphan = Schedule("orphan", "* * * * * *", "tick", {"n": 3}, options={"queue": "default"})
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
        await calls.upsert(conn, [orphan])
    caplog.set_level(logging.INFO)
    async with running_worker(tick_app(), dsn, **FAST) as worker:
        await wait_until(worker.schedules_registered.is_set, timeout=10)
        await wait_until(lambda: len(periodic_jobs(dsn, "orphan")) >= 2, timeout=15)
    warnings = [r for r in caplog.records if getattr(r, "action", "") == "periodic_not_defined"]
    assert len(warnings) == 1 and "awa cron delete orphan" in warnings[0].getMessage()
    fired = [r.getMessage() for r in caplog.records if getattr(r, "action", "") == "periodic_fired"]
    assert fired and fired[0].startswith("action=periodic_fired name=orphan fire_at=")
    assert "job_id=" in fired[0]


@pytest.mark.asyncio
async def test_an_invalid_stored_definition_is_logged_once_and_fires_nothing(
    dsn: str, caplog: pytest.LogCaptureFixture
) -> None:
    good = Schedule("broken", "* * * * * *", "tick", {}, options={"queue": "default"})
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
        await calls.upsert(conn, [good])
        await conn.execute(
            'UPDATE awa.periodic_jobs SET definition = definition || \'{"timezone": "Mars/Base"}\''
        )
    caplog.set_level(logging.INFO)
    async with running_worker(tick_app(), dsn, **{**FAST, "rescue_interval": 0.2}):
        await wait_until(
            lambda: any(getattr(r, "action", "") == "periodic_invalid" for r in caplog.records)
        )
        # it is retried a minute later, not every sweep: the row moved on
        await wait_until(
            lambda: rows(
                dsn,
                "SELECT 1 FROM awa.periodic_jobs WHERE next_fire_at > now() + interval '30 s'",
            )
        )
    invalid = [r for r in caplog.records if getattr(r, "action", "") == "periodic_invalid"]
    assert len(invalid) == 1 and "Mars/Base" in invalid[0].getMessage()
    assert periodic_jobs(dsn, "broken") == []


@pytest.mark.asyncio
async def test_a_new_schedule_wakes_the_leader_at_once(dsn: str) -> None:
    """The leader sleeps out a long rescue interval (its only schedule fires yearly); a
    schedule stored meanwhile (a worker starting elsewhere: NOTIFY awa_periodic) still fires
    on time, and so does a resumed one."""
    app = tick_app()
    app.periodic("yearly", "@yearly", Tick(0))
    async with running_worker(app, dsn, **{**FAST, "rescue_interval": 60.0}):
        # the leader's first sweep computed the yearly fire time: it now sleeps
        await wait_until(
            lambda: rows(dsn, "SELECT 1 FROM awa.periodic_jobs WHERE next_fire_at > now()")
        )
        late = Schedule("late", "* * * * * *", "tick", {}, options={"queue": "default"})
        async with awa.AsyncClient(dsn) as client:
            await client.core.register_schedules([late])
            await wait_until(lambda: len(periodic_jobs(dsn, "late")) >= 2, timeout=10)
            await client.pause_periodic("yearly")
            await client.pause_periodic("late")
            fired = len(periodic_jobs(dsn, "late"))
            await client.resume_periodic("late")
            await wait_until(lambda: len(periodic_jobs(dsn, "late")) >= fired + 2, timeout=10)


@pytest.mark.asyncio
async def test_the_leader_prunes_old_fires(dsn: str) -> None:
    hourly = Schedule("hourly", "@hourly", "tick", {}, options={"queue": "default"})
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
        await calls.upsert(conn, [hourly])
        await conn.execute(
            "UPDATE awa.periodic_jobs SET last_fire_at = date_trunc('hour', now()),"
            " next_fire_at = date_trunc('hour', now()) + interval '1 hour'"
        )
        await conn.execute(
            "INSERT INTO awa.periodic_fires (name, fire_at)"
            " SELECT 'hourly', date_trunc('hour', now()) - h * interval '1 hour'"
            " FROM generate_series(0, 47) h"
        )
    async with running_worker(tick_app(), dsn, **FAST):
        await wait_until(
            lambda: rows(dsn, "SELECT count(*) FROM awa.periodic_fires") == [(25,)], timeout=10
        )
    assert periodic_jobs(dsn, "hourly") == []  # nothing fired: the next fire is an hour away
