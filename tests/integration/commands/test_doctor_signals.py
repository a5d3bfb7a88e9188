"""`awa doctor` gives the operator the true signal (issue 28, trial D7, D8, D19): it runs with
the README's least-privilege role, fails while a live worker cannot claim (a revoked grant)
and right after a `kill -9` left running jobs with a dead worker, and names the leader by the
worker's ``host:pid``."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from click.testing import CliRunner

import awa_cli as awa
from awa_cli.cli import cli
from tests.helpers import (
    ROOT,
    login_role,
    readme_grants,
    run_sql,
    running_worker,
    wait_until,
    spawn_worker,
)

pytestmark = [pytest.mark.integration]
ENV = {"NO_COLOR": "1", "COLUMNS": "200"}
PASSWORD = "pw-" + uuid.uuid4().hex[:8]

app = awa.App()


@app.task(dict, kind="noop")  # type: ignore[arg-type]
async def noop(job: awa.Job) -> None:
    pass


def doctor(config: Path, dsn: str) -> tuple[int, dict[str, dict[str, Any]]]:
    result = CliRunner().invoke(
        cli, ["--config", str(config), "--database-url", dsn, "doctor", "--json"], env=ENV
    )
    assert "Traceback" not in result.output, result.output
    report = json.loads(result.stdout)
    return result.exit_code, {c["name"]: c for c in report["checks"]}


@pytest.fixture
def role(dsn: str) -> Iterator[tuple[str, str]]:
    """A role with exactly the README's least-privilege grants, and its URL."""
    with login_role(dsn, "awa_d", PASSWORD, readme_grants()) as role:
        yield role


def test_doctor_runs_with_the_readme_least_privilege_role(
    role: tuple[str, str], config_file: Path
) -> None:
    _, url = role
    code, checks = doctor(config_file, url)
    assert code == 0, checks
    assert checks["schema"]["status"] == "warn"
    assert "cannot verify" in checks["schema"]["detail"]
    assert "awa.schema_migrations" in checks["schema"]["detail"]
    for name in ("leader", "claims", "dead_workers", "stuck_rescues", "table_bloat"):
        assert checks[name]["status"] in ("ok", "warn"), checks[name]
        assert "the check itself failed" not in checks[name]["detail"]


@pytest.mark.asyncio
async def test_doctor_fails_while_a_worker_cannot_claim_and_recovers(
    role: tuple[str, str], dsn: str, config_file: Path
) -> None:
    name, url = role
    async with running_worker(app, url, heartbeat_interval=0.2, leader_election_interval=0.2):
        _, checks = await asyncio.to_thread(doctor, config_file, dsn)
        assert checks["claims"]["status"] == "ok", checks["claims"]
        await asyncio.to_thread(run_sql, dsn, "REVOKE UPDATE ON awa.jobs FROM {r}", r=name)

        async def claims_fail() -> bool:
            code, checks = await asyncio.to_thread(doctor, config_file, dsn)
            return code == 1 and checks["claims"]["status"] == "fail"

        await wait_until(claims_fail, timeout=20, interval=0.3)
        _, checks = await asyncio.to_thread(doctor, config_file, dsn)
        detail = checks["claims"]["detail"]
        assert f"{socket.gethostname()}:{os.getpid()}" in detail
        assert "permission denied for table jobs" in detail and "queue default" in detail
        async with awa.AsyncClient(dsn) as client:
            job = await client.insert({"n": 1}, kind="noop")
        shown = await asyncio.to_thread(
            CliRunner().invoke,
            cli,
            ["--config", str(config_file), "--database-url", dsn, "job", "show", str(job.id)],
            env=ENV,
        )
        assert shown.exit_code == 0, shown.output
        assert (
            f"waiting: claims of worker {socket.gethostname()}:{os.getpid()} on queue default fail"
            in (shown.stdout)
        )
        await asyncio.to_thread(run_sql, dsn, "GRANT UPDATE ON awa.jobs TO {r}", r=name)

        async def claims_ok() -> bool:
            _, checks = await asyncio.to_thread(doctor, config_file, dsn)
            return bool(checks["claims"]["status"] == "ok")

        await wait_until(claims_ok, timeout=30, interval=0.3)


@pytest.mark.asyncio
async def test_the_leader_is_named_by_host_and_pid(dsn: str, config_file: Path) -> None:
    async with running_worker(app, dsn, heartbeat_interval=0.2, leader_election_interval=0.2):

        async def named() -> bool:
            _, checks = await asyncio.to_thread(doctor, config_file, dsn)
            return f"worker {socket.gethostname()}:{os.getpid()}" in checks["leader"]["detail"]

        await wait_until(named, timeout=15, interval=0.2)


def test_jobs_held_by_a_killed_worker_fail_at_once(dsn: str, tmp_path: Path) -> None:
    config = tmp_path / "awa.toml"
    config.write_text(
        '[app]\nmodules = ["tests.apps.pausing"]\n[queues.default]\nconcurrency = 4\n'
        '[maintenance]\nheartbeat_staleness = "60s"\n'
    )
    with awa.Client(dsn) as client:
        from tests.apps.pausing import Tick

        for n in range(4):
            client.insert(Tick(n, sleep=60))
    env = {**os.environ, "AWA_DATABASE_URL": dsn, "PYTHONPATH": str(ROOT)}
    for name in ("NOTIFY_SOCKET", "WATCHDOG_USEC", "WATCHDOG_PID"):
        env.pop(name, None)
    log = (tmp_path / "stderr.log").open("w")
    proc = spawn_worker(config, log, env)
    try:
        deadline = time.monotonic() + 30
        while _running(dsn) < 4:
            assert proc.poll() is None, (tmp_path / "stderr.log").read_text()
            assert time.monotonic() < deadline, (tmp_path / "stderr.log").read_text()
            time.sleep(0.1)
        code, checks = doctor(config, dsn)
        assert checks["dead_workers"]["status"] == "ok", checks["dead_workers"]
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=10)
    code, checks = doctor(config, dsn)  # at once: no staleness to wait for on this host
    dead = checks["dead_workers"]
    assert code == 1 and dead["status"] == "fail", dead
    assert (
        f"4 running job(s) held by worker(s) no longer alive: {socket.gethostname()}:{proc.pid}"
        in (dead["detail"])
    )
    assert "awa rescue run" in dead["fix"]


def _running(dsn: str) -> int:
    with psycopg.connect(dsn) as conn:
        row = conn.execute("SELECT count(*) FROM awa.jobs WHERE state = 'running'").fetchone()
    return int(row[0]) if row else 0
