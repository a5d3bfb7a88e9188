"""Worker kills: `awa worker --processes 2` runs the chaos app while one child is SIGKILLed
every few seconds (the supervisor restarts it), parked jobs are resolved by a separate
resolver process and by `awa callback complete`; at the end every job is terminal, every
trigger has exactly its follow-ups and no attempt ran twice (tests/reliability/harness.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.reliability.harness import ChaosRun, Killer, wait_all_terminal

pytestmark = [pytest.mark.integration]


def run_with_kills(
    dsn: str, tmp_path: Path, triggers: int, kill_every: float, timeout: float
) -> None:
    with ChaosRun(dsn, tmp_path, triggers) as run:
        killer = run.add(Killer(run.fleet, kill_every))
        wait_all_terminal(dsn, triggers, timeout, run.fleet, (killer, run.cli))
    assert not killer.failures and not run.cli.failures, (killer.failures, run.cli.failures)
    report = run.report("worker kills", kills=len(killer.kills))
    assert killer.kills, "the chaos loop never killed a worker"
    assert report.parked > 0 and report.failed_by_design > 0


@pytest.mark.parametrize("triggers,kill_every", [(600, 2.0)])
def test_worker_kills_lose_nothing_and_duplicate_nothing(
    dsn: str, tmp_path: Path, triggers: int, kill_every: float
) -> None:
    run_with_kills(dsn, tmp_path, triggers, kill_every, timeout=120)


@pytest.mark.slow
def test_worker_kills_soak(dsn: str, tmp_path: Path) -> None:
    run_with_kills(dsn, tmp_path, 5000, 3.0, timeout=900)
