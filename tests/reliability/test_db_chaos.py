"""PostgreSQL chaos: the server restarts mid-run, or a loop keeps terminating the workers'
connections (application_name 'awa-worker'); supervised workers resume within seconds and
the end state passes the same checks as the worker-kill runs (tests/reliability/harness.py)."""

from __future__ import annotations

import time
from pathlib import Path

import psycopg
import pytest

from tests.pgcluster import ThrowawayCluster
from awa_cli.db.migrations import migrate_dsn
from tests.reliability.harness import ChaosRun, Loop, counts, wait_all_terminal

pytestmark = [pytest.mark.integration]


def completed(dsn: str) -> int:
    while True:
        try:
            return counts(dsn).get("completed", 0)
        except psycopg.OperationalError:
            time.sleep(0.1)


def run_with_restarts(
    cluster: ThrowawayCluster, tmp_path: Path, triggers: int, restarts: int
) -> None:
    dsn = cluster.dsn_for("postgres")
    migrate_dsn(dsn)
    resumed_after: list[float] = []
    with ChaosRun(dsn, tmp_path, triggers) as run:
        for _ in range(restarts):
            target = completed(dsn) + max(50, triggers // (restarts + 2))
            deadline = time.monotonic() + 120
            while completed(dsn) < target:
                assert time.monotonic() < deadline and run.fleet.proc.poll() is None, (
                    run.fleet.log()[-3000:]
                )
                time.sleep(0.1)
            cluster.server.stop("fast")
            time.sleep(1.5)
            cluster.server.start()
            back = time.monotonic()
            before = completed(dsn)
            while completed(dsn) < before + 20:
                assert time.monotonic() - back < 60, "workers did not resume"
                time.sleep(0.05)
            resumed_after.append(round(time.monotonic() - back, 1))
        wait_all_terminal(dsn, triggers, 300, run.fleet, (run.cli,))
    assert max(resumed_after) < 10, resumed_after
    run.report("postgres restarts", restarts=restarts, resumed_after=resumed_after)


@pytest.mark.parametrize("triggers,restarts", [(400, 1)])
def test_server_restart_mid_run(
    own_server: ThrowawayCluster, tmp_path: Path, triggers: int, restarts: int
) -> None:
    run_with_restarts(own_server, tmp_path, triggers, restarts)


@pytest.mark.slow
def test_server_restarts_soak(own_server: ThrowawayCluster, tmp_path: Path) -> None:
    run_with_restarts(own_server, tmp_path, 5000, 4)


class Terminator(Loop):
    """pg_terminate_backend on every connection of the workers, every ``interval`` seconds."""

    def __init__(self, dsn: str, interval: float) -> None:
        super().__init__(interval)
        self.dsn = dsn
        self.terminated = 0

    def step(self) -> None:
        with psycopg.connect(self.dsn, autocommit=True) as admin:
            self.terminated += admin.execute(
                "SELECT count(*) FILTER (WHERE pg_terminate_backend(pid)) FROM pg_stat_activity "
                "WHERE application_name = 'awa-worker' AND datname = current_database()"
            ).fetchone()[0]


def run_with_terminations(dsn: str, tmp_path: Path, triggers: int, every: float) -> None:
    with ChaosRun(dsn, tmp_path, triggers) as run:
        terminator = run.add(Terminator(dsn, every))
        while completed(dsn) < triggers // 2:
            assert time.monotonic() - run.started < 120 and run.fleet.proc.poll() is None, (
                run.fleet.log()[-3000:]
            )
            assert not terminator.failures, terminator.failures
            time.sleep(0.1)
        terminator.stop()
        stopped = time.monotonic()
        before = completed(dsn)
        while completed(dsn) < before + 20:  # work resumes within seconds of the last kill
            assert time.monotonic() - stopped < 10, "workers did not resume"
            time.sleep(0.05)
        wait_all_terminal(dsn, triggers, 300, run.fleet, (run.cli,))
    assert terminator.terminated > 0 and not terminator.failures
    run.report("terminated connections", terminated_connections=terminator.terminated)


@pytest.mark.parametrize("triggers,every", [(400, 0.5)])
def test_terminated_connections(dsn: str, tmp_path: Path, triggers: int, every: float) -> None:
    run_with_terminations(dsn, tmp_path, triggers, every)


@pytest.mark.slow
def test_terminated_connections_soak(dsn: str, tmp_path: Path) -> None:
    run_with_terminations(dsn, tmp_path, 5000, 0.5)
