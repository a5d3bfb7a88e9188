"""Worker kills: `awa worker --processes 2` runs the chaos app while one child is SIGKILLed
every few seconds (the supervisor restarts it), parked jobs are resolved by a separate
resolver process and by `awa callback complete`; at the end every job is terminal, every
trigger has exactly its follow-ups and no attempt ran twice (tests/reliability/harness.py)."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from tests.reliability.harness import (
    CliResolver,
    Fleet,
    Killer,
    Resolver,
    check_end_state,
    enqueue_triggers,
    prepare_db,
    wait_all_terminal,
)

pytestmark = [pytest.mark.integration]


def run_with_kills(dsn: str, tmp_path: Path, triggers: int, kill_every: float, timeout: float) -> None:
    prepare_db(dsn)
    enqueue_triggers(dsn, triggers)
    started = time.monotonic()
    fleet = Fleet(tmp_path, dsn, processes=2, concurrency=10)
    resolver = Resolver(tmp_path, dsn)
    killer = Killer(fleet, kill_every)
    cli = CliResolver(fleet, 0.2)
    try:
        fleet.wait_ready()
        killer.start()
        cli.start()
        wait_all_terminal(dsn, triggers, timeout, fleet, (killer, cli))
    finally:
        killer.stop()
        cli.stop()
        resolved = resolver.stop()
        try:
            code = fleet.stop()
        finally:
            fleet.kill()
    elapsed = time.monotonic() - started
    assert code == 0, fleet.log()[-3000:]
    assert not killer.failures and not cli.failures, (killer.failures, cli.failures)
    report = check_end_state(dsn, triggers)
    report.extra.update(kills=len(killer.kills), cli_resolutions=dict(cli.codes),
                        resolver=resolved, seconds=round(elapsed, 1))
    print(f"\nworker kills: {report.line()}")
    assert killer.kills, "the chaos loop never killed a worker"
    assert report.parked > 0 and report.failed_by_design > 0


@pytest.mark.parametrize("triggers,kill_every", [(600, 2.0)])
def test_worker_kills_lose_nothing_and_duplicate_nothing(dsn: str, tmp_path: Path, triggers: int,
                                                         kill_every: float) -> None:
    run_with_kills(dsn, tmp_path, triggers, kill_every, timeout=120)


@pytest.mark.slow
def test_worker_kills_soak(dsn: str, tmp_path: Path) -> None:
    run_with_kills(dsn, tmp_path, 5000, 3.0, timeout=900)
