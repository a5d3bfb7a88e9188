"""A worker with nothing to do must not destroy work (issue 16 item 3, D3, architecture §15.5):
an app with no handler refuses to start; a job of a kind the worker does not register is
logged at ERROR (action=unknown_kind), counted, and failed as architecture §2 says."""

from __future__ import annotations

import asyncio
import logging
import os
import subprocess
import sys
from pathlib import Path

import pytest

import awa_cli as awa
from awa_cli.plugins.prometheus import PrometheusPlugin
from tests.apps.lifecycle import Sleepy
from tests.helpers import ROOT, job_row, running_worker, wait_until

pytestmark = pytest.mark.integration

AWA = str(Path(sys.executable).parent / "awa")


def test_a_worker_without_handlers_refuses_to_start_and_claims_nothing(dsn: str) -> None:
    with awa.Client(dsn) as client:
        job = client.insert({"x": 1}, kind="anything")
    worker = awa.Worker(awa.App(), dsn, {"default": 2}, poll_interval=0.1)
    with pytest.raises(awa.AwaError) as raised:
        asyncio.run(asyncio.wait_for(worker.run(), timeout=10))
    assert "registers no handler" in str(raised.value) and "\n" not in str(raised.value)
    assert job_row(dsn, job.id).state == awa.JobState.AVAILABLE


def test_awa_worker_with_an_empty_app_exits_2(dsn: str, tmp_path: Path) -> None:
    with awa.Client(dsn) as client:
        job = client.insert({"x": 1}, kind="anything")
    config = tmp_path / "awa.toml"
    config.write_text('[app]\nmodules = ["tests.apps.empty"]\n')
    env = {**os.environ, "AWA_DATABASE_URL": dsn, "PYTHONPATH": str(ROOT), "NO_COLOR": "1"}
    env.pop("AWA_CONFIG", None)
    for processes in ("1", "2"):
        done = subprocess.run(
            [AWA, "--config", str(config), "worker", "--processes", processes],
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert done.returncode == 2, done.stderr
        errors = [line for line in done.stderr.splitlines() if line.startswith("Error:")]
        # Supervised, each child checks (the supervisor does not import the app) and one
        # exit 2 stops them all.
        assert errors and len(set(errors)) == 1, done.stderr
        assert "[app] modules: tests.apps.empty register no task" in errors[0]
        assert "Traceback" not in done.stderr
    assert job_row(dsn, job.id).state == awa.JobState.AVAILABLE


def test_an_unknown_kind_is_logged_counted_and_failed(
    dsn: str, caplog: pytest.LogCaptureFixture
) -> None:
    app = awa.App()

    @app.task(Sleepy)
    async def sleepy(job: awa.Job) -> None:
        pass

    async def run() -> tuple[awa.JobRow, PrometheusPlugin]:
        plugin = PrometheusPlugin(None)
        async with awa.AsyncClient(dsn) as client:
            job = await client.insert({"x": 1}, kind="nobody_handles_this", queue="default")
        async with running_worker(app, dsn, {"default": 2}) as worker:
            await plugin.awa_worker_started(worker)
            await wait_until(lambda: job_row(dsn, job.id).state == awa.JobState.FAILED)
            assert worker.stats().unknown_kinds == {("nobody_handles_this", "default"): 1}
            return job, plugin

    caplog.set_level(logging.INFO, logger="awa")
    job, plugin = asyncio.run(run())
    logged = [r for r in caplog.records if getattr(r, "action", "") == "unknown_kind"]
    assert len(logged) == 1 and logged[0].levelno == logging.ERROR
    assert (logged[0].kind, logged[0].job_id) == ("nobody_handles_this", job.id)  # type: ignore[attr-defined]
    row = job_row(dsn, job.id)
    assert row.errors[-1]["error"] == "unknown job kind: nobody_handles_this"
    assert row.attempt == 1
    get = plugin.registry.get_sample_value
    labels = {"kind": "nobody_handles_this", "queue": "default"}
    assert get("awa_jobs_unknown_kind_total", labels) == 1
