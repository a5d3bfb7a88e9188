"""Races around a rescued attempt, concurrent resolutions from many processes, and a SIGTERM
drain of a supervised worker with jobs in flight.

Extends (does not repeat) tests/integration/test_maintenance.py::test_stale_heartbeat_rescue_fences_the_late_completion
and tests/integration/test_callbacks.py::test_resolution_after_rescue_is_not_found /
test_concurrent_resolutions_exactly_one_wins: here the rescued attempt races a NEWER attempt
that another worker runs, its callback is resolved through an app-bound client (so a wrong
win would fire follow-ups), and the concurrent resolvers are separate processes.
"""

from __future__ import annotations

import asyncio
import multiprocessing
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

import psycopg
import pytest
from psycopg_pool import AsyncConnectionPool

import awa_cli as awa
from awa_cli.dispatch import Dispatcher
from awa_cli.maintenance import sweep_once
from awa_cli.outcomes import OutcomeCore
from tests.helpers import add_noop_tasks, job_row, running_worker, wait_until
from tests.reliability.harness import AWA_BIN, ROOT, Fleet, env_for, prepare_db, write_config

pytestmark = [pytest.mark.integration]


@dataclass
class Step:
    n: int = 0
    park: bool = False


@dataclass
class StepDone:
    trigger_id: int
    lease: int


def step_app(
    events: list[object], release: asyncio.Event | None, registered: list[awa.CallbackToken]
) -> awa.App:
    """Handlers block on ``release`` (None: return at once); ``park`` registers a callback first."""
    app = awa.App()

    @app.task(Step)
    async def step(job: awa.Job) -> awa.JobResult | None:
        token = None
        if job.args.park:
            token = await job.register_callback(timeout=600)
            registered.append(token)
        if release is not None:
            await release.wait()
        return awa.WaitForCallback(token) if token is not None else None

    add_noop_tasks(app, StepDone)

    @app.on_completed_enqueue(Step, StepDone)
    def done(args: Step, job: awa.JobRow) -> StepDone:
        return StepDone(job.id, job.run_lease)

    app.on_event_kind("step", events.append)
    return app


async def rescue_stale(dsn: str) -> list[int]:
    """One maintenance sweep after making every running job's heartbeat stale."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(
            "UPDATE awa.jobs SET heartbeat_at = now() - interval '1 hour' WHERE state = 'running'"
        )
    pool = AsyncConnectionPool(dsn, min_size=1, max_size=2, open=False, kwargs={"autocommit": True})
    await pool.open()
    try:
        report = await sweep_once(
            OutcomeCore(pool, None, Dispatcher(None, [])),
            heartbeat_staleness=15,
            completed_retention=3600,
            failed_retention=3600,
        )
    finally:
        await pool.close()
    with psycopg.connect(dsn, autocommit=True) as conn:  # skip the backoff: claimable now
        conn.execute("UPDATE awa.jobs SET run_at = now() WHERE state = 'retryable'")
    return [r.id for rows in report.rescued.values() for r in rows]


def follow_ups(dsn: str) -> list[tuple[int, int]]:
    with psycopg.connect(dsn) as conn:
        rows = conn.execute(
            "SELECT args FROM awa.jobs WHERE kind = 'step_done' ORDER BY id"
        ).fetchall()
    return [(r[0]["trigger_id"], r[0]["lease"]) for r in rows]


def names(events: list[object]) -> list[str]:
    return [type(e).__name__ for e in events]


@pytest.mark.asyncio
async def test_rescued_attempt_racing_the_newer_attempt_changes_nothing(dsn: str) -> None:
    """Attempt 1 is rescued and attempt 2 completes on another worker; then attempt 1's
    late completion and heartbeat arrive: fenced, no event, no second follow-up."""
    old_release, old_events, new_events = asyncio.Event(), [], []
    old_app = step_app(old_events, old_release, [])
    new_app = step_app(new_events, None, [])
    with awa.Client(dsn) as client:
        job = client.insert(Step(1))
    async with running_worker(old_app, dsn, maintenance=False, heartbeat_interval=60) as old:
        await wait_until(lambda: job_row(dsn, job.id).state == "running")
        assert await rescue_stale(dsn) == [job.id]
        async with running_worker(new_app, dsn, maintenance=False) as _new:
            await wait_until(lambda: job_row(dsn, job.id).state == "completed")
        done = job_row(dsn, job.id)
        assert done.run_lease == 2 and follow_ups(dsn) == [(job.id, 2)]
        old_release.set()  # the rescued attempt finishes late ...
        await wait_until(lambda: not old.running)
        await old.heartbeat_once()  # ... and heartbeats late
        await asyncio.sleep(0.3)
    after = job_row(dsn, job.id)
    assert after == done  # nothing changed: not state, lease, errors, heartbeat nor output
    assert follow_ups(dsn) == [(job.id, 2)]  # exactly the newer attempt's follow-up
    assert names(old_events) == ["Started"]  # the late result fired nothing
    assert names(new_events) == ["Started", "Completed"]


@pytest.mark.asyncio
async def test_callback_of_a_rescued_attempt_cannot_be_resolved_after_the_retry(dsn: str) -> None:
    """A handler registers a callback and is then rescued (stale heartbeat); the newer attempt
    parks on a fresh callback. Resolving the OLD id through an app-bound client is
    CallbackNotFound and fires nothing; the old handler's late park is fenced; the new id works."""
    release, old_events, new_events = asyncio.Event(), [], []
    old_tokens: list[awa.CallbackToken] = []
    new_tokens: list[awa.CallbackToken] = []
    old_app = step_app(old_events, release, old_tokens)
    new_app = step_app(new_events, None, new_tokens)
    with awa.Client(dsn) as client:
        job = client.insert(Step(2, park=True))
    async with running_worker(old_app, dsn, maintenance=False, heartbeat_interval=60) as old:
        await wait_until(lambda: len(old_tokens) == 1)
        assert await rescue_stale(dsn) == [job.id]
        assert job_row(dsn, job.id).callback_id is None  # the old id is dead
        async with running_worker(new_app, dsn, maintenance=False):
            await wait_until(lambda: job_row(dsn, job.id).state == "waiting_external")
        parked = job_row(dsn, job.id)
        assert parked.callback_id == new_tokens[0].id != old_tokens[0].id
        resolver_events: list[object] = []
        resolver_app = step_app(resolver_events, None, [])
        async with awa.AsyncClient(dsn, app=resolver_app) as client:
            for call in (
                lambda: client.complete_external(old_tokens[0].id),
                lambda: client.fail_external(old_tokens[0].id, "late"),
                lambda: client.retry_external(old_tokens[0].id),
                lambda: client.resume_external(old_tokens[0].id, {"x": 1}),
                lambda: client.heartbeat_callback(old_tokens[0].id, 60),
                lambda: client.resolve_callback(old_tokens[0].id, None, "complete"),
            ):
                with pytest.raises(awa.CallbackNotFound):
                    await call()
            assert job_row(dsn, job.id) == parked and follow_ups(dsn) == []
            release.set()  # the rescued handler now returns WaitForCallback(old token)
            await wait_until(lambda: not old.running)
            await asyncio.sleep(0.3)
            assert job_row(dsn, job.id) == parked
            assert names(old_events) == ["Started"] and resolver_events == []
            await client.complete_external(parked.callback_id)
        await asyncio.sleep(0.2)
    assert job_row(dsn, job.id).state == "completed"
    assert follow_ups(dsn) == [(job.id, 2)]
    assert names(resolver_events) == ["Completed"]


# --------------------------------------------------------------------------- many processes


def park_by_sql(dsn: str, count: int = 1) -> list[tuple[int, str]]:
    """Chaos triggers parked as a worker would leave them (attempt 1, lease 1, a callback)."""
    prepare_db(dsn)
    with awa.Client(dsn) as client:
        ids = [client.insert({"n": i, "mode": "park"}, kind="chaos_job").id for i in range(count)]
    with psycopg.connect(dsn, autocommit=True) as conn:
        rows = conn.execute(
            "UPDATE awa.jobs SET state = 'waiting_external', attempt = 1, run_lease = 1, "
            "attempted_at = now(), callback_id = gen_random_uuid(), "
            "callback_timeout_at = now() + interval '1 hour' WHERE id = ANY(%s) "
            "RETURNING id, callback_id::text",
            (ids,),
        ).fetchall()
    return sorted(rows)


def _resolve_in_process(dsn: str, callback_id: str, i: int, barrier: object, out: object) -> None:
    from tests.apps.chaos import app

    with awa.Client(dsn, app=app) as client:
        barrier.wait()  # type: ignore[attr-defined]
        try:
            if i % 2:
                client.complete_external(callback_id, {"by": i})
            else:
                client.fail_external(callback_id, f"failed by {i}")
            out.put("won")  # type: ignore[attr-defined]
        except awa.CallbackNotFound:
            out.put("lost")  # type: ignore[attr-defined]


def exactly_one_follow_up(dsn: str, job_id: int) -> str:
    with psycopg.connect(dsn) as conn:
        state = conn.execute(
            "SELECT state::text FROM awa.jobs WHERE id = %s", (job_id,)
        ).fetchone()[0]
        kinds = [
            r[0]
            for r in conn.execute(
                "SELECT kind FROM awa.jobs WHERE args->>'trigger_id' = %s", (str(job_id),)
            ).fetchall()
        ]
    assert kinds == [{"completed": "chaos_done", "failed": "chaos_lost"}[state]], (state, kinds)
    return state


def test_concurrent_resolutions_from_eight_processes_exactly_one_wins(dsn: str) -> None:
    [(job_id, callback_id)] = park_by_sql(dsn)
    ctx = multiprocessing.get_context("spawn")
    barrier, out = ctx.Barrier(8), ctx.Queue()
    procs = [
        ctx.Process(target=_resolve_in_process, args=(dsn, callback_id, i, barrier, out))
        for i in range(8)
    ]
    for p in procs:
        p.start()
    for p in procs:
        p.join(timeout=60)
    assert [p.exitcode for p in procs] == [0] * 8
    results = sorted(out.get(timeout=5) for _ in procs)
    assert results == ["lost"] * 7 + ["won"]
    exactly_one_follow_up(dsn, job_id)


def test_eight_awa_callback_processes_exactly_one_exits_0_the_rest_4(
    dsn: str, tmp_path: Path
) -> None:
    [(job_id, callback_id)] = park_by_sql(dsn)
    config = write_config(tmp_path)
    env = env_for(dsn)
    procs = [
        subprocess.Popen(
            [
                AWA_BIN,
                "--config",
                str(config),
                "callback",
                *(
                    ["complete", callback_id, "--payload", f'{{"by": {i}}}']
                    if i % 2
                    else ["fail", callback_id, "--error", f"by {i}"]
                ),
            ],
            env=env,
            cwd=ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for i in range(8)
    ]
    outs = [(p.wait(timeout=60), *p.communicate()) for p in procs]
    codes = sorted(code for code, _out, _err in outs)
    assert codes == [0] + [4] * 7, outs
    for code, _out, err in outs:
        if code == 4:
            assert len(err.strip().splitlines()) == 1 and "Traceback" not in err, err
    exactly_one_follow_up(dsn, job_id)


# --------------------------------------------------------------------------- SIGTERM drain


def test_sigterm_drains_in_flight_jobs_and_leaves_none_running(dsn: str, tmp_path: Path) -> None:
    prepare_db(dsn)
    with awa.Client(dsn) as client:
        client.insert_many(
            [{"n": i, "mode": "ok", "sleep": 1.0} for i in range(12)], kind="chaos_job"
        )
    fleet = Fleet(tmp_path, dsn, processes=2, concurrency=6)
    try:
        fleet.wait_ready()
        deadline = time.monotonic() + 30
        while True:
            with psycopg.connect(dsn) as conn:
                running = conn.execute(
                    "SELECT count(*) FROM awa.jobs WHERE state = 'running'"
                ).fetchone()[0]
            if running == 12:
                break
            assert time.monotonic() < deadline, running
            time.sleep(0.02)
        code = fleet.stop(timeout=30)
    finally:
        fleet.kill()
    assert code == 0, fleet.log()[-3000:]
    with psycopg.connect(dsn) as conn:
        states = dict(
            conn.execute(
                "SELECT state::text, count(*) FROM awa.jobs WHERE kind = 'chaos_job' GROUP BY 1"
            ).fetchall()
        )
        done = conn.execute("SELECT count(*) FROM awa.jobs WHERE kind = 'chaos_done'").fetchone()[0]
        runs = conn.execute(
            "SELECT count(*), count(DISTINCT job_id) FROM awa_test.executions"
        ).fetchone()
        stuck = conn.execute("SELECT count(*) FROM awa.jobs WHERE state = 'running'").fetchone()[0]
    assert stuck == 0
    assert states == {"completed": 12}, states
    assert done == 12  # each drained completion committed its follow-up with it
    assert runs == (12, 12)  # finished in flight, not interrupted and re-run
