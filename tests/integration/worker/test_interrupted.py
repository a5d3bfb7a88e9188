"""Deploys hand work back (issue 27 item 2, D5): a ``def`` handler that calls
``job.raise_if_cancelled()`` in its loop, in a real ``awa worker`` stopped by SIGTERM, hands
its job back: available again at once, the attempt not counted, progress and checkpoint
kept, an error entry ``interrupted: shutdown``; the next worker resumes from the checkpoint.
The old idiom (``return`` once ``is_cancelled()``) completes the job, with a WARNING naming
it. The test harness (``work_one(cancel=...)``, ``HandlerJob.cancel(reason)``) says the same."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

import awa_cli as awa
from awa_cli.testing import AwaTestClient, HandlerJob, run_handler
from tests.apps.outage import Returner, Steady, app, returner, steady
from tests.helpers import job_row
from tests.reliability.workers import FAST, WorkerProcess, runs, wait_for, write_config

pytestmark = pytest.mark.integration


def running(dsn: str, job_id: int) -> bool:
    row = job_row(dsn, job_id)
    return row.state == "running" and (row.progress or {}).get("percent", 0) > 0


def test_sigterm_hands_an_interrupted_job_back(dsn: str, tmp_path: Path) -> None:
    config = write_config(tmp_path, FAST, concurrency=2)
    path = tmp_path / "runs.txt"
    first = WorkerProcess(tmp_path, "first", config, dsn, path)
    try:
        with awa.Client(dsn) as client:
            job = client.insert(Steady(n=1, seconds=6))
        wait_for(lambda: running(dsn, job.id), 30, "the job running with progress", first)
        time.sleep(0.5)
        first.stop()
        assert first.proc.returncode == 0, first.log()
        row = job_row(dsn, job.id)
        assert row.state == "available" and row.attempt == 0, row  # the attempt not counted
        assert row.progress is not None and row.progress["checkpoint"]["step"] > 0
        assert [e["error"] for e in row.errors] == ["interrupted: shutdown"]
        assert row.errors[0].get("terminal") is None
        checkpoint = row.progress["checkpoint"]["step"]
        second = WorkerProcess(tmp_path, "second", config, dsn, path)
        try:
            wait_for(lambda: job_row(dsn, job.id).state == "completed", 30, "completed", second)
        finally:
            second.stop()
        done = job_row(dsn, job.id)
        assert done.attempt == 1 and done.output == {"n": 1, "resumed_from": checkpoint}
        assert runs(path)[job.id] == 2
        assert "returned_at_shutdown" not in first.log()
    finally:
        first.kill()


def test_a_plain_return_at_shutdown_completes_with_a_warning(dsn: str, tmp_path: Path) -> None:
    config = write_config(tmp_path, FAST, concurrency=2)
    worker = WorkerProcess(tmp_path, "worker", config, dsn, tmp_path / "runs.txt")
    try:
        with awa.Client(dsn) as client:
            job = client.insert(Returner(n=1, seconds=6))
        wait_for(lambda: running(dsn, job.id), 30, "the job running", worker)
        worker.stop()
        assert job_row(dsn, job.id).state == "completed"
        warned = [line for line in worker.log().splitlines() if "returned_at_shutdown" in line]
        assert len(warned) == 1 and " WARNING " in warned[0] and f"job_id={job.id}" in warned[0]
    finally:
        worker.kill()


def test_the_harness_hands_back_at_shutdown(dsn: str) -> None:
    with AwaTestClient(dsn, app) as harness:
        job = harness.insert(Steady(n=1, seconds=1))
        result = harness.work_one(Steady, cancel="shutdown")
        assert result.outcome == "available"
        row = harness.get_job(job.id)
        assert row.attempt == 0 and row.errors[-1]["error"] == "interrupted: shutdown"
        again = harness.work_one(Steady)  # resumes: attempt 1, completed
        assert again.outcome == "completed" and harness.get_job(job.id).attempt == 1
        harness.insert(Returner(n=2, seconds=1))
        assert harness.work_one(Returner, cancel="shutdown").outcome == "completed"
        with pytest.raises(awa.ValidationError):
            harness.work_one(Steady, cancel="bored")


def test_handler_job_knows_the_cancel_reason() -> None:
    job = HandlerJob(Steady(n=1, seconds=1), app=app)
    assert job.cancel_reason is None
    job.cancel("shutdown")
    assert job.is_cancelled() and job.cancel_reason == "shutdown"
    result = run_handler(steady, job)
    assert result.outcome == "available" and isinstance(result.exception, awa.Interrupted)
    assert result.error == "interrupted: shutdown"
    plain = HandlerJob(Returner(n=1, seconds=1), app=app)
    plain.cancel("shutdown")
    assert run_handler(returner, plain).outcome == "completed"
    with pytest.raises(awa.ValidationError):
        HandlerJob(Steady(n=1), app=app).cancel("bored")
