"""`awa worker --processes N` as real processes: children run the jobs, a killed child is
restarted, SIGTERM/SIGINT drain, a second signal kills, a dead supervisor leaves no orphans."""

from __future__ import annotations

import os
import re
import signal
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest

import awa_cli as awa
from awa_cli.worker.supervisor import Backoff
from tests.apps.recording import SIDE_TABLE
from tests.helpers import ROOT, job_row, states, spawn_worker

# A plugin recording which processes ran the worker hooks (marker files named hook-pid).
HOOK_PIDS_PLUGIN = """
import os
from pathlib import Path

import awa_cli

HOOKS = Path(__file__).with_name("hooks")


@awa_cli.hookimpl
def awa_worker_started(worker):
    (HOOKS / f"started-{os.getpid()}").touch()


@awa_cli.hookimpl
def awa_worker_stopping(worker):
    (HOOKS / f"stopping-{os.getpid()}").touch()
"""
STARTED = re.compile(r"action=child_started slot=(\d+) pid=(\d+)")


class Supervised:
    """A real `awa worker --processes N` in its own session, its stderr in a file."""

    def __init__(
        self,
        tmp_path: Path,
        dsn: str,
        processes: int = 2,
        shutdown_timeout: str = "10s",
        modules: str = '["tests.apps.recording"]',
    ) -> None:
        (tmp_path / "hookpids.py").write_text(HOOK_PIDS_PLUGIN)
        self.hooks = tmp_path / "hooks"
        self.hooks.mkdir()
        config = tmp_path / "awa.toml"
        config.write_text(
            f'[app]\nmodules = {modules}\nplugins = ["hookpids"]\n'
            "[queues.default]\nconcurrency = 5\n"
            f'[worker]\nshutdown_timeout = "{shutdown_timeout}"\n'
        )
        self.log_path = tmp_path / "stderr.log"
        env = {**os.environ, "AWA_DATABASE_URL": dsn, "PYTHONPATH": str(ROOT)}
        for name in ("NOTIFY_SOCKET", "WATCHDOG_USEC", "WATCHDOG_PID"):
            env.pop(name, None)
        with self.log_path.open("w") as log:
            self.proc = spawn_worker(config, log, env, "--processes", str(processes))

    def hook_pids(self, hook: str) -> set[int]:
        return {int(p.name.split("-")[1]) for p in self.hooks.glob(f"{hook}-*")}

    def log(self) -> str:
        return self.log_path.read_text()

    def wait_log(self, pattern: str, count: int = 1, timeout: float = 15.0) -> list[re.Match[str]]:
        deadline = time.monotonic() + timeout
        while True:
            matches = list(re.finditer(pattern, self.log()))
            if len(matches) >= count:
                return matches
            assert time.monotonic() < deadline, f"no {count}x {pattern!r} in:\n{self.log()}"
            assert self.proc.poll() is None or pattern.startswith("supervisor stopped"), self.log()
            time.sleep(0.05)

    def children(self) -> dict[int, int]:
        """Slot number → pid of its latest child."""
        return {int(m.group(1)): int(m.group(2)) for m in STARTED.finditer(self.log())}

    def stop(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()


@pytest.fixture
def side_table(dsn: str) -> str:
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(SIDE_TABLE)
    return dsn


@pytest.fixture
def supervise(tmp_path: Path) -> Iterator[Callable[..., Supervised]]:
    """Start ``awa worker --processes 2`` on a DSN (waiting for its children unless
    ``ready=False``); every one started is killed when the test ends."""
    started: list[Supervised] = []

    def start(dsn: str, *, ready: bool = True, **options: Any) -> Supervised:
        supervised = Supervised(tmp_path, dsn, **options)
        started.append(supervised)
        if ready:
            supervised.wait_log(r"all 2 worker processes ready")
        return supervised

    yield start
    for s in started:
        s.stop()


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def wait_gone(pids: list[int], timeout: float = 15.0) -> None:
    deadline = time.monotonic() + timeout
    while any(alive(p) for p in pids):
        assert time.monotonic() < deadline, [p for p in pids if alive(p)]
        time.sleep(0.05)


def executions(dsn: str, job_id: int | None = None) -> list[int]:
    with psycopg.connect(dsn) as conn:
        if job_id is None:
            return [r[0] for r in conn.execute("SELECT pid FROM awa_test.executions").fetchall()]
        return [
            r[0]
            for r in conn.execute(
                "SELECT pid FROM awa_test.executions WHERE job_id = %s", (job_id,)
            ).fetchall()
        ]


def wait_running(dsn: str, job_id: int, timeout: float = 15.0) -> int:
    deadline = time.monotonic() + timeout
    while not (pids := executions(dsn, job_id)):
        assert time.monotonic() < deadline
        time.sleep(0.05)
    return pids[0]


def test_backoff_doubles_to_a_ceiling_and_resets_after_a_stable_run() -> None:
    backoff = Backoff(initial=0.5, maximum=30.0, stable_after=60.0)
    delays = [backoff.next_delay(uptime=1.0) for _ in range(9)]
    assert delays == [0.5, 1.0, 2.0, 4.0, 8.0, 16.0, 30.0, 30.0, 30.0]
    assert backoff.next_delay(uptime=61.0) == 0.5
    assert backoff.next_delay(uptime=1.0) == 1.0


@pytest.mark.integration
def test_children_run_the_jobs_a_killed_child_is_restarted_and_sigterm_drains(
    side_table: str, supervise: Callable[..., Supervised]
) -> None:
    dsn = side_table
    s = supervise(dsn)
    first = s.children()
    assert sorted(first) == [1, 2] and s.proc.pid not in first.values()

    with awa.Client(dsn) as client:
        client.insert_many([{"n": i} for i in range(40)], kind="record")
    deadline = time.monotonic() + 15
    while states(dsn).get("completed", 0) < 40:
        assert time.monotonic() < deadline, states(dsn)
        time.sleep(0.05)
    # The supervisor runs no jobs; its children do.
    assert set(executions(dsn)) <= set(first.values())

    os.kill(first[1], signal.SIGKILL)
    s.wait_log(rf"action=child_exited slot=1 pid={first[1]} signal=SIGKILL")
    s.wait_log(r"action=child_restarting slot=1 delay=0\.5\b")
    s.wait_log(r"action=child_ready slot=1 ", count=2)
    restarted = s.children()
    assert restarted[1] != first[1] and restarted[2] == first[2]
    assert not alive(first[1])

    with awa.Client(dsn) as client:
        slow = client.insert({"n": -1, "sleep": 2.0}, kind="record")
    wait_running(dsn, slow.id)
    s.proc.send_signal(signal.SIGTERM)
    assert s.proc.wait(timeout=20) == 0, s.log()
    assert job_row(dsn, slow.id).state == "completed"  # finished in flight, not interrupted
    assert len(executions(dsn, slow.id)) == 1
    wait_gone(list(restarted.values()), timeout=2)
    log = s.log()
    assert len(re.findall(r"action=child_exited slot=\d pid=\d+ status=0 ", log)) == 2
    assert "supervisor stopped (exit 0)" in log


@pytest.mark.integration
def test_ctrl_c_on_the_terminal_drains_each_child_once(
    side_table: str, supervise: Callable[..., Supervised]
) -> None:
    dsn = side_table
    s = supervise(dsn)
    children = set(s.children().values())
    with awa.Client(dsn) as client:
        slow = client.insert({"n": -1, "sleep": 1.5}, kind="record")
    wait_running(dsn, slow.id)
    # The terminal sends SIGINT to its whole foreground process group. Children in that group
    # would see it beside the forwarded SIGTERM, take it as a second signal and abort.
    os.killpg(s.proc.pid, signal.SIGINT)
    assert s.proc.wait(timeout=20) == 0, s.log()
    assert job_row(dsn, slow.id).state == "completed"
    assert "second signal" not in s.log()
    # The worker hooks fired in each worker process, never in the supervisor.
    assert s.hook_pids("started") == children == s.hook_pids("stopping")


@pytest.mark.integration
def test_a_second_signal_kills_the_children_at_once(
    side_table: str, supervise: Callable[..., Supervised]
) -> None:
    dsn = side_table
    s = supervise(dsn, shutdown_timeout="60s")
    children = list(s.children().values())
    with awa.Client(dsn) as client:
        stuck = client.insert({"n": -1, "sleep": 60}, kind="record")
    wait_running(dsn, stuck.id)
    s.proc.send_signal(signal.SIGTERM)
    s.wait_log(r"received SIGTERM: stopping")
    started = time.monotonic()
    s.proc.send_signal(signal.SIGTERM)
    assert s.proc.wait(timeout=10) == 1, s.log()
    assert time.monotonic() - started < 5
    wait_gone(children, timeout=2)
    # The child with the stuck job is killed; the idle one may already have drained (exit 0)
    # before the second signal arrived.
    killed = re.findall(r"action=child_exited .*signal=SIGKILL", s.log())
    drained = re.findall(r"action=child_exited .*status=0", s.log())
    assert len(killed) >= 1 and len(killed) + len(drained) == 2, s.log()


@pytest.mark.integration
def test_children_drain_when_the_supervisor_is_killed(
    side_table: str, supervise: Callable[..., Supervised]
) -> None:
    dsn = side_table
    s = supervise(dsn)
    children = list(s.children().values())
    s.proc.kill()  # only the supervisor: no chance to forward anything
    s.proc.wait()
    wait_gone(children, timeout=15)
    assert s.log().count("supervisor gone: draining") == 2


@pytest.mark.integration
def test_a_config_error_in_the_children_stops_the_supervisor(
    dsn: str, supervise: Callable[..., Supervised]
) -> None:
    # The supervisor imports the app before it starts children (to check the [limits] against
    # it), so an unimportable module stops it at once, exit 2, in one line; were it only seen
    # by a child, the child's exit 2 before ready stops the supervisor ("not restarting").
    s = supervise(dsn, ready=False, modules='["no_such_module_awa"]')
    assert s.proc.wait(timeout=20) == 2, s.log()
    log = s.log()
    assert "no module named 'no_such_module_awa'" in log
    assert log.count("no module named 'no_such_module_awa'") == 1 or (
        "(usage or config error) before it was ready: not restarting" in log
    )
    assert "restarting in" not in log
    assert "Traceback" not in log


def test_no_app_modules_stops_the_supervisor_before_any_child_or_connection(
    supervise: Callable[..., Supervised],
) -> None:
    s = supervise("postgresql://nobody@127.0.0.1:1/none", ready=False, modules="[]")
    assert s.proc.wait(timeout=20) == 2, s.log()
    log = s.log()
    assert "no [app] modules configured" in log and "cannot connect" not in log
    assert "child_started" not in log
