"""The worker runtime against real PostgreSQL: claiming, ordering, waking, fencing, shutdown."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from datetime import datetime, timedelta, UTC
from pathlib import Path

import psycopg
import pytest

import awa_cli as awa
from tests.apps.recording import SIDE_TABLE
from tests.helpers import ROOT, all_terminal, job_row, running_worker, states, wait_until

pytestmark = [pytest.mark.integration]


@dataclass
class Work:
    n: int = 0
    sleep: float = 0.0


def recording_app(seen: list[int], *, sync: bool = False) -> awa.App:
    app = awa.App()
    if sync:

        @app.task(Work)
        def work_sync(job: awa.Job) -> None:
            assert threading.current_thread() is not threading.main_thread()
            time.sleep(job.args.sleep)
            seen.append(job.args.n)
    else:

        @app.task(Work)
        async def work(job: awa.Job) -> None:
            await asyncio.sleep(job.args.sleep)
            seen.append(job.args.n)

    return app


@pytest.mark.asyncio
async def test_priority_then_run_at_then_id_order(dsn: str) -> None:
    seen: list[int] = []
    now = datetime.now(UTC)
    with awa.Client(dsn) as client:
        client.insert(Work(1), priority=3)
        client.insert(Work(2), priority=1, run_at=now - timedelta(seconds=5))
        client.insert(Work(3), priority=1, run_at=now - timedelta(seconds=10))
        client.insert(Work(4), priority=4)
        client.insert(Work(5), priority=1, run_at=now - timedelta(seconds=10))
        client.insert(Work(6), priority=2)
    async with running_worker(recording_app(seen), dsn, {"default": 1}):
        await wait_until(lambda: len(seen) == 6)
    assert seen == [3, 5, 2, 6, 1, 4]


@pytest.mark.asyncio
async def test_scheduled_job_runs_when_due_not_before(dsn: str) -> None:
    seen: list[int] = []
    run_at = datetime.now(UTC) + timedelta(seconds=1.5)
    with awa.Client(dsn) as client:
        job = client.insert(Work(1), run_at=run_at)
    assert job.state == "scheduled"
    async with running_worker(recording_app(seen), dsn, poll_interval=30):
        await wait_until(lambda: job_row(dsn, job.id).state == "completed", timeout=10)
        row = job_row(dsn, job.id)
    assert row.attempted_at is not None and row.attempted_at >= run_at
    # woken by the due time, not by the 30 s poll
    assert (row.attempted_at - run_at).total_seconds() < 1.0


@pytest.mark.asyncio
async def test_notify_wakes_an_idle_worker_without_waiting_for_the_poll(dsn: str) -> None:
    seen: list[int] = []
    async with running_worker(recording_app(seen), dsn, poll_interval=60):
        await asyncio.sleep(0.3)  # idle: the runner is waiting on its 60 s poll
        started = time.monotonic()
        with awa.Client(dsn) as client:
            client.insert(Work(7))
        await wait_until(lambda: seen == [7], timeout=10)
        assert time.monotonic() - started < 5


@pytest.mark.asyncio
async def test_sync_handlers_run_in_threads_concurrently(dsn: str) -> None:
    seen: list[int] = []
    with awa.Client(dsn) as client:
        client.insert_many([Work(i, sleep=0.5) for i in range(8)])
    started = time.monotonic()
    async with running_worker(recording_app(seen, sync=True), dsn, {"default": 8}):
        await wait_until(lambda: len(seen) == 8)
        elapsed = time.monotonic() - started
    assert sorted(seen) == list(range(8))
    assert elapsed < 3.5  # eight 0.5 s handlers in parallel, not 4 s in series
    assert states(dsn) == {"completed": 8}


@pytest.mark.asyncio
async def test_concurrency_limit_per_queue(dsn: str) -> None:
    active = 0
    peak = 0
    app = awa.App()

    @app.task(Work)
    async def work(job: awa.Job) -> None:
        nonlocal active, peak
        active += 1
        peak = max(peak, active)
        await asyncio.sleep(0.05)
        active -= 1

    with awa.Client(dsn) as client:
        client.insert_many([Work(i) for i in range(30)])
    async with running_worker(app, dsn, {"default": 3}):
        await wait_until(lambda: all_terminal(dsn, 30))
    assert peak == 3


@pytest.mark.asyncio
async def test_stale_completion_is_rejected(dsn: str) -> None:
    """A completion whose run_lease was bumped underneath changes nothing and fires nothing."""
    release = asyncio.Event()
    events: list[object] = []
    app = awa.App()

    @app.task(Work)
    async def work(job: awa.Job) -> None:
        await release.wait()

    app.on_event_kind("work", events.append)
    with awa.Client(dsn) as client:
        job = client.insert(Work())
    async with running_worker(app, dsn) as worker:
        await wait_until(lambda: job_row(dsn, job.id).state == "running")
        with psycopg.connect(dsn, autocommit=True) as conn:  # another claim took it over
            conn.execute("UPDATE awa.jobs SET run_lease = run_lease + 1 WHERE id = %s", (job.id,))
        release.set()
        await wait_until(lambda: not worker.running)
        await asyncio.sleep(0.2)
    row = job_row(dsn, job.id)
    assert row.state == "running" and row.finalized_at is None
    assert [type(e).__name__ for e in events] == ["Started"]


@pytest.mark.asyncio
async def test_operator_cancel_is_seen_by_the_running_handler(dsn: str) -> None:
    saw_cancel = asyncio.Event()
    app = awa.App()

    @app.task(Work)
    async def work(job: awa.Job) -> None:
        while not job.is_cancelled():
            await asyncio.sleep(0.02)
        saw_cancel.set()

    with awa.Client(dsn) as client:
        job = client.insert(Work())
    async with running_worker(app, dsn, heartbeat_interval=0.1):
        await wait_until(lambda: job_row(dsn, job.id).state == "running")
        async with awa.AsyncClient(dsn) as admin:
            await admin.cancel(job.id)
        await asyncio.wait_for(saw_cancel.wait(), timeout=10)
    row = job_row(dsn, job.id)
    assert row.state == "cancelled"  # the handler's late completion was fenced


@pytest.mark.asyncio
async def test_heartbeat_touches_every_running_job(dsn: str) -> None:
    release = asyncio.Event()
    app = awa.App()

    @app.task(Work)
    async def work(job: awa.Job) -> None:
        await release.wait()

    with awa.Client(dsn) as client:
        client.insert_many([Work(i) for i in range(5)])
    async with running_worker(app, dsn, heartbeat_interval=0.2, maintenance=False):
        await wait_until(lambda: states(dsn).get("running") == 5)
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute("UPDATE awa.jobs SET heartbeat_at = now() - interval '1 hour'")

        def oldest_heartbeat() -> timedelta:
            with psycopg.connect(dsn) as conn:
                return conn.execute("SELECT max(now() - heartbeat_at) FROM awa.jobs").fetchone()[0]

        # polled rather than one look after a fixed sleep, which a loaded machine could beat
        await wait_until(lambda: oldest_heartbeat() < timedelta(seconds=5), timeout=20)
        release.set()


@pytest.mark.asyncio
async def test_shutdown_waits_for_in_flight_jobs(dsn: str) -> None:
    seen: list[int] = []
    with awa.Client(dsn) as client:
        client.insert_many([Work(i, sleep=0.5) for i in range(4)])
    async with running_worker(recording_app(seen), dsn, {"default": 4}):
        await wait_until(lambda: states(dsn).get("running") == 4)
    assert sorted(seen) == [0, 1, 2, 3]
    assert states(dsn) == {"completed": 4}


@pytest.mark.asyncio
async def test_shutdown_timeout_interrupts_and_leaves_nothing_running(dsn: str) -> None:
    with awa.Client(dsn) as client:
        job = client.insert(Work(sleep=60))
    async with running_worker(recording_app([]), dsn, shutdown_timeout=0.3):
        await wait_until(lambda: job_row(dsn, job.id).state == "running")
    row = job_row(dsn, job.id)
    assert row.state == "retryable"
    assert "worker shut down" in row.errors[-1]["error"]


def test_claim_uses_the_claim_index(dsn: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(
            "INSERT INTO awa.jobs (kind, queue, state) SELECT 'k', 'q' || (i % 50), "
            "(ARRAY['available','completed','failed'])[1 + i % 3]::awa.job_state "
            "FROM generate_series(1, 20000) i"
        )
        conn.execute("ANALYZE awa.jobs")
        from awa_cli.db.statements import SQL

        plan = "\n".join(
            r[0]
            for r in conn.execute(
                "EXPLAIN " + SQL["claim_by_queue"],
                {"queue": "q7", "limit": 10, "deadline": 0, "worker": "h:1"},
            ).fetchall()
        )
    assert "jobs_claim_idx" in plan, plan


def test_two_worker_processes_run_each_job_exactly_once(dsn: str, tmp_path: Path) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(SIDE_TABLE)
    with awa.Client(dsn) as client:
        assert client.insert_many([{"n": i} for i in range(1000)], kind="record") == 1000
    config = tmp_path / "awa.toml"
    config.write_text(
        '[app]\nmodules = ["tests.apps.recording"]\n[queues.default]\nconcurrency = 20\n'
    )
    env = {**os.environ, "AWA_DATABASE_URL": dsn, "PYTHONPATH": str(ROOT)}
    awa_bin = str(Path(sys.executable).parent / "awa")
    workers = [
        subprocess.Popen(
            [awa_bin, "--config", str(config), "-q", "worker"],
            env=env,
            cwd=ROOT,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(2)
    ]
    try:
        deadline = time.monotonic() + 120
        while states(dsn).get("completed", 0) < 1000:
            assert time.monotonic() < deadline, states(dsn)
            assert all(w.poll() is None for w in workers), [
                w.stderr.read() for w in workers if w.stderr
            ]
            time.sleep(0.2)
    finally:
        for w in workers:
            w.send_signal(signal.SIGTERM)
        codes = [w.wait(timeout=30) for w in workers]
    assert codes == [0, 0]
    with psycopg.connect(dsn) as conn:
        runs = conn.execute(
            "SELECT count(*), count(DISTINCT job_id), count(DISTINCT pid) FROM awa_test.executions"
        ).fetchone()
    assert runs[0] == 1000 and runs[1] == 1000  # every job once, none twice
    assert runs[2] == 2  # both processes took part
