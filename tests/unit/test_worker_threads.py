"""The pieces of issue 16 that need no database: the daemon handler threads, the loops'
backoff, the ``action=`` keys on log lines, the job's cancellation handle."""

from __future__ import annotations

import asyncio
import logging
import subprocess
import sys
import threading
import time

from awa_cli.db.pool_logs import OneLineFormatter
from awa_cli.db.retry import Backoff, first_line
from awa_cli.worker.services import JobControl
from awa_cli.worker.threads import DaemonThreads


def test_daemon_threads_run_work_concurrently_up_to_their_size() -> None:
    pool = DaemonThreads(2)
    gate = threading.Event()
    running = []
    futures = [pool.submit(lambda n=n: (running.append(n), gate.wait(5), n)[2]) for n in range(3)]
    deadline = time.monotonic() + 5
    while len(running) < 2 and time.monotonic() < deadline:
        time.sleep(0.01)
    time.sleep(0.05)
    assert sorted(running) == [0, 1]  # the third waits for a free thread
    gate.set()
    assert [f.result(timeout=5) for f in futures] == [0, 1, 2]
    assert all(t.daemon for t in threading.enumerate() if t.name.startswith("awa-handler"))
    pool.shutdown(wait=False)


def test_an_abandoned_thread_makes_room_for_one_more() -> None:
    pool = DaemonThreads(1)
    stuck = threading.Event()
    pool.submit(stuck.wait, 10)
    pool.abandon()
    assert pool.submit(lambda: 42).result(timeout=5) == 42
    stuck.set()
    pool.shutdown(wait=False, cancel_futures=True)


def test_exceptions_reach_the_future() -> None:
    pool = DaemonThreads(1)
    future = pool.submit(lambda: 1 / 0)
    assert isinstance(future.exception(timeout=5), ZeroDivisionError)
    pool.shutdown()


def test_a_handler_thread_that_never_returns_does_not_hold_the_interpreter() -> None:
    code = (
        "import time\n"
        "from awa_cli.worker.threads import DaemonThreads\n"
        "pool = DaemonThreads(1)\n"
        "pool.submit(time.sleep, 3600)\n"
        "time.sleep(0.1)\n"
        "pool.shutdown(wait=False, cancel_futures=True)\n"
    )
    started = time.monotonic()
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)
    assert time.monotonic() - started < 30


def test_backoff_doubles_to_its_cap_and_resets() -> None:
    backoff = Backoff(0.1, 0.5)
    assert [backoff.next() for _ in range(5)] == [0.1, 0.2, 0.4, 0.5, 0.5]
    backoff.reset()
    assert backoff.next() == 0.1


def test_first_line_is_one_redacted_line() -> None:
    exc = RuntimeError("connection to postgresql://u:secret@h/db failed\nHINT: more")
    assert first_line(exc) == "connection to postgresql://u:***@h/db failed"
    assert first_line(RuntimeError()) == "RuntimeError"


def test_log_lines_end_with_their_action_keys() -> None:
    formatter = OneLineFormatter("%(levelname)s %(message)s")
    record = logging.LogRecord("awa.worker", logging.ERROR, __file__, 1, "claim failed", (), None)
    record.action, record.queue, record.retry_in = "claim_failed", "default", 0.4
    assert formatter.format(record) == (
        "ERROR claim failed action=claim_failed queue=default retry_in=0.4"
    )
    plain = logging.LogRecord("awa.worker", logging.INFO, __file__, 1, "hello", (), None)
    assert formatter.format(plain) == "INFO hello"
    logfmt = logging.LogRecord("awa.x", logging.INFO, __file__, 1, "action=a slot=1", (), None)
    logfmt.action = "a"
    assert formatter.format(logfmt) == "INFO action=a slot=1"  # not repeated


def test_job_control_cancels_its_task_after_the_grace() -> None:
    async def run() -> tuple[bool, str | None, bool]:
        control = JobControl()

        async def handler() -> None:
            await asyncio.sleep(30)

        control.task = asyncio.create_task(handler())
        control.cancel("deadline", grace=0.05)
        control.cancel("fenced", grace=0.05)  # the first reason stays, one timer
        try:
            await asyncio.wait_for(control.task, timeout=10)
        except asyncio.CancelledError:
            pass
        return control.is_cancelled(), control.reason, control.hard_cancelled

    assert asyncio.run(run()) == (True, "deadline", True)


def test_a_released_control_cancels_nothing() -> None:
    async def run() -> bool:
        control = JobControl()
        control.task = asyncio.create_task(asyncio.sleep(0.2))
        task = control.task
        control.cancel("fenced", grace=0.01)
        control.release()
        await task
        return task.cancelled()

    assert asyncio.run(run()) is False
