"""The leader vacuums awa.jobs once it holds `[maintenance] vacuum_dead_tuples` dead row
versions (awa_cli/maintenance.py): a deep backlog's claims walk the dead entries every claim
and completion leave in the claim index until a vacuum removes them, and autovacuum looks at
most once a minute. Against a real server: `pg_stat_user_tables.vacuum_count` counts manual
vacuums only (autovacuum has its own counter), so it says whether awa vacuumed."""

from __future__ import annotations

import asyncio
import logging
import os
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import psycopg
import pytest

from awa_cli.maintenance import Maintenance
from awa_cli.worker.runtime import Timings
from tests.helpers import AwaWorker, ROOT, execute, login_role, readme_grants, scalar, wait_until
from tests.integration.test_maintenance import core_for

pytestmark = [pytest.mark.integration]

VACUUMS = "SELECT vacuum_count FROM pg_stat_user_tables WHERE relid = 'awa.jobs'::regclass"
DEAD = "SELECT n_dead_tup FROM pg_stat_user_tables WHERE relid = 'awa.jobs'::regclass"


def churn(dsn: str, rows: int = 300, updates: int = 2) -> None:
    """``rows`` jobs, each updated ``updates`` times: rows × updates dead row versions, counted
    in the statistics once the session that made them ends."""
    execute(
        dsn,
        "INSERT INTO awa.jobs (kind, args) SELECT 'noop', '{}'::jsonb FROM generate_series(1, %s)",
        rows,
    )
    for _ in range(updates):
        execute(dsn, "UPDATE awa.jobs SET priority = 3 - priority + 2")


async def dead_rows(dsn: str) -> None:
    """600 dead row versions, once the statistics count them."""
    churn(dsn)
    await wait_until(lambda: (scalar(dsn, DEAD) or 0) >= 600, timeout=30)


@asynccontextmanager
async def leading(dsn: str, **timings: float) -> AsyncIterator[Maintenance]:
    """A maintenance loop (the one a worker runs) that sweeps every 0.1 s."""
    pool, core = await core_for(dsn)
    maintenance = Maintenance(
        dsn, pool, core, Timings(leader_election_interval=0.1, rescue_interval=0.1, **timings)
    )
    stopping = asyncio.Event()
    task = asyncio.create_task(maintenance.run(stopping))
    try:
        await wait_until(lambda: maintenance.is_leader)
        yield maintenance
    finally:
        stopping.set()
        await asyncio.wait_for(task, 10)
        await pool.close()


@pytest.mark.asyncio
async def test_the_leader_vacuums_awa_jobs_past_the_threshold(
    dsn: str, caplog: pytest.LogCaptureFixture
) -> None:
    await dead_rows(dsn)
    assert scalar(dsn, VACUUMS) == 0
    with caplog.at_level(logging.INFO, logger="awa.maintenance"):
        async with leading(dsn, vacuum_dead_tuples=500) as maintenance:
            await wait_until(lambda: scalar(dsn, VACUUMS) == 1, timeout=30)
            await wait_until(lambda: maintenance._vacuums == 1)  # done, and logged
            await wait_until(lambda: (scalar(dsn, DEAD) or 0) < 600, timeout=30)
    said = [r for r in caplog.records if getattr(r, "action", None) == "vacuumed"]
    assert len(said) == 1 and said[0].levelno == logging.INFO
    assert said[0].dead_tuples >= 600 and said[0].left < 600  # type: ignore[attr-defined]


@pytest.mark.asyncio
async def test_below_the_threshold_or_at_zero_nothing_is_vacuumed(dsn: str) -> None:
    await dead_rows(dsn)
    async with leading(dsn, vacuum_dead_tuples=5_000) as maintenance:  # far above 600
        await asyncio.sleep(1.0)  # ten sweeps
        assert maintenance._vacuum_task is None
    async with leading(dsn, vacuum_dead_tuples=0) as maintenance:  # off
        await asyncio.sleep(1.0)
        assert maintenance._vacuum_task is None
    assert scalar(dsn, VACUUMS) == 0


@pytest.mark.asyncio
async def test_dead_rows_a_snapshot_keeps_are_not_vacuumed_again_and_again(dsn: str) -> None:
    """A vacuum cannot remove what an open snapshot may still see: the next one waits for
    vacuum_dead_tuples more dead rows, not for a count it cannot lower (every sweep would
    otherwise scan the table and its indexes in vain)."""
    with psycopg.connect(dsn) as holder:
        holder.execute("BEGIN ISOLATION LEVEL REPEATABLE READ")
        holder.execute("SELECT count(*) FROM awa.queues")  # the snapshot, held open
        await dead_rows(dsn)
        async with leading(dsn, vacuum_dead_tuples=500) as maintenance:
            await wait_until(lambda: scalar(dsn, VACUUMS) == 1, timeout=30)
            await wait_until(lambda: maintenance._vacuums == 1)
            assert maintenance._vacuum_floor >= 600  # all still there
            await asyncio.sleep(1.0)  # ten sweeps: no second vacuum
            assert scalar(dsn, VACUUMS) == 1
            churn(dsn, rows=300, updates=2)  # 500+ more: now it is worth another
            await wait_until(lambda: scalar(dsn, VACUUMS) == 2, timeout=30)
            await wait_until(lambda: maintenance._vacuums == 2)
            assert maintenance._vacuum_floor >= 1200
            holder.rollback()  # the snapshot ends; someone else's vacuum removes them all
            execute(dsn, "VACUUM awa.jobs")  # as autovacuum would (counted: 3)
            await wait_until(lambda: maintenance._vacuum_floor < 100)  # the floor follows
            churn(dsn, rows=300, updates=2)  # 600 above it: the leader's again
            await wait_until(lambda: scalar(dsn, VACUUMS) == 4, timeout=30)


@pytest.mark.asyncio
async def test_a_role_that_does_not_own_the_table_is_told_once_and_left_to_autovacuum(
    dsn: str, caplog: pytest.LogCaptureFixture
) -> None:
    await dead_rows(dsn)
    with login_role(dsn, "awa_worker", "pw", readme_grants()) as (_, url):
        with caplog.at_level(logging.INFO, logger="awa.maintenance"):
            async with leading(url, vacuum_dead_tuples=500):
                await asyncio.sleep(1.0)  # ten sweeps
    refused = [r for r in caplog.records if getattr(r, "action", None) == "vacuum_refused"]
    assert len(refused) == 1 and "does not own the table" in refused[0].getMessage()
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert scalar(dsn, VACUUMS) == 0


def test_awa_worker_vacuums_by_its_config(dsn: str, tmp_path: Path) -> None:
    """The real daemon: `[maintenance] vacuum_dead_tuples` reaches its leader."""
    churn(dsn)
    config = tmp_path / "awa.toml"
    config.write_text(
        '[app]\nmodules = ["tests.apps.polyglot"]\n[queues.default]\nconcurrency = 1\n'
        '[maintenance]\nrescue_interval = "1s"\nleader_election_interval = "1s"\n'
        "vacuum_dead_tuples = 500\n"
    )
    env = {**os.environ, "AWA_DATABASE_URL": dsn, "PYTHONPATH": str(ROOT), "NO_COLOR": "1"}
    env.pop("AWA_CONFIG", None)
    worker = AwaWorker(config, tmp_path / "worker.log", env)
    try:
        deadline = time.monotonic() + 60
        while "vacuumed awa.jobs: " not in worker.log():
            assert worker.proc.poll() is None, worker.log()
            assert time.monotonic() < deadline, worker.log()
            time.sleep(0.1)
        assert scalar(dsn, VACUUMS) == 1
    finally:
        worker.stop()


@pytest.mark.asyncio
async def test_a_role_that_may_not_prune_the_audit_log_is_told_once(
    dsn: str, caplog: pytest.LogCaptureFixture
) -> None:
    """Not the README's role (it has DELETE): a role without it keeps every audit entry, and
    the leader says so once, not at every sweep (every rescue_interval)."""
    grants = [*readme_grants(), "REVOKE DELETE ON awa.audit_log FROM {role}"]
    with login_role(dsn, "awa_worker", "pw", grants) as (_, url):
        with caplog.at_level(logging.WARNING, logger="awa.maintenance"):
            async with leading(url, vacuum_dead_tuples=0):
                await asyncio.sleep(1.0)  # ten sweeps
    refused = [r for r in caplog.records if getattr(r, "action", None) == "audit_prune_refused"]
    assert len(refused) == 1


@pytest.mark.asyncio
async def test_a_vacuum_already_under_way_is_not_counted_and_the_next_sweep_tries_again(
    dsn: str, caplog: pytest.LogCaptureFixture
) -> None:
    """SKIP_LOCKED returns at once while someone (autovacuum) holds the table's vacuum lock:
    that is not a vacuum, and its count is not the floor the next one waits above."""
    await dead_rows(dsn)
    with psycopg.connect(dsn) as holder:
        holder.execute("LOCK TABLE awa.jobs IN SHARE UPDATE EXCLUSIVE MODE")  # as VACUUM takes
        with caplog.at_level(logging.DEBUG, logger="awa.maintenance"):
            async with leading(dsn, vacuum_dead_tuples=500) as maintenance:
                await wait_until(
                    lambda: any(
                        getattr(r, "action", None) == "vacuum_skipped" for r in caplog.records
                    )
                )
                assert maintenance._vacuums == 0 and maintenance._vacuum_floor == 0
                holder.rollback()  # the other vacuum is over
                await wait_until(lambda: scalar(dsn, VACUUMS) == 1, timeout=30)
