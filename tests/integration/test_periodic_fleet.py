"""Periodic jobs across real `awa worker` processes (architecture §9): exactly one job per fire time
with three workers and a kill -9 of the leader, pause surviving a restart and a redeploy, and
each catch-up policy after downtime (back-dated rather than slept through)."""

from __future__ import annotations

import itertools
import os
import re
import signal
import subprocess
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import psycopg
import pytest

import awa_cli as awa
from tests.helpers import ROOT, spawn_worker

pytestmark = pytest.mark.integration

MAINTENANCE = (
    "[maintenance]\nheartbeat_interval = 0.5\nheartbeat_staleness = 3\n"
    'rescue_interval = "0.5s"\nleader_election_interval = "0.5s"\n'
)
EVERY_SECOND = '[periodic.every_second]\ncron = "* * * * * *"\nkind = "tick"\n'


def config(tmp_path: Path, schedules: str, name: str = "awa.toml") -> Path:
    path = tmp_path / name
    path.write_text(
        '[app]\nmodules = ["tests.apps.periodic_app"]\n'
        "[queues.default]\nconcurrency = 5\n" + MAINTENANCE + schedules
    )
    return path


class WorkerProcess:
    """One `awa worker` process (no supervisor) in its own session, its log in a file."""

    def __init__(self, tmp_path: Path, dsn: str, config_path: Path, label: str) -> None:
        self.log_path = tmp_path / f"{label}.log"
        env = {**os.environ, "AWA_DATABASE_URL": dsn, "PYTHONPATH": str(ROOT), "NO_COLOR": "1"}
        for name in ("NOTIFY_SOCKET", "WATCHDOG_USEC", "WATCHDOG_PID", "AWA_CONFIG"):
            env.pop(name, None)
        with self.log_path.open("w") as log:
            self.proc = spawn_worker(config_path, log, env, quiet=True)

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    @property
    def leads(self) -> bool:
        return "became maintenance leader" in self.log()

    def kill(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait(10)

    def stop(self) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(30)
        except subprocess.TimeoutExpired:
            self.kill()
            raise


@pytest.fixture
def fleet() -> Iterator[list[WorkerProcess]]:
    workers: list[WorkerProcess] = []
    yield workers
    for worker in workers:
        worker.kill()


def wait_for(predicate: Callable[[], Any], timeout: float = 30.0, what: str = "") -> Any:
    deadline = time.monotonic() + timeout
    while not (result := predicate()):
        assert time.monotonic() < deadline, f"not within {timeout}s: {what}"
        time.sleep(0.05)
    return result


def query(dsn: str, sql: str, *params: Any) -> list[tuple[Any, ...]]:
    with psycopg.connect(dsn, autocommit=True) as conn:
        return conn.execute(sql, params).fetchall()  # type: ignore[arg-type]


def fire_times(dsn: str, name: str) -> list[datetime]:
    """The fire times of ``name``'s jobs, oldest first: their ``awa.fire_at`` metadata, not
    their ``run_at``, which a rescue or a retry moves (the killed leader's running job)."""
    rows = query(
        dsn,
        "SELECT (metadata->>'awa.fire_at')::timestamptz AS fire_at FROM awa.jobs"
        " WHERE metadata->>'awa.periodic' = %s ORDER BY fire_at",
        name,
    )
    return [r[0] for r in rows]


def test_exactly_once_with_three_workers_and_the_leader_killed(
    tmp_path: Path, dsn: str, fleet: list[WorkerProcess]
) -> None:
    path = config(tmp_path, '[periodic.every_second]\ncron = "* * * * * *"\nkind = "tick"\n')
    fleet += [WorkerProcess(tmp_path, dsn, path, f"w{i}") for i in range(3)]
    wait_for(lambda: len(fire_times(dsn, "every_second")) >= 3, what="the first fires")
    [leader] = wait_for(lambda: [w for w in fleet if w.leads], what="a leader")
    leader.kill()  # kill -9: its lock goes with its connection, mid-run
    killed_at = datetime.now(UTC)
    survivors = [w for w in fleet if w is not leader]
    wait_for(lambda: sum(w.leads for w in survivors) == 1, what="a new leader")
    wait_for(
        lambda: sum(t > killed_at for t in fire_times(dsn, "every_second")) >= 4,
        what="fires after the kill",
    )
    for worker in survivors:
        assert worker.stop() == 0, worker.log()

    [(total, distinct, fires)] = query(
        dsn,
        "SELECT count(*), count(DISTINCT (metadata->>'awa.periodic', metadata->>'awa.fire_at')),"
        " (SELECT count(*) FROM awa.periodic_fires) FROM awa.jobs",
    )
    assert total == distinct == fires  # no duplicate, and one recorded fire per job
    times = fire_times(dsn, "every_second")
    # No gap: a fire time missed while no leader ran is younger than the grace (60 s), so it
    # is on time and fires late rather than never, whatever the catch-up policy.
    gaps = [b - a for a, b in itertools.pairwise(times) if b - a != timedelta(seconds=1)]
    assert gaps == [], times
    assert times[0] < killed_at < times[-1]
    # ordinary jobs, run by the workers (the last ones may have fired while the last worker
    # was already draining)
    [(completed,)] = query(dsn, "SELECT count(*) FROM awa.jobs WHERE state = 'completed'")
    assert completed >= total - 3


# After a periodic job's row is inserted, its transaction waits on advisory lock GATE while a
# test holds it: the leader is held between its insert and its commit (rescue is not).
GATE = 4242
GATE_SQL = f"""
CREATE FUNCTION public.periodic_gate() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.metadata ? 'awa.periodic' THEN PERFORM pg_advisory_xact_lock_shared({GATE}); END IF;
    RETURN NEW;
END $$;
CREATE TRIGGER periodic_gate AFTER INSERT ON awa.jobs
    FOR EACH ROW EXECUTE FUNCTION public.periodic_gate();
"""


def test_a_leader_killed_between_the_insert_and_the_commit_leaves_nothing(
    tmp_path: Path, dsn: str, fleet: list[WorkerProcess]
) -> None:
    """Hold the leader inside its sweep transaction (the fire recorded, the job inserted, the
    commit not yet sent), kill -9 it there, then let go: the fire is neither lost nor doubled."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(GATE_SQL)  # type: ignore[arg-type]
    path = config(tmp_path, EVERY_SECOND)
    fleet += [WorkerProcess(tmp_path, dsn, path, f"w{i}") for i in range(2)]
    wait_for(lambda: len(fire_times(dsn, "every_second")) >= 2, what="the first fires")
    [leader] = wait_for(lambda: [w for w in fleet if w.leads], what="a leader")
    held = "SELECT pid FROM pg_stat_activity WHERE wait_event = 'advisory'"
    with psycopg.connect(dsn, autocommit=True) as holder:
        holder.execute("SELECT pg_advisory_lock(%s)", (GATE,))
        [(backend,)] = wait_for(lambda: query(dsn, held), what="the leader held before commit")
        leader.kill()
        [survivor] = [w for w in fleet if w is not leader]
        wait_for(lambda: survivor.leads, what="the survivor leading")
        killed_at = datetime.now(UTC)
        holder.execute("SELECT pg_advisory_unlock(%s)", (GATE,))
    wait_for(
        lambda: not query(dsn, "SELECT 1 FROM pg_stat_activity WHERE pid = %s", backend),
        what="the killed leader's transaction gone",
    )
    wait_for(
        lambda: sum(t > killed_at for t in fire_times(dsn, "every_second")) >= 2,
        what="fires after the kill",
    )
    assert survivor.stop() == 0, survivor.log()
    [(total, distinct, fires)] = query(
        dsn,
        "SELECT count(*), count(DISTINCT (metadata->>'awa.periodic', metadata->>'awa.fire_at')),"
        " (SELECT count(*) FROM awa.periodic_fires) FROM awa.jobs",
    )
    assert total == distinct == fires
    times = fire_times(dsn, "every_second")
    assert [b - a for a, b in itertools.pairwise(times) if b - a != timedelta(seconds=1)] == []


def test_pause_survives_a_restart_and_a_redeploy(
    tmp_path: Path, dsn: str, fleet: list[WorkerProcess]
) -> None:
    schedule = EVERY_SECOND
    fleet.append(WorkerProcess(tmp_path, dsn, config(tmp_path, schedule), "first"))
    wait_for(lambda: fire_times(dsn, "every_second"), what="the first fire")
    with awa.Client(dsn) as client:
        client.pause_periodic("every_second")
    assert fleet[0].stop() == 0
    before = fire_times(dsn, "every_second")
    [(updated,)] = query(dsn, "SELECT updated_at FROM awa.periodic_jobs")

    # Redeploy: the definition changes (priority), so the new worker's upsert rewrites it.
    changed = config(tmp_path, schedule + "priority = 3\n", "awa2.toml")
    fleet.append(WorkerProcess(tmp_path, dsn, changed, "second"))
    wait_for(
        lambda: query(dsn, "SELECT 1 FROM awa.periodic_jobs WHERE updated_at > %s", updated),
        what="the new definition stored",
    )
    wait_for(lambda: fleet[1].leads, what="the new worker leading")
    [(paused, definition)] = query(dsn, "SELECT paused, definition FROM awa.periodic_jobs")
    assert paused is True and definition["options"]["priority"] == 3
    time.sleep(1.5)  # the leader sweeps every 0.5 s: three sweeps that must fire nothing
    assert fire_times(dsn, "every_second") == before
    with awa.Client(dsn) as client:
        client.resume_periodic("every_second")
    wait_for(lambda: len(fire_times(dsn, "every_second")) > len(before), what="fires again")
    assert fleet[1].stop() == 0


def test_each_catch_up_policy_after_downtime(
    tmp_path: Path, dsn: str, fleet: list[WorkerProcess]
) -> None:
    # A minute of the hour far from now, so no fire time is within the grace on either side.
    minute = (datetime.now(UTC).minute + 30) % 60
    schedules = "".join(
        f'[periodic.{policy}]\ncron = "{minute} * * * *"\nkind = "tick"\ncatch_up = "{policy}"\n'
        for policy in ("latest", "all", "none")
    )
    path = config(tmp_path, schedules)
    fleet.append(WorkerProcess(tmp_path, dsn, path, "before"))
    wait_for(
        lambda: len(query(dsn, "SELECT 1 FROM awa.periodic_jobs WHERE next_fire_at > now()")) == 3,
        what="the schedules stored and their first fire times computed",
    )
    assert fleet[0].stop() == 0
    assert query(dsn, "SELECT count(*) FROM awa.jobs") == [(0,)]

    # The fleet was down for five hours and a bit: back-date instead of waiting.
    now = datetime.now(UTC)
    latest_fire = now.replace(minute=minute, second=0, microsecond=0)
    if latest_fire > now:
        latest_fire -= timedelta(hours=1)
    last = latest_fire - timedelta(hours=5)
    query(
        dsn,
        "UPDATE awa.periodic_jobs SET active_since = %s, last_fire_at = %s,"
        " next_fire_at = %s RETURNING 1",
        last - timedelta(hours=1),
        last,
        last + timedelta(hours=1),
    )
    fleet.append(WorkerProcess(tmp_path, dsn, path, "after"))
    wait_for(
        lambda: len(query(dsn, "SELECT 1 FROM awa.periodic_jobs WHERE next_fire_at > now()")) == 3,
        what="the sweep after the downtime",
    )
    assert fleet[1].stop() == 0
    missed = [last + timedelta(hours=h) for h in range(1, 6)]
    assert missed[-1] == latest_fire
    assert fire_times(dsn, "all") == missed  # each missed fire time
    assert fire_times(dsn, "latest") == [latest_fire]  # only the most recent one
    assert fire_times(dsn, "none") == []  # none of them
    rows = query(dsn, "SELECT name, last_fire_at, next_fire_at FROM awa.periodic_jobs")
    by_name = {name: (last_fire, following) for name, last_fire, following in rows}
    assert by_name["all"][0] == by_name["latest"][0] == latest_fire
    assert by_name["none"][0] == last  # nothing fired, the schedule moved on
    assert {following for _, following in by_name.values()} == {latest_fire + timedelta(hours=1)}
    for policy in ("latest", "all"):
        logged = re.findall(r"action=periodic_fired name=(\w+)", fleet[1].log())
        assert logged.count(policy) == len(fire_times(dsn, policy))
