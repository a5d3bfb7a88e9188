"""Database outages longer than ``heartbeat_staleness`` (issue 27 item 1, architecture §18):
the server is stopped while real ``awa worker`` processes run jobs, and started again. The
leader judges heartbeats only after its grace (staleness + one interval) from its reconnect
and every live worker beats on its first statement after a reconnect, so every job finishes
on attempt 1 and none is rescued; a worker killed during the outage is still rescued once
the grace is over."""

from __future__ import annotations

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
