"""A job's timeline keeps what the post-mortem needs (issue 28): a rescued attempt keeps its
start time and worker (trial D9), `awa job show` lists the job's callback waits (architecture
§11), a resolved callback prints no "times out None", and a resumed callback job keeps its
first run (D26)."""

from __future__ import annotations

import asyncio
import json
import os
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

import psycopg
import pytest

import awa_cli as awa
from tests.helpers import awa_on, job_row, running_worker, wait_until, run_python

pytestmark = [pytest.mark.integration]

app = awa.App()


@dataclass
class Resumable:
    n: int


@app.task(Resumable)
async def resumable(job: awa.Job) -> awa.JobResult | None:
    if job.callback_result is not None:  # the re-entry after a resume: done
        return None
    token = await job.register_callback(timeout=600)
    return awa.WaitForCallback(token)


def show(dsn: str, job_id: int, tmp_path: Path) -> tuple[str, dict[str, object]]:
    config = tmp_path / "awa.toml"
    config.write_text("")
    text = awa_on(dsn, config, "job", "show", str(job_id))
    assert text.exit_code == 0, text.output
    data = awa_on(dsn, config, "job", "show", str(job_id), "--json")
    return text.stdout, json.loads(data.stdout)


def test_a_rescued_attempt_keeps_its_start_and_worker(dsn: str, tmp_path: Path) -> None:
    with awa.Client(dsn) as client:
        job = client.insert({"n": 1}, kind="gone", queue="nowhere")
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(
            "UPDATE awa.jobs SET state = 'running', attempt = 1, run_lease = 1, "
            "attempted_at = now() - interval '1 hour', attempted_by = 'vm:6676', "
            "heartbeat_at = now() - interval '1 hour' WHERE id = %s",
            (job.id,),
        )
    config = tmp_path / "awa.toml"
    config.write_text('[maintenance]\nheartbeat_staleness = "15s"\n')
    env = {**os.environ, "AWA_DATABASE_URL": dsn, "NO_COLOR": "1"}
    done = run_python("-m", "awa_cli", "--config", str(config), "rescue", "run", env=env)
    assert done.returncode == 0, done.stderr
    text, data = show(dsn, job.id, tmp_path)
    [attempt] = data["timeline"]["attempts"]  # type: ignore[index]
    assert attempt["outcome"] == "rescued" and attempt["rescue_reason"] == "stale_heartbeat"
    assert attempt["worker"] == "vm:6676" and attempt["started_at"] is not None
    assert "attempt 1 started " in text and " on vm:6676: rescued" in text


@pytest.mark.asyncio
async def test_callback_waits_are_listed_and_a_resumed_job_keeps_its_first_run(
    dsn: str, tmp_path: Path
) -> None:
    async with running_worker(app, dsn):
        async with awa.AsyncClient(dsn) as client:
            job = await client.insert(Resumable(1))
            await wait_until(lambda: job_row(dsn, job.id).state == "waiting_external")
            parked = job_row(dsn, job.id)
            first_start = parked.attempted_at
            await client.resume_external(parked.callback_id, {"ok": True})
            await wait_until(
                lambda: (
                    job_row(dsn, job.id).state == "waiting_external"
                    or job_row(dsn, job.id).state == "completed"
                )
            )
            done = await client.wait_for_job(job.id, timeout=15)
    assert done.state == "completed"
    text, data = await asyncio.to_thread(show, dsn, job.id, tmp_path)
    [wait] = data["timeline"]["callback_waits"]  # type: ignore[index]
    assert wait["callback_id"] == str(parked.callback_id) and wait["resolved"] == "resumed"
    assert wait["attempt"] == 1 and wait["worker"] == parked.attempted_by
    assert first_start is not None
    assert datetime.fromisoformat(wait["started_at"]) == first_start  # PG trims trailing zeros
    assert f"callback {parked.callback_id}: attempt 1 (started " in text
    assert "waited, resumed" in text
    assert "times out None" not in text


@pytest.mark.asyncio
async def test_a_completed_callback_shows_its_wait_not_a_timeout(dsn: str, tmp_path: Path) -> None:
    async with running_worker(app, dsn):
        async with awa.AsyncClient(dsn) as client:
            job = await client.insert(Resumable(2))
            await wait_until(lambda: job_row(dsn, job.id).state == "waiting_external")
            parked = job_row(dsn, job.id)
            waiting_text, _ = await asyncio.to_thread(show, dsn, job.id, tmp_path)
            assert f"callback {parked.callback_id} times out 20" in waiting_text
            await client.complete_external(parked.callback_id, {"paid": 1})
    text, data = await asyncio.to_thread(show, dsn, job.id, tmp_path)
    assert "times out None" not in text and " times out " not in text
    assert data["timeline"]["callback"] is None  # type: ignore[index]
    [wait] = data["timeline"]["callback_waits"]  # type: ignore[index]
    assert wait["resolved"] == "completed"
    assert "waited, completed" in text
