"""Shared machinery of the chaos runs: a supervised `awa worker --processes N` on the chaos app
(tests/apps/chaos.py), the resolver process, a CLI resolver loop, a SIGKILL loop, and the
end-state checks every chaos run must pass."""

from __future__ import annotations

import json
import os
import random
import re
import signal
import subprocess
import sys
import threading
import time
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import psycopg

import awa_cli as awa
from tests.apps.chaos import SIDE_TABLE, ChaosJob
from tests.helpers import ROOT, spawn_worker

AWA_BIN = str(Path(sys.executable).parent / "awa")
# Short maintenance timings so killed jobs are rescued within seconds.
MAINTENANCE = (
    "[maintenance]\nheartbeat_interval = 0.5\nheartbeat_staleness = 2\n"
    "rescue_interval = 0.5\nleader_election_interval = 0.5\n"
)
L = TypeVar("L", bound="Loop")
RESCUE_ERRORS = (
    "heartbeat stale: worker presumed dead",
    "worker shut down",
    "hard deadline exceeded",
)


def write_config(tmp_path: Path, concurrency: int = 10, shutdown_timeout: str = "10s") -> Path:
    config = tmp_path / "awa.toml"
    config.write_text(
        '[app]\nmodules = ["tests.apps.chaos"]\n'
        f"[queues.default]\nconcurrency = {concurrency}\n"
        f'[worker]\nshutdown_timeout = "{shutdown_timeout}"\n' + MAINTENANCE
    )
    return config


def env_for(dsn: str) -> dict[str, str]:
    env = {**os.environ, "AWA_DATABASE_URL": dsn, "PYTHONPATH": str(ROOT), "NO_COLOR": "1"}
    for name in ("NOTIFY_SOCKET", "WATCHDOG_USEC", "WATCHDOG_PID", "AWA_CONFIG"):
        env.pop(name, None)
    return env


def prepare_db(dsn: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(SIDE_TABLE)


def enqueue_triggers(dsn: str, count: int, seed: int = 11, max_sleep: float = 0.3) -> None:
    """``count`` ChaosJobs: 70 % ok, 10 % fail by design, 10 % flaky, 10 % park."""
    rng = random.Random(seed)
    modes = ["ok"] * 7 + ["fail", "flaky", "park"]
    jobs = [
        ChaosJob(n=i, mode=rng.choice(modes), sleep=round(rng.uniform(0, max_sleep), 3))
        for i in range(count)
    ]
    with awa.Client(dsn) as client:
        for start in range(0, count, 1000):
            assert client.insert_many(jobs[start : start + 1000]) == len(jobs[start : start + 1000])


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:  # a zombie is dead for our purposes
        return Path(f"/proc/{pid}/stat").read_text().split(") ", 1)[1][0] != "Z"
    except OSError:
        return False


STARTED = re.compile(r"action=child_started slot=(\d+) pid=(\d+)")
READY = re.compile(r"action=child_ready slot=(\d+) pid=(\d+)")


class Fleet:
    """A supervised `awa worker --processes N` in its own session, its stderr in a file."""

    def __init__(
        self,
        tmp_path: Path,
        dsn: str,
        processes: int = 2,
        concurrency: int = 10,
        shutdown_timeout: str = "10s",
    ) -> None:
        self.dsn = dsn
        self.config = write_config(tmp_path, concurrency, shutdown_timeout)
        self.log_path = tmp_path / "supervisor.log"
        self.env = env_for(dsn)
        with self.log_path.open("w") as log:
            self.proc = spawn_worker(
                self.config, log, self.env, "--processes", str(processes), quiet=True
            )

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def children(self) -> dict[int, int]:
        """Slot → pid of its latest child."""
        return {int(m.group(1)): int(m.group(2)) for m in STARTED.finditer(self.log())}

    def ready_pids(self) -> set[int]:
        return {int(m.group(2)) for m in READY.finditer(self.log())}

    def wait_ready(self, timeout: float = 30.0) -> None:
        deadline = time.monotonic() + timeout
        while "worker processes ready" not in self.log():
            assert self.proc.poll() is None, self.log()
            assert time.monotonic() < deadline, self.log()
            time.sleep(0.05)

    def stop(self, timeout: float = 60.0) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            raise

    def kill(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()
        for pid in self.children().values():
            if alive(pid):
                os.killpg(pid, signal.SIGKILL)  # children run in sessions of their own


class Resolver:
    """``python -m tests.apps.chaos resolve`` in a process of its own."""

    def __init__(self, tmp_path: Path, dsn: str) -> None:
        self.log_path = tmp_path / "resolver.log"
        with self.log_path.open("w") as log:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "tests.apps.chaos", "resolve"],
                env=env_for(dsn),
                cwd=ROOT,
                stdout=subprocess.PIPE,
                stderr=log,
                stdin=subprocess.DEVNULL,
                text=True,
            )

    def stop(self) -> dict[str, int]:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        out, _ = self.proc.communicate(timeout=30)
        counts = dict(re.findall(r"(\w+)=(\d+)", out))
        return {k: int(v) for k, v in counts.items()}


class Loop(threading.Thread):
    """A background loop calling ``step()`` every ``interval`` seconds until stopped."""

    def __init__(self, interval: float) -> None:
        super().__init__(daemon=True)
        self.interval = interval
        self.stopped = threading.Event()
        self.failures: list[str] = []

    def run(self) -> None:
        while not self.stopped.wait(self.interval):
            try:
                self.step()
            except Exception as exc:
                self.failures.append(f"{type(exc).__name__}: {exc}")

    def step(self) -> None:
        raise NotImplementedError

    def stop(self) -> None:
        self.stopped.set()
        if self.ident is not None:  # started
            self.join(timeout=60)


class Killer(Loop):
    """SIGKILL one worker child every ``interval`` seconds, only while every slot has a ready
    child (so one worker keeps working while the supervisor restarts the other)."""

    def __init__(self, fleet: Fleet, interval: float, seed: int = 7) -> None:
        super().__init__(interval)
        self.fleet = fleet
        self.rng = random.Random(seed)
        self.kills: list[int] = []

    def step(self) -> None:
        children = self.fleet.children()
        ready = self.fleet.ready_pids()
        if not children or not all(pid in ready and alive(pid) for pid in children.values()):
            return
        pid = children[self.rng.choice(sorted(children))]
        os.kill(pid, signal.SIGKILL)
        self.kills.append(pid)


class CliResolver(Loop):
    """Every ``interval`` seconds, ``awa callback complete <id>`` on one waiting job (a real
    process); exit 0 or 4 (the resolver process won the race, or the job was rescued)."""

    def __init__(self, fleet: Fleet, interval: float) -> None:
        super().__init__(interval)
        self.fleet = fleet
        self.codes: Counter[int] = Counter()

    def step(self) -> None:
        try:
            with psycopg.connect(self.fleet.dsn, autocommit=True, connect_timeout=5) as conn:
                row = conn.execute(
                    "SELECT callback_id FROM awa.jobs WHERE state = 'waiting_external' "
                    "AND callback_id IS NOT NULL ORDER BY id % 4 = 0 DESC, random() LIMIT 1"
                ).fetchone()
        except psycopg.OperationalError:
            return  # the server is restarting
        if row is None:
            return
        done = subprocess.run(
            [
                AWA_BIN,
                "--config",
                str(self.fleet.config),
                "callback",
                "complete",
                str(row[0]),
                "--payload",
                '{"by": "cli"}',
                "--json",
            ],
            env=self.fleet.env,
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=60,
        )
        self.codes[done.returncode] += 1
        if done.returncode == 0:
            assert json.loads(done.stdout)["state"] == "completed"
        elif done.returncode == 4 or (done.returncode == 1 and "database error" in done.stderr):
            pass  # raced, or the server went away mid-call (the PostgreSQL chaos)
        else:
            raise AssertionError(f"exit {done.returncode}: {done.stderr}")
        if done.returncode:
            # one line of error, last; before it only awa's own retry reports (a call started
            # while the server shut down logs "database connection failed ... retrying")
            *reports, error = done.stderr.strip().splitlines()
            assert error.startswith("Error: ") and "Traceback" not in done.stderr, done.stderr
            assert all(" WARNING awa." in line and "action=" in line for line in reports), (
                done.stderr
            )


def counts(dsn: str) -> dict[str, int]:
    with psycopg.connect(dsn, connect_timeout=5) as conn:
        return dict(
            conn.execute("SELECT state::text, count(*) FROM awa.jobs GROUP BY 1").fetchall()
        )


def wait_all_terminal(
    dsn: str,
    expected_triggers: int,
    timeout: float,
    fleet: Fleet | None = None,
    loops: tuple[Loop, ...] = (),
) -> None:
    deadline = time.monotonic() + timeout
    while True:
        try:
            c = counts(dsn)
            with psycopg.connect(dsn, connect_timeout=5) as conn:
                triggers_done, follow_ups = conn.execute(
                    "SELECT count(*) FILTER (WHERE kind = 'chaos_job' AND state IN ('completed','failed','cancelled')), "
                    "count(*) FILTER (WHERE kind <> 'chaos_job') FROM awa.jobs"
                ).fetchone()
        except psycopg.OperationalError:
            c, triggers_done, follow_ups = {}, 0, 0
        terminal = sum(c.get(s, 0) for s in ("completed", "failed", "cancelled"))
        if (
            triggers_done == expected_triggers
            and terminal == sum(c.values())
            and follow_ups == triggers_done
        ):
            return
        if fleet is not None:
            assert fleet.proc.poll() is None, fleet.log()[-5000:]
        for loop in loops:
            assert not loop.failures, loop.failures
        assert time.monotonic() < deadline, f"not terminal after {timeout}s: {c}"
        time.sleep(0.25)


@dataclass
class Report:
    triggers: int = 0
    completed: int = 0
    failed_by_design: int = 0
    parked: int = 0
    follow_ups: int = 0
    executions: int = 0
    re_executions: int = 0
    rescues: int = 0
    extra: dict[str, Any] = field(default_factory=dict)

    def line(self) -> str:
        fields = {k: v for k, v in self.__dict__.items() if k != "extra"}
        return " ".join(f"{k}={v}" for k, v in {**fields, **self.extra}.items())


def check_end_state(dsn: str, expected_triggers: int) -> Report:
    """Every job terminal; each trigger's outcome as designed; every committed trigger has
    exactly its follow-ups; no attempt ran twice; a job ran again only after a recorded error
    (a rescue, or its by-design first failure), and its final attempt ran exactly once."""
    with psycopg.connect(dsn) as conn:
        jobs = conn.execute(
            "SELECT id, kind, state::text, args, run_lease, attempt, errors FROM awa.jobs"
        ).fetchall()
        executions = conn.execute(
            "SELECT job_id, run_lease, attempt, kind FROM awa_test.executions"
        ).fetchall()
    report = Report()
    by_id = {j[0]: j for j in jobs}
    problems: list[str] = []

    # every job terminal
    not_terminal = [
        (j[0], j[1], j[2]) for j in jobs if j[2] not in ("completed", "failed", "cancelled")
    ]
    if not_terminal:
        problems.append(f"not terminal: {not_terminal[:10]}")

    triggers = [j for j in jobs if j[1] == "chaos_job"]
    report.triggers = len(triggers)
    if len(triggers) != expected_triggers:
        problems.append(f"{len(triggers)} triggers, expected {expected_triggers}")
    done: dict[int, list[int]] = defaultdict(list)
    lost: dict[int, list[int]] = defaultdict(list)
    for j in jobs:
        if j[1] == "chaos_done":
            done[int(j[3]["trigger_id"])].append(j[0])
        elif j[1] == "chaos_lost":
            lost[int(j[3]["trigger_id"])].append(j[0])
        elif j[1] != "chaos_job":
            problems.append(f"unexpected kind {j[1]!r} (job {j[0]})")
    report.follow_ups = sum(map(len, done.values())) + sum(map(len, lost.values()))

    for job_id, kind, state, args, _lease, _attempt, errors in triggers:
        mode = args["mode"]
        want = "failed" if mode == "fail" else "completed"
        if state != want:
            problems.append(f"trigger {job_id} ({mode}) is {state}, errors {errors[-3:]}")
        if state == "completed":
            report.completed += 1
            report.parked += mode == "park"
        if mode == "fail" and state == "failed":
            report.failed_by_design += 1
            if "fails by design" not in errors[-1]["error"] or not errors[-1].get("terminal"):
                problems.append(f"trigger {job_id} failed but not by design: {errors[-1]}")
        want_done = 1 if state == "completed" else 0
        want_lost = 1 if state == "failed" else 0
        if len(done.get(job_id, [])) != want_done:
            problems.append(
                f"trigger {job_id} ({state}) has completed-follow-ups {done.get(job_id)}"
            )
        if len(lost.get(job_id, [])) != want_lost:
            problems.append(
                f"trigger {job_id} ({state}) has exhausted-follow-ups {lost.get(job_id)}"
            )
    orphans = (set(done) | set(lost)) - {t[0] for t in triggers}
    if orphans:
        problems.append(f"follow-ups for unknown triggers {sorted(orphans)[:10]}")

    # executions: one per (job, lease); the final attempt recorded exactly once; re-runs only
    # after a recorded error
    per_lease = Counter((e[0], e[1]) for e in executions)
    twice = [k for k, n in per_lease.items() if n > 1]
    if twice:
        problems.append(f"an attempt ran twice (job, lease): {twice[:10]}")
    runs: dict[int, list[int]] = defaultdict(list)
    for job_id, lease, _attempt, _kind in executions:
        runs[job_id].append(lease)
    report.executions = len(executions)
    for job_id, kind, state, _args, lease, _attempt, errors in jobs:
        leases = runs.get(job_id, [])
        rescues = sum(1 for e in errors if e.get("error") in RESCUE_ERRORS)
        report.rescues += rescues
        if state == "completed" and leases.count(lease) != 1:
            problems.append(
                f"job {job_id} completed with lease {lease} but ran with leases {sorted(leases)}"
            )
        if len(leases) > 1:
            report.re_executions += len(leases) - 1
            if len(leases) - 1 > len(errors):
                problems.append(
                    f"job {job_id} ran {len(leases)} times with only {len(errors)} errors: {errors}"
                )
        if not leases and state != "cancelled":
            problems.append(f"job {job_id} ({kind}, {state}) never ran")
    unknown = set(runs) - set(by_id)
    if unknown:
        problems.append(f"executions of unknown jobs {sorted(unknown)[:10]}")
    assert not problems, "\n".join(problems[:40])
    return report


class ChaosRun:
    """One chaos run: triggers enqueued, a supervised fleet, the resolver process and the CLI
    resolver loop started; ``add`` more loops (a killer, a terminator). Leaving the block stops
    every loop, the resolver and the fleet, whatever happened inside; ``report`` then checks
    the end state and prints one line."""

    def __init__(self, dsn: str, tmp_path: Path, triggers: int) -> None:
        self.dsn, self.triggers = dsn, triggers
        prepare_db(dsn)
        enqueue_triggers(dsn, triggers)
        self.started = time.monotonic()
        self.fleet = Fleet(tmp_path, dsn, processes=2, concurrency=10)
        self.resolver = Resolver(tmp_path, dsn)
        self.cli = CliResolver(self.fleet, 0.2)
        self.loops: list[Loop] = [self.cli]
        self.resolved: dict[str, int] = {}
        self.code: int | None = None
        self.seconds = 0.0

    def add(self, loop: L) -> L:
        self.loops.append(loop)
        loop.start()
        return loop

    def __enter__(self) -> ChaosRun:
        try:
            self.fleet.wait_ready()
        except BaseException:
            self.__exit__()
            raise
        self.cli.start()
        return self

    def __exit__(self, *exc: object) -> None:
        for loop in reversed(self.loops):  # the chaos first, the CLI resolver last
            loop.stop()
        self.resolved = self.resolver.stop()
        try:
            self.code = self.fleet.stop()
        finally:
            self.fleet.kill()
        self.seconds = round(time.monotonic() - self.started, 1)

    def report(self, title: str, **extra: Any) -> Report:
        assert self.code == 0, self.fleet.log()[-3000:]
        report = check_end_state(self.dsn, self.triggers)
        report.extra.update(
            extra,
            cli_resolutions=dict(self.cli.codes),
            resolver=self.resolved,
            seconds=self.seconds,
        )
        print(f"\n{title}: {report.line()}")
        return report
