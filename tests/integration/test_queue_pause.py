"""Queue pause and resume (architecture §10, §15.1) with real workers: a paused queue is claimed by
no worker anywhere within a second, running jobs finish, inserts still work."""

from __future__ import annotations

import asyncio
import os
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest

import awa_cli as awa
from tests.apps.pausing import Tick, app
from tests.helpers import ROOT, running_worker, states, wait_until, spawn_worker, stop_group

pytestmark = [pytest.mark.integration]


def by_state(dsn: str) -> dict[str, int]:
    return states(dsn)


@pytest.mark.asyncio
async def test_pause_stops_claims_running_jobs_finish_and_inserts_work(dsn: str) -> None:
    with awa.Client(dsn) as client:
        slow = client.insert(Tick(0, sleep=0.6))
    async with running_worker(app, dsn, {"default": 4}):
        await wait_until(lambda: by_state(dsn).get("running") == 1)
        async with awa.AsyncClient(dsn) as client:
            info = await client.pause_queue("default")
            assert info.paused and info.paused_at is not None
            await client.insert_many([Tick(i) for i in range(1, 21)])  # inserts still work
            assert await client.paused_queues() == ["default"]
        await wait_until(lambda: by_state(dsn).get("completed") == 1)  # the running one finished
        await asyncio.sleep(1.0)  # each insert woke the worker: a second to (not) claim
        assert by_state(dsn) == {"completed": 1, "available": 20}
        async with awa.AsyncClient(dsn) as client:
            resumed = await client.resume_queue("default")
            assert not resumed.paused
        await wait_until(lambda: by_state(dsn) == {"completed": 21}, timeout=30)
    with awa.Client(dsn) as client:
        assert client.get_job(slow.id).state == "completed"


@pytest.mark.asyncio
async def test_other_queues_keep_running_and_the_harness_claim_honours_the_pause(
    dsn: str,
) -> None:
    from awa_cli.outcomes import OutcomeCore

    with awa.Client(dsn) as client:
        client.pause_queue("held")
        held = client.insert(Tick(1), queue="held")
        free = client.insert(Tick(2), queue="free")
        async_client = client.async_client
        core: OutcomeCore = async_client.core
        assert client.call(core.claim_kind("tick", "held")) is None
        claimed = client.call(core.claim_kind("tick", None))
        assert claimed is not None and claimed.id == free.id
        assert client.get_job(held.id).state == "available"
        listed = {q.queue: q.paused for q in client.list_queues(["free"])}
    assert listed == {"held": True, "free": False}


def _worker(tmp_path: Path, dsn: str) -> subprocess.Popen[bytes]:
    config = tmp_path / "awa.toml"
    config.write_text(
        '[app]\nmodules = ["tests.apps.pausing"]\n[queues.default]\nconcurrency = 5\n'
        '[worker]\nshutdown_timeout = "5s"\n'
    )
    env = {**os.environ, "AWA_DATABASE_URL": dsn, "PYTHONPATH": str(ROOT)}
    for name in ("NOTIFY_SOCKET", "WATCHDOG_USEC", "WATCHDOG_PID"):
        env.pop(name, None)
    log = (tmp_path / "stderr.log").open("w")
    return spawn_worker(config, log, env, "--processes", "2")


def _wait(predicate: Any, proc: subprocess.Popen[bytes], log: Path, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert proc.poll() is None, log.read_text()
        assert time.monotonic() < deadline, log.read_text()
        time.sleep(0.05)


def test_a_pause_takes_effect_across_two_worker_processes(dsn: str, tmp_path: Path) -> None:
    """A real `awa worker --processes 2`: while the queue is paused neither child claims
    (each insert wakes both); after resume both drain it."""
    proc = _worker(tmp_path, dsn)
    log = tmp_path / "stderr.log"
    try:
        _wait(lambda: "all 2 worker processes ready" in log.read_text(), proc, log)
        with awa.Client(dsn) as client:
            client.insert_many([Tick(i) for i in range(20)])
            _wait(lambda: by_state(dsn) == {"completed": 20}, proc, log)
            client.pause_queue("default")
            paused_at = time.monotonic()
            client.insert_many([Tick(i, sleep=0.05) for i in range(40)])
            for _ in range(5):  # more wake-ups over the next second
                client.insert(Tick(99))
                time.sleep(0.2)
            assert time.monotonic() - paused_at >= 1.0
            assert by_state(dsn) == {"completed": 20, "available": 45}
            client.resume_queue("default")
            _wait(lambda: by_state(dsn) == {"completed": 65}, proc, log)
    finally:
        stop_group(proc, timeout=15)
