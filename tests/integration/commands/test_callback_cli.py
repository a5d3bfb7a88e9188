"""`awa callback …` through click's runner, and end to end with real processes."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import psycopg
import pytest
from click.testing import Result
from tests.helpers import AwaRunner, ROOT, run_captured

import awa_cli as awa
from awa_cli.cli import cli
from tests.apps.callbacks import Park
from tests.apps.callbacks import app as callbacks_app
from tests.helpers import job_row, running_worker, wait_until

pytestmark = [pytest.mark.integration]


@pytest.fixture
def config(callbacks_config: Path) -> Path:
    return callbacks_config


def park(dsn: str, kind: str | None = None) -> awa.JobRow:
    async def run() -> awa.JobRow:
        async with running_worker(callbacks_app, dsn) as _:
            async with awa.AsyncClient(dsn) as client:
                job = await client.insert(Park(1))
            await wait_until(lambda: job_row(dsn, job.id).state == "waiting_external")
        row = job_row(dsn, job.id)
        if kind:
            with psycopg.connect(dsn, autocommit=True) as conn:
                conn.execute("UPDATE awa.jobs SET kind = %s WHERE id = %s", (kind, row.id))
        return job_row(dsn, job.id)

    return asyncio.run(run())


def invoke(config: Path, dsn: str, *args: str) -> Result:
    return AwaRunner().invoke(cli, ["--config", str(config), "--database-url", dsn, *args])


def test_complete_with_payload_json(
    dsn: str, config: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    events = tmp_path / "events.txt"
    monkeypatch.setenv("AWA_TEST_EVENTS", str(events))
    row = park(dsn)
    result = invoke(
        config, dsn, "callback", "complete", str(row.callback_id), "--payload", '{"a": 1}', "--json"
    )
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert data["state"] == "completed" and data["callback_result"] == {"a": 1}
    assert f"completed {row.id}" in events.read_text()


def test_fail_retry_heartbeat_resolve(dsn: str, config: Path) -> None:
    a, b, c, d = (park(dsn) for _ in range(4))
    r = invoke(config, dsn, "callback", "fail", str(a.callback_id), "--error", "nope", "--json")
    assert r.exit_code == 0 and json.loads(r.stdout)["errors"][-1]["error"] == "nope"
    r = invoke(config, dsn, "callback", "retry", str(b.callback_id), "--json")
    assert r.exit_code == 0 and json.loads(r.stdout)["state"] == "available"
    r = invoke(
        config, dsn, "callback", "heartbeat", str(c.callback_id), "--timeout", "2h", "--json"
    )
    assert r.exit_code == 0 and json.loads(r.stdout)["state"] == "waiting_external"
    r = invoke(config, dsn, "callback", "resolve", str(d.callback_id), "--json")
    assert r.exit_code == 0 and json.loads(r.stdout)["outcome"] == "ignored"
    r = invoke(
        config,
        dsn,
        "callback",
        "resolve",
        str(d.callback_id),
        "--default-action",
        "complete",
        "--json",
    )
    assert r.exit_code == 0 and json.loads(r.stdout)["outcome"] == "completed"
    r = invoke(
        config, dsn, "callback", "resume", str(c.callback_id), "--payload", "[1,2]", "--json"
    )
    assert r.exit_code == 0 and json.loads(r.stdout)["state"] == "available"


def test_errors_are_one_line_with_documented_exit_codes(dsn: str, config: Path) -> None:
    row = park(dsn)
    bad_json = invoke(
        config, dsn, "callback", "complete", str(row.callback_id), "--payload", "{nope"
    )
    assert bad_json.exit_code == 2 and "--payload" in bad_json.stderr
    assert len(bad_json.stderr.strip().splitlines()) == 1 and "Traceback" not in bad_json.stderr
    malformed = invoke(config, dsn, "callback", "complete", "12345")
    assert malformed.exit_code == 2 and "callback_id" in malformed.stderr
    missing = invoke(config, dsn, "callback", "complete", str(uuid.uuid4()))
    assert missing.exit_code == 4 and len(missing.stderr.strip().splitlines()) == 1
    assert job_row(dsn, row.id).state == "waiting_external"  # nothing changed


def test_unknown_kind_is_refused_unless_bare(dsn: str, config: Path) -> None:
    row = park(dsn, kind="somebody_elses_kind")
    refused = invoke(config, dsn, "callback", "complete", str(row.callback_id))
    assert refused.exit_code == 1 and "--bare" in refused.stderr
    assert job_row(dsn, row.id).state == "waiting_external"
    bare = invoke(config, dsn, "callback", "complete", str(row.callback_id), "--bare")
    assert bare.exit_code == 0, bare.output
    assert job_row(dsn, row.id).state == "completed"


def test_end_to_end_worker_parks_and_cli_process_completes(
    dsn: str, config: Path, tmp_path: Path
) -> None:
    events = tmp_path / "events.txt"
    env = {
        **os.environ,
        "AWA_DATABASE_URL": dsn,
        "PYTHONPATH": str(ROOT),
        "AWA_TEST_EVENTS": str(events),
        "NO_COLOR": "1",
    }
    awa_bin = str(Path(sys.executable).parent / "awa")
    with awa.Client(dsn) as client:
        job = client.insert(Park(7))
    worker = subprocess.Popen([awa_bin, "--config", str(config), "-q", "worker"], env=env, cwd=ROOT)
    try:
        deadline = time.monotonic() + 30
        while job_row(dsn, job.id).state != "waiting_external":
            assert time.monotonic() < deadline and worker.poll() is None
            time.sleep(0.1)
        callback_id = str(job_row(dsn, job.id).callback_id)
        done = run_captured(
            [awa_bin, "--config", str(config), "callback", "complete", callback_id, "--json"],
            env=env,
        )
        assert done.returncode == 0, done.stderr
        assert json.loads(done.stdout)["state"] == "completed"
    finally:
        worker.send_signal(signal.SIGTERM)
        assert worker.wait(timeout=30) == 0
    lines = events.read_text().splitlines()
    completed = [line for line in lines if line.startswith(f"completed {job.id} ")]
    assert len(completed) == 1  # exactly one Completed, fired in the CLI process
    assert f"pid={worker.pid}" not in completed[0]
    assert any(line.startswith(f"waiting_for_callback {job.id} pid={worker.pid}") for line in lines)
