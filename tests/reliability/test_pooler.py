"""A real PgBouncer in transaction mode (Debian's ``pgbouncer``, tests/pgbouncer.py) in front
of the test server (issue 27 item 4, architecture §18). Workers behind it drain every job
exactly once (prepared statements are off on pooled connections: a transaction pooler hands
each statement to any server session); they say that they poll, because NOTIFY does not
cross a transaction pooler, and `awa doctor` says so with the fix, ``[database] listen_url``.
With it (a direct URL for the listener and the leader's lock) wake-ups arrive at once."""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest

import awa_cli as awa
from awa_cli.db.migrations import migrate_dsn
from tests.apps.outage import Steady
from tests.helpers import ROOT, stopped_at_exit
from tests.pgbouncer import Bouncer, start_pgbouncer
from tests.pgcluster import ThrowawayCluster
from tests.reliability.harness import env_for
from tests.reliability.workers import FAST, WorkerProcess, final_rows, runs, wait_for, write_config

pytestmark = [pytest.mark.integration]


@pytest.fixture
def bouncer(own_server: ThrowawayCluster) -> Iterator[Bouncer]:
    migrate_dsn(own_server.dsn_for("postgres"))
    pooler = start_pgbouncer(own_server, pool_mode="transaction", pool_size=8)
    with stopped_at_exit(pooler):
        yield pooler


def doctor(config: Path, dsn: str) -> tuple[int, dict[str, dict[str, str]]]:
    done = subprocess.run(
        [sys.executable, "-m", "awa_cli", "--config", str(config), "doctor", "--json"],
        env=env_for(dsn),
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    checks = {c["name"]: c for c in json.loads(done.stdout)["checks"]}
    return done.returncode, checks


def drain(tmp_path: Path, dsn: str, direct: str, jobs: int, extra: str = "") -> list[WorkerProcess]:
    config = write_config(tmp_path, FAST, concurrency=10, extra=extra)
    path = tmp_path / "runs.txt"
    procs = [WorkerProcess(tmp_path, f"worker{i}", config, dsn, path) for i in range(2)]
    with awa.Client(dsn) as client:  # the producer goes through the pooler too
        for start in range(0, jobs, 500):
            client.insert_many([Steady(n=i, seconds=0.01) for i in range(start, start + 500)])
    wait_for(lambda: all(r[1] == "completed" for r in final_rows(direct)), 120, "the drain", *procs)
    rows = final_rows(direct)
    assert len(rows) == jobs and {(r[1], r[2]) for r in rows} == {("completed", 1)}
    assert set(runs(path).values()) == {1} and len(runs(path)) == jobs  # each ran once
    return procs


def test_workers_behind_a_transaction_pooler_drain_exactly_once_and_say_they_poll(
    own_server: ThrowawayCluster, bouncer: Bouncer, tmp_path: Path
) -> None:
    direct = own_server.dsn_for("postgres")
    procs = drain(tmp_path, bouncer.dsn_for(), direct, 1000)
    try:
        wait_for(
            lambda: all("action=notify_unavailable" in p.log() for p in procs), 20, "the warning"
        )
        line = next(x for x in procs[0].log().splitlines() if "notify_unavailable" in x)
        assert "NOTIFY does not cross a transaction-mode pooler" in line and "listen_url" in line
        logs = "".join(p.log() for p in procs)
        assert "action=pooler_detected" in logs and "does not exist" not in logs
        assert "already exists" not in logs
    finally:
        for proc in procs:
            proc.stop()
    code, checks = doctor(tmp_path / "awa.toml", bouncer.dsn_for())
    assert code == 1 and checks["listen_notify"]["status"] == "fail", checks
    assert "transaction-mode pooler" in checks["listen_notify"]["detail"]
    assert "[database] listen_url" in checks["listen_notify"]["fix"]


def test_listen_url_brings_wake_ups_back_behind_the_pooler(
    own_server: ThrowawayCluster, bouncer: Bouncer, tmp_path: Path
) -> None:
    direct = own_server.dsn_for("postgres")
    extra = f'[database]\nlisten_url = "{direct}"\n'
    procs = drain(tmp_path, bouncer.dsn_for(), direct, 500, extra=extra)
    try:
        pickups = []
        with awa.Client(bouncer.dsn_for()) as client:
            for i in range(8):  # one at a time into idle workers: NOTIFY wakes them
                time.sleep(0.3)
                job = client.insert(Steady(n=10_000 + i, seconds=0.01))
                wait_for(lambda: client.get_job(job.id).state == "completed", 10, "pickup")
                row = client.get_job(job.id)
                assert row.attempted_at is not None
                pickups.append((row.attempted_at - row.created_at).total_seconds())
        print(f"pickup with listen_url: median {statistics.median(pickups) * 1000:.0f} ms")
        assert statistics.median(pickups) < 0.25, pickups  # not the 1 s poll
        logs = "".join(p.log() for p in procs)
        assert "notify_unavailable" not in logs and "became maintenance leader" in logs
    finally:
        for proc in procs:
            proc.stop()
    _, checks = doctor(tmp_path / "awa.toml", bouncer.dsn_for())
    assert checks["listen_notify"]["status"] == "ok", checks
    assert "listen_url" in checks["listen_notify"]["detail"]
    with psycopg.connect(direct) as conn:  # the leader's lock was held on the direct URL
        assert conn.execute("SELECT count(*) FROM awa.jobs").fetchone() == (508,)
