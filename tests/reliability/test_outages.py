"""Database outages longer than ``heartbeat_staleness`` (issue 27 item 1, architecture §18):
the server is stopped while real ``awa worker`` processes run jobs, and started again. The
leader judges heartbeats only after its grace (staleness + one interval) from its reconnect
and every live worker beats on its first statement after a reconnect, so every job finishes
on attempt 1 and none is rescued; a worker killed during the outage is still rescued once
the grace is over."""

from __future__ import annotations

import shutil
import tempfile
import threading
import time
from pathlib import Path

import pytest

import awa_cli as awa
from awa_cli.db.migrations import migrate_dsn
from tests.apps.outage import Steady
from tests.pgcluster import ThrowawayCluster
from tests.reliability.workers import (
    FAST,
    WorkerProcess,
    final_rows,
    running_by,
    runs,
    wait_for,
    write_config,
)

pytestmark = [pytest.mark.integration]


def outage(
    cluster: ThrowawayCluster,
    tmp_path: Path,
    *,
    workers: int,
    jobs: int,
    seconds: float,
    down: float,
    timings: dict[str, float],
) -> dict[str, float]:
    """Jobs of ``seconds`` running on ``workers`` processes; the server is down for ``down``
    seconds while they run. Returns the measured figures."""
    dsn = cluster.dsn_for("postgres")
    migrate_dsn(dsn)
    config = write_config(tmp_path, timings, concurrency=jobs // workers)
    path = tmp_path / "runs.txt"
    procs = [WorkerProcess(tmp_path, f"worker{i}", config, dsn, path) for i in range(workers)]
    try:
        with awa.Client(dsn) as client:
            client.insert_many([Steady(n=i, seconds=seconds) for i in range(jobs)])
        wait_for(lambda: len(running_by(dsn)) == jobs, 30, "every job running", *procs)
        if workers > 1:
            assert len(set(running_by(dsn).values())) == workers, "a worker ran nothing"
        cluster.server.stop("fast")
        time.sleep(down)
        cluster.server.start()
        back = time.monotonic()
        wait_for(
            lambda: all(r[1] == "completed" for r in final_rows(dsn)),
            seconds + 60,
            "every job completed",
            *procs,
        )
        rows = final_rows(dsn)
        assert [(r[1], r[2], r[3]) for r in rows] == [("completed", 1, [])] * jobs, rows
        assert set(runs(path).values()) == {1}, runs(path)
        logs = "".join(p.log() for p in procs)
        assert "action=rescued" not in logs and "finalize_stale" not in logs
        assert "action=rescue_grace" in logs  # the leader waited before judging
        return {"down": down, "completed_after_return": round(time.monotonic() - back, 1)}
    finally:
        for proc in procs:
            proc.stop()


def test_outage_longer_than_staleness_reruns_nothing(
    own_server: ThrowawayCluster, tmp_path: Path
) -> None:
    # down 5 s against a staleness of 2 s: without the grace the leader rescues every job
    outage(own_server, tmp_path, workers=1, jobs=6, seconds=12, down=5, timings=FAST)


def test_two_workers_through_an_outage(own_server: ThrowawayCluster, tmp_path: Path) -> None:
    outage(own_server, tmp_path, workers=2, jobs=8, seconds=12, down=5, timings=FAST)


@pytest.mark.slow
def test_ninety_second_outage_with_default_timings(
    own_server: ThrowawayCluster, tmp_path: Path
) -> None:
    # the contract's figure: a 90 s outage with heartbeat_interval 5 s and staleness 15 s
    timings = {"heartbeat_interval": 5.0, "heartbeat_staleness": 15.0, "rescue_interval": 5.0}
    figures = outage(
        own_server, tmp_path, workers=2, jobs=10, seconds=120, down=90, timings=timings
    )
    print("outage figures:", figures)


def test_worker_killed_during_the_outage_is_rescued_after_the_grace(
    own_server: ThrowawayCluster, tmp_path: Path
) -> None:
    cluster = own_server
    dsn = cluster.dsn_for("postgres")
    migrate_dsn(dsn)
    config = write_config(tmp_path, FAST, concurrency=4)
    path = tmp_path / "runs.txt"
    live = WorkerProcess(tmp_path, "live", config, dsn, path)
    doomed = WorkerProcess(tmp_path, "doomed", config, dsn, path)
    try:
        with awa.Client(dsn) as client:
            client.insert_many([Steady(n=i, seconds=14) for i in range(8)])
        wait_for(lambda: len(set(running_by(dsn).values())) == 2, 30, "both working", live, doomed)
        held = running_by(dsn)
        doomed_pid = str(doomed.proc.pid)
        lost = {job for job, by in held.items() if by is not None and by.endswith(":" + doomed_pid)}
        assert lost and len(lost) < len(held), held
        cluster.server.stop("fast")
        doomed.kill()  # dies while the database is away: it never beats again
        time.sleep(4)
        cluster.server.start()
        back = time.monotonic()

        def rescued() -> bool:
            rows = {r[0]: r for r in final_rows(dsn)}
            return all(rows[j][2] >= 2 or rows[j][1] == "retryable" for j in lost)

        took = wait_for(rescued, 20, "the dead worker's jobs rescued", live)
        grace = FAST["heartbeat_staleness"] + FAST["heartbeat_interval"]
        assert took >= grace - 0.5, took  # not before the grace ...
        assert took < grace + 6, took  # ... and promptly after it
        wait_for(
            lambda: all(r[1] == "completed" for r in final_rows(dsn)), 60, "all completed", live
        )
        for job_id, state, attempt, errors in final_rows(dsn):
            if job_id in lost:
                assert attempt == 2 and "heartbeat stale" in errors[0]["error"], errors
            else:  # the live worker's jobs: attempt 1, never rescued
                assert (state, attempt, errors) == ("completed", 1, []), (job_id, errors)
        print(f"dead worker's jobs rescued {took:.1f}s after the database came back")
        del back
    finally:
        live.stop()
        doomed.kill()


@pytest.mark.parametrize("processes", ["1", "2"])
def test_the_watchdog_keeps_being_pinged_through_an_outage(
    own_server: ThrowawayCluster, tmp_path: Path, processes: str
) -> None:
    """Under systemd (WatchdogSec=30 in systemd/), a worker that stopped pinging while the
    database is away would be killed and restarted, and the jobs it ran would then run
    again after a rescue. Claims failing because the database cannot be reached leave the
    worker healthy: `awa worker` (alone, and supervised) pings WATCHDOG right through an 8 s
    outage (claims wait 3 s for a pooled connection before they fail), and its jobs finish
    on attempt 1."""
    from tests.integration.worker.test_notify import NotifySocket

    dsn = own_server.dsn_for("postgres")
    migrate_dsn(dsn)
    config = write_config(tmp_path, FAST, concurrency=3)  # free slots: claims are tried
    sock_dir = Path(tempfile.mkdtemp(prefix="awa-n-", dir="/tmp"))
    server = NotifySocket(str(sock_dir / "notify.sock"))
    env = {"NOTIFY_SOCKET": server.address, "WATCHDOG_USEC": "500000"}
    path = tmp_path / "runs.txt"
    fleet = WorkerProcess(tmp_path, "fleet", config, dsn, path, ("--processes", processes), env)
    pings: list[float] = []
    listening = threading.Event()

    def receive() -> None:  # as systemd does: read every datagram as it comes
        while not listening.is_set():
            got = server.receive(0.1)
            if got is not None and "WATCHDOG" in got[1]:
                pings.append(time.monotonic())

    reader = threading.Thread(target=receive, daemon=True)
    reader.start()
    try:
        with awa.Client(dsn) as client:
            client.insert_many([Steady(n=i, seconds=12) for i in range(2)])
        wait_for(lambda: bool(pings), 60, "the first WATCHDOG", fleet)
        wait_for(lambda: len(running_by(dsn)) == 2, 30, "every job running", fleet)
        own_server.server.stop("fast")
        time.sleep(4.5)  # the claims have failed by now (they wait 3 s for a connection)
        down_since = time.monotonic()
        time.sleep(3.5)
        pinged = [t for t in pings if t > down_since]
        own_server.server.start()
        assert len(pinged) >= 3, (len(pings), fleet.log()[-3000:])
        wait_for(lambda: all(r[1] == "completed" for r in final_rows(dsn)), 60, "completed", fleet)
        assert [(r[1], r[2]) for r in final_rows(dsn)] == [("completed", 1)] * 2
        assert "claim_failed" in fleet.log()  # the claims did fail meanwhile
    finally:
        fleet.stop()
        listening.set()
        reader.join(timeout=5)
        server.close()
        shutil.rmtree(sock_dir, ignore_errors=True)
