"""Cancellation reaches the handler (issue 16 item 2, D2, architecture §15.6), with real `awa
worker` processes running tests/apps/lifecycle.py, which records each attempt's start and end
in ``awa_test.attempts``. Asserted by ordering (no two attempts of a job overlap) and by how
each attempt ended, with generous liveness bounds rather than tight timings."""

from __future__ import annotations

import itertools
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from datetime import datetime
from pathlib import Path

import psycopg
import pytest

import awa_cli as awa
from tests.apps.lifecycle import SIDE_TABLE, Polite, Sleepy, Stubborn
from tests.helpers import ROOT, job_row

pytestmark = pytest.mark.integration

AWA = str(Path(sys.executable).parent / "awa")
FAST_MAINTENANCE = (
    "[maintenance]\nheartbeat_interval = 0.5\nheartbeat_staleness = 3\n"
    "rescue_interval = 0.3\nleader_election_interval = 0.5\n"
)
# The rescue sweep is the leader's and may be slow (or another worker's): the runtime stops
# the attempt at its deadline itself, whether or not a sweep comes first.
SLOW_RESCUE = FAST_MAINTENANCE.replace("rescue_interval = 0.3", "rescue_interval = 120")
Attempt = tuple[int, datetime, datetime | None, str | None]  # run_lease, started, ended, how


class WorkerProcess:
    def __init__(self, dsn: str, tmp_path: Path, config: str) -> None:
        self.dsn = dsn
        path = tmp_path / "awa.toml"
        path.write_text('[app]\nmodules = ["tests.apps.lifecycle"]\n' + config)
        env = {**os.environ, "AWA_DATABASE_URL": dsn, "PYTHONPATH": str(ROOT), "NO_COLOR": "1"}
        for name in ("AWA_CONFIG", "NOTIFY_SOCKET", "WATCHDOG_USEC"):
            env.pop(name, None)
        self.log_path = tmp_path / "worker.log"
        with self.log_path.open("w") as err:
            self.proc = subprocess.Popen(
                [AWA, "--config", str(path), "worker"], env=env, stderr=err
            )

    def log(self) -> str:
        return self.log_path.read_text()

    def wait(self, condition: Callable[[], bool], timeout: float = 30) -> None:
        deadline = time.monotonic() + timeout
        while not condition():
            assert self.proc.poll() is None, self.log()
            assert time.monotonic() < deadline, f"not within {timeout}s:\n{self.log()}"
            time.sleep(0.05)

    def attempts(self, job_id: int) -> list[Attempt]:
        with psycopg.connect(self.dsn) as conn:
            rows = conn.execute(
                "SELECT run_lease, started_at, ended_at, how FROM awa_test.attempts"
                " WHERE job_id = %s ORDER BY started_at",
                (job_id,),
            ).fetchall()
        return [(r[0], r[1], r[2], r[3]) for r in rows]

    def stop(self, timeout: float = 30) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        return self.proc.wait(timeout=timeout)


@pytest.fixture
def start(dsn: str, tmp_path: Path) -> Iterator[Callable[[str], WorkerProcess]]:
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(SIDE_TABLE)
    started: list[WorkerProcess] = []

    def begin(config: str) -> WorkerProcess:
        started.append(WorkerProcess(dsn, tmp_path, config))
        return started[-1]

    yield begin
    for worker in started:
        if worker.proc.poll() is None:
            worker.proc.kill()
            worker.proc.wait()


def no_overlap(attempts: list[Attempt]) -> None:
    for (_, _, ended, _), (_, started, _, _) in itertools.pairwise(attempts):
        assert ended is not None and ended <= started, attempts


def terminal(dsn: str, job_id: int) -> bool:
    return job_row(dsn, job_id).state in (awa.JobState.FAILED, awa.JobState.COMPLETED)


@pytest.mark.parametrize(
    ("args", "how", "maintenance"),
    [
        (Sleepy(10), "task cancelled, flag True", FAST_MAINTENANCE),
        (Sleepy(10), "task cancelled, flag True", SLOW_RESCUE),
        (Polite(10), "saw the flag", SLOW_RESCUE),
    ],
    ids=["async-rescue-racing", "async", "def"],
)
def test_a_deadline_stops_the_handler_and_no_second_attempt_overlaps_it(
    dsn: str, start: Callable[[str], WorkerProcess], args: object, how: str, maintenance: str
) -> None:
    """D2: a 10 s job with a 3 s queue deadline. The async handler is cancelled as a task
    about a second after its deadline, the def handler sees job.is_cancelled(); each attempt
    ends 'hard deadline exceeded', and the second attempt starts only after the first ended
    (also when the rescue sweep races the runtime's own deadline timer)."""
    worker = start(f'[queues.default]\ndeadline = "3s"\n{maintenance}')
    with awa.Client(dsn) as client:
        job = client.insert(args, max_attempts=2)
    # The rescue sweep may fail the last attempt before its handler has ended: wait for both.
    worker.wait(
        lambda: terminal(dsn, job.id) and all(a[2] for a in worker.attempts(job.id)), timeout=60
    )
    attempts = worker.attempts(job.id)
    assert [a[0] for a in attempts] == [1, 2]
    no_overlap(attempts)
    for _, started, ended, ended_how in attempts:
        assert ended_how == how
        assert ended is not None and 2.0 < (ended - started).total_seconds() < 8.0
    row = job_row(dsn, job.id)
    assert row.state == awa.JobState.FAILED
    assert [e["error"] for e in row.errors] == ["hard deadline exceeded"] * 2
    assert worker.stop() == 0


def test_awa_job_cancel_stops_a_running_async_handler(
    dsn: str, start: Callable[[str], WorkerProcess]
) -> None:
    """D2: `awa job cancel` of a running job notifies the worker, whose handler sees the flag
    and is cancelled as a task after the grace, instead of running on for its 30 s."""
    worker = start(FAST_MAINTENANCE)
    with awa.Client(dsn) as client:
        job = client.insert(Sleepy(30))
    worker.wait(lambda: len(worker.attempts(job.id)) == 1)
    done = subprocess.run(
        [AWA, "--database-url", dsn, "job", "cancel", str(job.id)],
        capture_output=True,
        text=True,
        env={**os.environ, "NO_COLOR": "1"},
        timeout=30,
    )
    assert done.returncode == 0, done.stderr
    worker.wait(lambda: worker.attempts(job.id)[0][3] is not None, timeout=15)
    ((_, started, ended, how),) = worker.attempts(job.id)
    assert how == "task cancelled, flag True"
    assert ended is not None and (ended - started).total_seconds() < 20
    assert job_row(dsn, job.id).state == awa.JobState.CANCELLED
    assert worker.stop() == 0


def test_shutdown_flips_the_flag_of_a_def_handler(
    dsn: str, start: Callable[[str], WorkerProcess]
) -> None:
    """D2: SIGTERM turns job.is_cancelled() true at once: a polling def handler stops long
    before shutdown_timeout, and the worker exits 0 with the attempt retryable."""
    worker = start(f'[worker]\nshutdown_timeout = "60s"\n{FAST_MAINTENANCE}')
    with awa.Client(dsn) as client:
        job = client.insert(Polite(120))
    worker.wait(lambda: len(worker.attempts(job.id)) == 1)
    began = time.monotonic()
    assert worker.stop(timeout=50) == 0, worker.log()
    assert time.monotonic() - began < 40
    ((_, _, ended, how),) = worker.attempts(job.id)
    assert how == "saw the flag" and ended is not None
    assert job_row(dsn, job.id).state == awa.JobState.RETRYABLE


def test_a_def_handler_that_never_returns_does_not_hold_the_worker(
    dsn: str, start: Callable[[str], WorkerProcess]
) -> None:
    """D2: a def handler that ignores the flag and never returns: `awa worker` still exits
    within shutdown_timeout plus a few seconds, warns naming the job, and leaves it
    retryable (a second worker may then run it)."""
    worker = start(f'[worker]\nshutdown_timeout = "1s"\n{FAST_MAINTENANCE}')
    with awa.Client(dsn) as client:
        job = client.insert(Stubborn())
    worker.wait(lambda: len(worker.attempts(job.id)) == 1)
    began = time.monotonic()
    code = worker.stop(timeout=30)
    took = time.monotonic() - began
    log = worker.log()
    assert code == 0, log
    assert took < 15, log
    warned = [line for line in log.splitlines() if "action=handler_abandoned" in line]
    assert len(warned) == 1 and f"job_id={job.id}" in warned[0] and " WARNING " in warned[0]
    row = job_row(dsn, job.id)
    assert row.state == awa.JobState.RETRYABLE
    assert "worker shut down" in row.errors[-1]["error"]
