"""Worker loops under database errors that are not connection errors (issue 16 item 1, D1,
architecture §15.7): a role missing a grant and a read-only window. Each loop logs at ERROR with
an ``action=`` key and backs off; nothing dies behind a live process; systemd READY comes
only once the worker can claim, WATCHDOG only while it can. A supervised task that ends
unexpectedly takes the worker down. Real `awa worker` processes and the real runtime."""

from __future__ import annotations

import asyncio
import logging
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest

import awa_cli as awa
from tests.apps.lifecycle import SIDE_TABLE, Sleepy
from tests.helpers import ROOT, job_row, running_worker, wait_until
from tests.helpers import login_role, readme_grants, run_sql
from tests.integration.worker.test_notify import NotifySocket

pytestmark = pytest.mark.integration

AWA = str(Path(sys.executable).parent / "awa")
PASSWORD = "pw-" + uuid.uuid4().hex[:8]
# The README's least-privilege grants, plus the test's side table.
GRANTS = [
    *readme_grants(),
    "GRANT USAGE ON SCHEMA awa_test TO {role};",
    "GRANT SELECT, INSERT, UPDATE ON awa_test.attempts TO {role};",
]


@pytest.fixture
def role(dsn: str) -> Iterator[tuple[str, str]]:
    """A least-privilege worker role (the README's grants) and its URL."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(SIDE_TABLE)
    with login_role(dsn, "awa_w", PASSWORD, GRANTS) as role:
        yield role


@pytest.fixture
def notify_dir() -> Iterator[Path]:
    path = Path(tempfile.mkdtemp(prefix="awa-n-", dir="/tmp"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


def received(server: NotifySocket) -> list[dict[str, str]]:
    while server.receive(0.01) is not None:
        pass
    return [fields for _, fields in server.messages]


@pytest.mark.parametrize("processes", ["1", "2"])
def test_a_missing_grant_is_logged_retried_and_recovers(
    dsn: str, role: tuple[str, str], tmp_path: Path, notify_dir: Path, processes: str
) -> None:
    """`awa worker` as a role without UPDATE on awa.jobs: every claim fails with a permission
    error (not a connection error). The runner logs it at ERROR and backs off, no READY and no
    WATCHDOG go out; once granted, READY comes and the job runs, in the same process (or,
    supervised, the same children)."""
    name, url = role
    run_sql(dsn, "REVOKE UPDATE ON awa.jobs FROM {r}", r=name)
    with awa.Client(dsn) as client:
        job = client.insert(Sleepy(0.0))
    config = tmp_path / "awa.toml"
    config.write_text('[app]\nmodules = ["tests.apps.lifecycle"]\n')
    server = NotifySocket(str(notify_dir / "notify.sock"))
    env = {**os.environ, "AWA_DATABASE_URL": url, "PYTHONPATH": str(ROOT), "NO_COLOR": "1"}
    env |= {"NOTIFY_SOCKET": server.address, "WATCHDOG_USEC": "200000"}
    env.pop("AWA_CONFIG", None)
    log = tmp_path / "worker.log"
    with log.open("w") as err:
        proc = subprocess.Popen(
            [AWA, "--config", str(config), "worker", "--processes", processes],
            env=env,
            stderr=err,
        )
    try:
        deadline = time.monotonic() + 30
        while log.read_text().count("action=claim_failed") < 3 * int(processes):
            assert proc.poll() is None and time.monotonic() < deadline, log.read_text()
            time.sleep(0.05)
        text = log.read_text()
        assert " ERROR awa.worker claim on queue default failed, retrying in 0.1s" in text
        assert "permission denied" in text and "Traceback" not in text
        # One line per backoff step: 0.1, 0.2, 0.4 ... not a line per poll.
        assert "retrying in 0.2s" in text and "retrying in 0.4s" in text
        assert not [m for m in received(server) if "READY" in m or "WATCHDOG" in m]
        run_sql(dsn, "GRANT UPDATE ON awa.jobs TO {r}", r=name)
        server.wait_for("READY", timeout=60)
        server.wait_for("WATCHDOG", timeout=10)
        wait = time.monotonic() + 30
        while job_row(dsn, job.id).state != awa.JobState.COMPLETED:
            assert proc.poll() is None and time.monotonic() < wait, log.read_text()
            time.sleep(0.05)
        assert "action=claim_recovered" in log.read_text()
        assert "action=child_restarting" not in log.read_text()
    finally:
        proc.send_signal(signal.SIGTERM)
        code = proc.wait(timeout=30)
        server.close()
    assert code == 0, log.read_text()


def terminate_worker_backends(dsn: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
            " WHERE datname = current_database() AND application_name = 'awa-worker'"
        )


def test_a_read_only_window_is_retried_and_the_worker_recovers(
    dsn: str, caplog: pytest.LogCaptureFixture
) -> None:
    asyncio.run(read_only_window(dsn, caplog))


async def read_only_window(dsn: str, caplog: pytest.LogCaptureFixture) -> None:
    """A failover's read-only window (default_transaction_read_only on, connections dropped):
    claims fail with a read-only error, the worker stops reporting healthy, and once the
    database is writable again (connections dropped again) it claims and runs jobs."""
    app = awa.App()
    ran: list[int] = []

    @app.task(Sleepy)
    async def sleepy(job: awa.Job) -> None:
        ran.append(job.id)

    with psycopg.connect(dsn) as conn:
        db = conn.info.dbname
    caplog.set_level(logging.INFO, logger="awa")
    async with running_worker(app, dsn, maintenance=False) as worker:
        await wait_until(worker.is_ready)
        assert worker.healthy()
        run_sql(dsn, "ALTER DATABASE {d} SET default_transaction_read_only = on", d=db)
        try:
            terminate_worker_backends(dsn)

            def read_only_claims() -> list[logging.LogRecord]:
                return [
                    r
                    for r in caplog.records
                    if getattr(r, "action", "") == "claim_failed"
                    and "read-only transaction" in r.getMessage()
                ]

            await wait_until(lambda: len(read_only_claims()) >= 2, timeout=30)
            assert all(r.levelno == logging.ERROR for r in read_only_claims())
            assert not worker.healthy()
        finally:
            run_sql(dsn, "ALTER DATABASE {d} RESET default_transaction_read_only", d=db)
        terminate_worker_backends(dsn)
        await wait_until(worker.healthy, timeout=60)
        async with awa.AsyncClient(dsn) as client:
            job = await client.insert(Sleepy(0.0))
        await wait_until(lambda: job.id in ran, timeout=30)
        await wait_until(lambda: job_row(dsn, job.id).state == awa.JobState.COMPLETED, timeout=30)
        assert all(not t.done() for t in worker._runner_tasks)


def test_a_supervised_task_that_ends_takes_the_worker_down(dsn: str) -> None:
    asyncio.run(supervised_task_ends(dsn))


async def supervised_task_ends(dsn: str) -> None:
    """Worker.supervise (the seam plugins use): a watched task that raises, or just returns
    while the worker is not stopping, is logged at ERROR and Worker.run() raises AwaError."""
    app = awa.App()

    @app.task(Sleepy)
    async def sleepy(job: awa.Job) -> None:
        pass

    for body in ("raise", "return"):
        worker = awa.Worker(app, dsn, {"default": 2}, poll_interval=0.2, maintenance=False)
        run = asyncio.create_task(worker.run())
        await asyncio.wait_for(worker.wait_ready(), timeout=20)

        async def ends() -> None:
            await asyncio.sleep(0.05)
            if body == "raise":
                raise RuntimeError("boom")

        worker.supervise(asyncio.create_task(ends(), name="plugin-loop"))
        with pytest.raises(awa.AwaError, match="worker task plugin-loop"):
            await asyncio.wait_for(run, timeout=30)
        assert worker.stopping


def test_awa_worker_exits_1_when_a_loop_dies(dsn: str, tmp_path: Path) -> None:
    """The real process: a plugin hands the worker a task that fails; `awa worker` logs it
    at ERROR (action=task_died) and exits 1, instead of living on without the loop."""
    config = tmp_path / "awa.toml"
    config.write_text(
        '[app]\nmodules = ["tests.apps.lifecycle"]\nplugins = ["tests.integration.plugins.dying_plugin"]\n'
    )
    env = {**os.environ, "AWA_DATABASE_URL": dsn, "PYTHONPATH": str(ROOT), "NO_COLOR": "1"}
    for name in ("AWA_CONFIG", "NOTIFY_SOCKET", "WATCHDOG_USEC"):
        env.pop(name, None)
    done = subprocess.run(
        [AWA, "--config", str(config), "worker"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 1, done.stderr
    assert "action=task_died task=dying-plugin-loop" in done.stderr
    assert "worker task dying-plugin-loop failed unexpectedly" in done.stderr.splitlines()[-1]
