"""Concurrency limits across real ``awa worker`` processes (architecture §13): every attempt of
``tests.apps.limited`` records its start and end in a side table over its own connection,
and the limits are asserted by the overlap of those intervals per key, never by timing."""

from __future__ import annotations

import contextlib
import itertools
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from datetime import datetime, timedelta, UTC
from pathlib import Path
from typing import Any

import psycopg
import pytest

import awa_cli as awa
from tests.apps.limited import MAX_OVERLAP, SIDE_TABLES
from tests.helpers import ROOT, terminated_at_exit

pytestmark = [pytest.mark.integration]

AWA = str(Path(sys.executable).parent / "awa")
APP = '[app]\nmodules = ["tests.apps.limited"]\n'
FAST_MAINTENANCE = (
    '[maintenance]\nheartbeat_interval = "0.2s"\nheartbeat_staleness = "1s"\n'
    'rescue_interval = "0.2s"\nleader_election_interval = "0.2s"\n'
)


def _limit(max_running: int, rate: str | None = None) -> str:
    text = f'[limits.per_tenant]\nkind = "tenant_work"\nkey = "args.tenant"\nmax_running = {max_running}\n'
    return text + (f'rate = "{rate}"\n' if rate else "")


@contextlib.contextmanager
def workers(
    dsn: str, tmp_path: Path, config: str, count: int, *options: str
) -> Iterator[list[subprocess.Popen[str]]]:
    """``count`` real ``awa worker [OPTIONS]`` processes on ``config``; SIGTERM (and exit 0)
    at the end."""
    path = tmp_path / f"awa-{time.monotonic_ns()}.toml"
    path.write_text(APP + config)
    env = {**os.environ, "AWA_DATABASE_URL": dsn, "PYTHONPATH": str(ROOT)}
    procs = [
        subprocess.Popen(
            [AWA, "--config", str(path), "-q", "worker", *options],
            env=env,
            cwd=ROOT,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(count)
    ]
    with terminated_at_exit(procs):
        yield procs


def _side_tables(dsn: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(SIDE_TABLES)


def _enqueue(dsn: str, tenants: list[str], **args: Any) -> list[int]:
    with awa.Client(dsn) as client:
        return [
            client.insert({"tenant": t, "n": i, **args}, kind="tenant_work").id
            for i, t in enumerate(tenants)
        ]


def _query(dsn: str, sql: str, params: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    with psycopg.connect(dsn) as conn:
        return conn.execute(sql, params).fetchall()  # type: ignore[arg-type]


def _wait(dsn: str, procs: list[subprocess.Popen[str]], sql: str, timeout: float = 90) -> None:
    deadline = time.monotonic() + timeout
    while not _query(dsn, sql)[0][0]:
        assert time.monotonic() < deadline, f"not reached: {sql}"
        dead = [p.stderr.read() if p.stderr else "" for p in procs if p.poll() is not None]
        assert not dead, dead
        time.sleep(0.1)


ALL_DONE = "SELECT count(*) = 0 FROM awa.jobs WHERE state <> 'completed'"


@pytest.mark.parametrize("processes", [2, 3])
def test_max_running_holds_across_processes(dsn: str, tmp_path: Path, processes: int) -> None:
    _side_tables(dsn)
    # 4 slots a process: more slots in all (8 or 12) than the limit lets run (2 for each of 3
    # tenants), so the limit binds across processes; and fewer in one process than it lets
    # run, so one process cannot take every job the limit allows (it would be the only one
    # to claim, and the test would prove nothing across processes).
    config = "[queues.default]\nconcurrency = 4\n" + _limit(2)
    with workers(dsn, tmp_path, config, processes) as procs:
        # Every process is up (registered in awa.workers) before the jobs arrive, so that more
        # than one of them can claim: a fast first process could drain a backlog alone.
        _wait(dsn, procs, f"SELECT count(*) >= {processes} FROM awa.workers")
        _enqueue(dsn, [f"t{i % 3}" for i in range(90)], sleep=0.05)
        _wait(dsn, procs, ALL_DONE)
    overlap = dict(_query(dsn, MAX_OVERLAP))
    assert set(overlap) == {"t0", "t1", "t2"}
    assert max(overlap.values()) <= 2, overlap  # never three of one tenant at once
    assert max(overlap.values()) == 2, overlap  # and the limit was reached: it could fail
    pids = _query(dsn, "SELECT count(DISTINCT pid) FROM awa_test.intervals")[0][0]
    assert pids >= 2  # more than one process claimed


def _big_started_before_the_last_small(dsn: str) -> int:
    """How many "big" jobs started before the last "small" one did."""
    (count,) = _query(
        dsn,
        "SELECT count(*) FROM awa_test.intervals WHERE tenant = 'big' AND started_at <"
        " (SELECT max(started_at) FROM awa_test.intervals WHERE tenant = 'small')",
    )[0]
    return int(count)


def test_a_later_key_is_not_queued_behind_a_backlog(dsn: str, tmp_path: Path) -> None:
    _side_tables(dsn)
    _enqueue(dsn, ["big"] * 500)
    _enqueue(dsn, ["small"] * 5)  # enqueued after the whole backlog
    # The limit never binds (4 slots per process): round-robin alone brings "small" forward.
    config = "[queues.default]\nconcurrency = 4\n" + _limit(100)
    with workers(dsn, tmp_path, config, 2) as procs:
        _wait(dsn, procs, "SELECT count(*) = 5 FROM awa_test.intervals WHERE tenant = 'small'")
    before = _big_started_before_the_last_small(dsn)
    assert before <= 50, before  # in claim order "small" would come after all 500


def test_a_key_enqueued_during_a_backlog_is_served_at_once(dsn: str, tmp_path: Path) -> None:
    _side_tables(dsn)
    _enqueue(dsn, ["big"] * 1000, sleep=0.05)  # 8 slots: the backlog takes seconds to drain
    config = "[queues.default]\nconcurrency = 4\n" + _limit(100)
    with workers(dsn, tmp_path, config, 2) as procs:
        _wait(dsn, procs, "SELECT count(*) >= 16 FROM awa_test.intervals")
        _enqueue(dsn, ["small"] * 3)  # while the workers claim from their ranked candidates
        _wait(dsn, procs, "SELECT count(*) = 3 FROM awa_test.intervals WHERE tenant = 'small'")
    before = _big_started_before_the_last_small(dsn)
    # The ranking is reused for at most 0.5 s: "small" waits that long, not for the backlog.
    assert before <= 500, before


def test_rate_window_across_processes(dsn: str, tmp_path: Path) -> None:
    _side_tables(dsn)
    _enqueue(dsn, ["r"] * 12)
    config = "[queues.default]\nconcurrency = 20\n" + _limit(100, rate="4/2s")
    with workers(dsn, tmp_path, config, 2) as procs:
        _wait(dsn, procs, ALL_DONE)
    starts = [r[0] for r in _query(dsn, "SELECT started_at FROM awa_test.intervals ORDER BY 1")]
    assert len(starts) == 12
    # No span of (a little less than) the window holds more than 4 starts; the handler's start
    # trails the claim's logged start by milliseconds, hence the 0.2 s of slack.
    window = timedelta(seconds=1.8)
    most = max(sum(1 for t in starts if s <= t < s + window) for s in starts)
    assert most <= 4, starts
    assert starts[-1] - starts[0] >= timedelta(seconds=3.8)  # 12 starts need three windows


def test_priority_aging_lets_old_low_priority_work_through_urgent_work(
    dsn: str, tmp_path: Path
) -> None:
    _side_tables(dsn)
    with awa.Client(dsn) as client:
        urgent = [
            client.insert({"tenant": "u", "n": i, "sleep": 0.02}, kind="tenant_work", priority=1)
            for i in range(300)
        ]
        # Waited 30 minutes at priority 4; with aging every 10 minutes it counts as 1, and it
        # is older than every urgent job.
        low = client.insert(
            {"tenant": "low"},
            kind="tenant_work",
            priority=4,
            run_at=datetime.now(UTC) - timedelta(minutes=30),
        )
    config = '[queues.default]\nconcurrency = 1\npriority_aging = "10m"\n'
    with workers(dsn, tmp_path, config, 1) as procs:
        _wait(dsn, procs, f"SELECT state = 'completed' FROM awa.jobs WHERE id = {low.id}")
    done = _query(
        dsn,
        "SELECT count(*) FROM awa.jobs WHERE state = 'completed' AND id = ANY(%s)",
        ([u.id for u in urgent],),
    )[0][0]
    assert done < 50, done  # it did not wait for the urgent stream to run dry


def test_kill_9_of_a_worker_holding_a_slot_frees_it_after_rescue(dsn: str, tmp_path: Path) -> None:
    _side_tables(dsn)
    held = _enqueue(dsn, ["k"], hold=True)[0]
    waiting = _enqueue(dsn, ["k"])[0]
    config = "[queues.default]\nconcurrency = 5\n" + _limit(1) + FAST_MAINTENANCE
    with workers(dsn, tmp_path, config, 1) as procs:
        _wait(dsn, procs, f"SELECT count(*) = 1 FROM awa_test.intervals WHERE job_id = {held}")
        procs[0].send_signal(signal.SIGKILL)
        procs[0].wait(timeout=10)
    state = dict(_query(dsn, "SELECT id, state::text FROM awa.jobs"))
    assert state == {held: "running", waiting: "available"}  # the dead worker's slot is held
    with workers(dsn, tmp_path, config.replace("max_running = 1", "max_running = 1"), 1) as procs:
        # the killed attempt's heartbeat stopped: back-date it so the rescue comes at once
        _query_commit(
            dsn,
            "UPDATE awa.jobs SET heartbeat_at = now() - interval '1 hour' WHERE id = %s",
            (held,),
        )
        _wait(dsn, procs, f"SELECT state = 'completed' FROM awa.jobs WHERE id = {waiting}")
        (held_state,) = _query(dsn, "SELECT state::text FROM awa.jobs WHERE id = %s", (held,))[0]
        assert held_state in ("retryable", "available", "running")
        _query_commit(dsn, "INSERT INTO awa_test.release VALUES (%s)", (held,))
        _wait(dsn, procs, ALL_DONE)
    # After the rescue, never two of "k" at once (the killed attempt's interval is left out).
    rows = _query(
        dsn,
        "SELECT job_id, run_lease, started_at, ended_at FROM awa_test.intervals"
        " WHERE ended_at IS NOT NULL ORDER BY started_at",
    )
    for (_, _, _, end), (_, _, start, _) in itertools.pairwise(rows):
        assert end <= start, rows


def _query_commit(dsn: str, sql: str, params: tuple[Any, ...]) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(sql, params)  # type: ignore[arg-type]
