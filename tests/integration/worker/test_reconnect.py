"""Reconnection: a worker survives a PostgreSQL restart and the termination of its
connections, resumes within seconds, and loses nothing."""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass

import psycopg
import pytest

import awa_cli as awa
from tests.pgcluster import ThrowawayCluster
from awa_cli.db.migrations import migrate_dsn
from tests.helpers import running_worker, states, wait_until

pytestmark = [pytest.mark.integration]


@dataclass
class Tick:
    n: int


def tick_app(executions: list[int]) -> awa.App:
    app = awa.App()

    @app.task(Tick)
    async def tick(job: awa.Job) -> None:
        await asyncio.sleep(0.005)
        executions.append(job.id)

    return app


def check_nothing_lost(dsn: str, executions: list[int], total: int) -> None:
    assert states(dsn) == {"completed": total}
    with psycopg.connect(dsn) as conn:
        retried = {
            r[0] for r in conn.execute("SELECT id FROM awa.jobs WHERE attempt > 1").fetchall()
        }
    assert len(set(executions)) == total  # every job's handler ran
    doubles = {job_id for job_id in executions if executions.count(job_id) > 1}
    assert doubles <= retried  # a job only ran again through a recorded retry


@pytest.mark.asyncio
async def test_worker_survives_a_server_restart(own_server: ThrowawayCluster) -> None:
    dsn = own_server.dsn_for("postgres")
    await asyncio.to_thread(migrate_dsn, dsn)
    executions: list[int] = []
    total = 3000
    with awa.Client(dsn) as client:
        client.insert_many([Tick(i) for i in range(total)])
    async with running_worker(
        tick_app(executions), dsn, {"default": 20}, maintenance=False
    ) as worker:
        await wait_until(lambda: len(executions) > 300)
        await asyncio.to_thread(own_server.server.stop, "fast")
        stopped_at = len(executions)
        await asyncio.sleep(1.5)
        await asyncio.to_thread(own_server.server.start)
        restarted = time.monotonic()
        await wait_until(lambda: len(executions) > stopped_at + 50, timeout=20)
        resumed_after = time.monotonic() - restarted
        await wait_until(lambda: states(dsn) == {"completed": total}, timeout=60)
        assert worker.listener.connected.is_set()
    assert resumed_after < 10
    check_nothing_lost(dsn, executions, total)


@pytest.mark.asyncio
async def test_worker_survives_terminated_connections(dsn: str) -> None:
    executions: list[int] = []
    total = 2000
    with awa.Client(dsn) as client:
        client.insert_many([Tick(i) for i in range(total)])
    async with running_worker(tick_app(executions), dsn, {"default": 20}, maintenance=False):
        killed = 0
        with psycopg.connect(dsn, autocommit=True) as admin:
            for _ in range(5):
                killed += admin.execute(
                    "SELECT count(*) FROM (SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                    "WHERE application_name = 'awa-worker' AND datname = current_database()) t"
                ).fetchone()[0]
                await asyncio.sleep(0.4)
        assert killed > 0
        await wait_until(lambda: states(dsn) == {"completed": total}, timeout=60)
    check_nothing_lost(dsn, executions, total)
