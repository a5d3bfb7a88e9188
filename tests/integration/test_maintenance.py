"""Maintenance: rescue sweeps, rescue follow-ups, leader election, retention, `awa rescue run`."""

from __future__ import annotations

import asyncio
import json
import logging
import os
import sys
from dataclasses import dataclass
from pathlib import Path

import psycopg
import pytest
from psycopg_pool import AsyncConnectionPool

import awa_cli as awa
from awa_cli.maintenance import Maintenance, sweep_once
from awa_cli.outcomes import OutcomeCore
from awa_cli.worker.runtime import Timings
from tests.helpers import ROOT, execute, job_row, run_captured, running_worker, wait_until

pytestmark = [pytest.mark.integration]


@dataclass
class Slow:
    n: int = 0


@dataclass
class Alert:
    job_id: int
    reason: str


async def core_for(dsn: str, app: awa.App | None = None, hooks: list[object] | None = None):  # type: ignore[no-untyped-def]
    from awa_cli.dispatch import Dispatcher

    pool = AsyncConnectionPool(dsn, min_size=1, max_size=4, open=False, kwargs={"autocommit": True})
    await pool.open()
    dispatcher = Dispatcher(app, [("test", hooks.append)] if hooks is not None else [])
    return pool, OutcomeCore(pool, app, dispatcher)


def slow_app(release: asyncio.Event, cancelled: list[int]) -> awa.App:
    app = awa.App()

    @app.task(Slow)
    async def slow(job: awa.Job) -> None:
        while not release.is_set():
            if job.is_cancelled() and job.id not in cancelled:
                cancelled.append(job.id)
            await asyncio.sleep(0.02)

    return app


@pytest.mark.asyncio
async def test_stale_heartbeat_rescue_fences_the_late_completion(dsn: str) -> None:
    release, cancelled, events = asyncio.Event(), [], []
    app = slow_app(release, cancelled)
    app.on_event_kind("slow", events.append)
    with awa.Client(dsn) as client:
        job = client.insert(Slow())
    async with running_worker(app, dsn, maintenance=False, heartbeat_interval=60) as worker:
        await wait_until(lambda: job.id in worker.running)  # claimed and its handler started
        claimed = job_row(dsn, job.id)
        execute(dsn, "UPDATE awa.jobs SET heartbeat_at = now() - interval '1 hour'")
        maintenance = Maintenance(
            worker.dsn, worker.pool, worker.core, worker.timings, on_rescued=worker.fence_rescued
        )
        await maintenance.sweep()
        row = job_row(dsn, job.id)
        assert row.state == "retryable" and row.run_lease == claimed.run_lease
        assert row.errors[-1]["error"] == "heartbeat stale: worker presumed dead"
        assert row.heartbeat_at is None and row.finalized_at is None
        await wait_until(lambda: cancelled == [job.id])  # the live handler saw is_cancelled()
        release.set()
        await wait_until(lambda: not worker.running)
        await worker.heartbeat_once()
        await asyncio.sleep(0.2)
    after = job_row(dsn, job.id)
    assert after.state == "retryable" and after.errors == row.errors  # late result fenced
    assert after.heartbeat_at is None  # the late heartbeat changed nothing
    names = [type(e).__name__ for e in events]
    assert names == ["Started", "Rescued"] and events[1].reason == awa.RescueReason.STALE_HEARTBEAT


@pytest.mark.asyncio
async def test_deadline_and_last_attempt(dsn: str) -> None:
    with awa.Client(dsn) as client:
        a = client.insert(Slow(1))
        b = client.insert(Slow(2), max_attempts=1)
    execute(
        dsn,
        "UPDATE awa.jobs SET state = 'running', attempt = 1, run_lease = 1, heartbeat_at = now(), "
        "deadline_at = now() - interval '1 second'",
    )
    hooks: list[object] = []
    pool, core = await core_for(dsn, hooks=hooks)
    try:
        report = await sweep_once(
            core, heartbeat_staleness=15, completed_retention=3600, failed_retention=3600
        )
    finally:
        await pool.close()
    assert {r.id for r in report.rescued["deadline_exceeded"]} == {a.id, b.id}
    ra, rb = job_row(dsn, a.id), job_row(dsn, b.id)
    assert ra.state == "retryable" and ra.errors[-1]["error"] == "hard deadline exceeded"
    assert (
        rb.state == "failed" and rb.errors[-1]["terminal"] is True and rb.finalized_at is not None
    )
    assert {e.reason for e in hooks} == {awa.RescueReason.DEADLINE_EXCEEDED}  # type: ignore[attr-defined]


@pytest.mark.asyncio
async def test_expired_callback_clears_the_callback(dsn: str) -> None:
    with awa.Client(dsn) as client:
        job = client.insert(Slow(), max_attempts=1)
    execute(
        dsn,
        "UPDATE awa.jobs SET state = 'waiting_external', attempt = 1, callback_id = gen_random_uuid(), "
        "callback_timeout_at = now() - interval '1 second'",
    )
    pool, core = await core_for(dsn)
    try:
        [rescued] = await core.rescue(awa.RescueReason.EXPIRED_CALLBACK)
    finally:
        await pool.close()
    row = job_row(dsn, job.id)
    assert rescued.id == job.id and row.state == "failed"  # last attempt → failed
    assert row.callback_id is None and row.callback_timeout_at is None
    assert row.errors[-1]["error"] == "callback timed out"


@pytest.mark.asyncio
async def test_rescue_follow_up_failure_is_retried_by_a_later_sweep_exactly_once(
    dsn: str, caplog: pytest.LogCaptureFixture
) -> None:
    app = awa.App()
    app.task(Slow)(lambda job: None)
    fail = True

    @app.on_rescued_enqueue(Slow, Alert)
    def alert(args: Slow, job: awa.JobRow, reason: awa.RescueReason) -> Alert:
        if fail:
            raise RuntimeError("alerting is down")
        return Alert(job.id, str(reason))

    with awa.Client(dsn) as client:
        job = client.insert(Slow())
    execute(
        dsn,
        "UPDATE awa.jobs SET state = 'running', attempt = 1, heartbeat_at = now() - interval '1 hour'",
    )
    pool, core = await core_for(dsn, app)
    try:
        with caplog.at_level(logging.ERROR):
            first = await sweep_once(
                core, heartbeat_staleness=15, completed_retention=3600, failed_retention=3600
            )
        assert first.follow_ups_failed == 1 and first.follow_ups_done == 0
        assert f"rescue follow-up of job {job.id} failed" in caplog.text
        row = job_row(dsn, job.id)
        assert row.state == "retryable"  # the rescue stands
        fail = False
        second = await sweep_once(
            core, heartbeat_staleness=15, completed_retention=3600, failed_retention=3600
        )
        third = await sweep_once(
            core, heartbeat_staleness=15, completed_retention=3600, failed_retention=3600
        )
    finally:
        await pool.close()
    assert second.follow_ups_done == 1 and third.follow_ups_done == 0
    with psycopg.connect(dsn) as conn:
        alerts = conn.execute("SELECT args FROM awa.jobs WHERE kind = 'alert'").fetchall()
        pending = conn.execute(
            "SELECT count(*) FROM awa.jobs WHERE rescue_pending IS NOT NULL"
        ).fetchone()[0]
    assert alerts == [({"job_id": job.id, "reason": "stale_heartbeat"},)] and pending == 0


@pytest.mark.asyncio
async def test_exactly_one_leader_and_failover(dsn: str) -> None:
    timings = Timings(leader_election_interval=0.1, rescue_interval=0.1)
    pools, cores = [], []
    for _ in range(3):
        pool, core = await core_for(dsn)
        pools.append(pool)
        cores.append(core)
    dsn_named = dsn + " application_name=awa-maint-test"
    members = [Maintenance(dsn_named, p, c, timings) for p, c in zip(pools, cores, strict=True)]
    stopping = [asyncio.Event() for _ in members]
    tasks = [asyncio.create_task(m.run(s)) for m, s in zip(members, stopping, strict=True)]
    try:
        await wait_until(lambda: sum(m.is_leader for m in members) == 1)
        await asyncio.sleep(0.5)
        assert sum(m.is_leader for m in members) == 1
        leader = next(i for i, m in enumerate(members) if m.is_leader)
        stopping[leader].set()  # the leader's process goes away …
        tasks[leader].cancel()
        execute(
            dsn,
            "SELECT pg_terminate_backend(pid) FROM pg_locks WHERE locktype = 'advisory' "
            "AND objid = %s AND granted",
            0x6177615F6C6472 & 0xFFFFFFFF,
        )
        others = [m for i, m in enumerate(members) if i != leader]
        await wait_until(lambda: sum(m.is_leader for m in others) == 1, timeout=5)
    finally:
        for s in stopping:
            s.set()
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        for p in pools:
            await p.close()


@pytest.mark.asyncio
async def test_retention_prunes_in_batches_and_releases_unique_keys(dsn: str) -> None:
    with awa.Client(dsn) as client:
        old = client.insert(Slow(1), unique_opts={})
        client.insert(Slow(2))
        failed = client.insert(Slow(3))
    execute(
        dsn,
        "UPDATE awa.jobs SET state = 'completed', finalized_at = now() - interval '2 days' WHERE id = %s",
        old.id,
    )
    execute(
        dsn,
        "UPDATE awa.jobs SET state = 'failed', finalized_at = now() - interval '2 days' WHERE id = %s",
        failed.id,
    )
    pool, core = await core_for(dsn)
    try:
        pruned = await core.prune(completed_retention=86400, failed_retention=3 * 86400)
    finally:
        await pool.close()
    assert pruned == 1  # the completed one; the failed one is within its longer retention
    with awa.Client(dsn) as client:
        client.insert(Slow(1), unique_opts={})  # the key was released with the row
        assert client.get_job(failed.id).state == "failed"


def test_staleness_below_three_intervals_warns(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING):
        Maintenance("", None, None, Timings(heartbeat_interval=5, heartbeat_staleness=10))  # type: ignore[arg-type]
    assert "below 3x heartbeat_interval" in caplog.text


def test_awa_rescue_run_end_to_end(dsn: str, tmp_path: Path) -> None:
    with awa.Client(dsn) as client:
        job = client.insert(Slow())
    execute(
        dsn,
        "UPDATE awa.jobs SET state = 'running', attempt = 1, heartbeat_at = now() - interval '1 hour'",
    )
    config = tmp_path / "awa.toml"
    config.write_text('[maintenance]\nheartbeat_staleness = "15s"\n')
    env = {**os.environ, "AWA_DATABASE_URL": dsn, "NO_COLOR": "1"}
    awa_bin = str(Path(sys.executable).parent / "awa")
    dry = run_captured(
        [awa_bin, "--config", str(config), "rescue", "run", "--dry-run", "--json"], env=env
    )
    assert dry.returncode == 0, dry.stderr
    assert json.loads(dry.stdout)["rescued"]["stale_heartbeat"] == [job.id]
    assert job_row(dsn, job.id).state == "running"  # dry run changed nothing
    real = run_captured([awa_bin, "--config", str(config), "rescue", "run", "--json"], env=env)
    assert real.returncode == 0, real.stderr
    assert json.loads(real.stdout)["rescued"]["stale_heartbeat"] == [job.id]
    assert job_row(dsn, job.id).state == "retryable"
    table = run_captured([awa_bin, "--config", str(config), "rescue", "run"], env=env)
    assert table.returncode == 0 and "stale_heartbeat" in table.stdout


def test_awa_rescue_run_loads_the_app_and_plugins(dsn: str, tmp_path: Path) -> None:
    """Rescued hooks fire in the `awa rescue run` process; on_rescued follow-ups are inserted."""
    from tests.apps.callbacks import Park

    with awa.Client(dsn) as client:
        job = client.insert(Park(3))
    execute(
        dsn,
        "UPDATE awa.jobs SET state = 'waiting_external', attempt = 1, callback_id = gen_random_uuid(), "
        "callback_timeout_at = now() - interval '1 second'",
    )
    config = tmp_path / "awa.toml"
    config.write_text(
        '[app]\nmodules = ["tests.apps.callbacks"]\nplugins = ["tests.apps.callbacks"]\n'
    )
    events = tmp_path / "events.txt"
    env = {
        **os.environ,
        "AWA_DATABASE_URL": dsn,
        "NO_COLOR": "1",
        "PYTHONPATH": str(ROOT),
        "AWA_TEST_EVENTS": str(events),
    }
    awa_bin = str(Path(sys.executable).parent / "awa")
    done = run_captured([awa_bin, "--config", str(config), "rescue", "run", "--json"], env=env)
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["rescued"]["expired_callback"] == [job.id]
    assert report["rescue_follow_ups"] == {"done": 1, "failed": 0}
    assert events.read_text().startswith(f"rescued {job.id} ")
    with psycopg.connect(dsn) as conn:
        alerts = conn.execute("SELECT args FROM awa.jobs WHERE kind = 'rescue_alert'").fetchall()
    assert alerts == [({"job_id": job.id, "reason": "expired_callback"},)]


@pytest.mark.asyncio
async def test_a_rescued_job_backs_off_as_a_failed_attempt_does(dsn: str) -> None:
    """2**attempt seconds plus up to 25 %, capped at 24 h (the attempt model's constants)."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        rows = conn.execute(
            "INSERT INTO awa.jobs (kind, state, attempt, max_attempts, heartbeat_at) "
            "SELECT 'k', 'running', a, 100, now() - interval '1 hour' FROM unnest(%s::int[]) a "
            "RETURNING id, attempt",
            ([3, 10, 40],),
        ).fetchall()
    pool, core = await core_for(dsn)
    try:
        rescued = await core.rescue(awa.RescueReason.STALE_HEARTBEAT, staleness=60)
    finally:
        await pool.close()
    assert len(rescued) == 3
    with psycopg.connect(dsn) as conn:
        delays = dict(
            conn.execute(
                "SELECT attempt, extract(epoch FROM run_at - now()) FROM awa.jobs"
            ).fetchall()
        )
    assert sorted(a for _, a in rows) == sorted(delays)
    assert 8 - 1 <= delays[3] <= 8 * 1.25
    assert 1024 - 1 <= delays[10] <= 1024 * 1.25
    assert 86400 - 5 <= delays[40] <= 86400
