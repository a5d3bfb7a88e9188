"""The heartbeat and the finaliser lock a worker's running rows in one order, by id, so the
two statements never deadlock each other though they touch the same rows at the same time
(a loaded worker once logged ``deadlock detected`` between them; the finalise was retried).

Each test holds the lower row as the other statement would, hands the statement under test
its rows in descending order, and then takes the higher row: locked in id order, the
statement under test waits for the lower row without holding the higher one, so the holder
gets it at once; in the order given, the two would wait for each other until PostgreSQL's
deadlock check aborted one.

Two setups: one where many other rows run (the planner then follows the statement's id
list), and one where the planner walks the running rows in their physical order (a bitmap
heap scan joined by a nested loop, as it may pick under other statistics; forced here with
planner settings), with the lower row's newest version stored after the higher one's. Only
locking in id order in the statement itself (a locking CTE sorted by id) holds in both: the
fair benchmark run of 2026-12-07 logged ``deadlock detected`` between the heartbeat and the
finaliser during ``drain_deep``, whose statistics change under the drain."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import psycopg
import pytest
from psycopg_pool import AsyncConnectionPool

import awa_cli as awa
from awa_cli.attempts import AttemptResult
from awa_cli.jobs import JobRow
from awa_cli.outcomes import OutcomeCore
from tests.helpers import wait_until

pytestmark = [pytest.mark.integration]


TABLES = ("fleet", "physical_order")
# A plan that reaches running rows in physical order: a bitmap heap scan, a nested loop.
PHYSICAL_ORDER_PLAN = (
    "-c enable_indexscan=off -c enable_seqscan=off -c enable_hashjoin=off -c enable_mergejoin=off"
)


@contextlib.asynccontextmanager
async def running_pair(
    dsn: str, table: str = "fleet"
) -> AsyncIterator[tuple[OutcomeCore, JobRow, JobRow]]:
    """Two running jobs. ``fleet``: among 5,000 others running, as in a fleet (the planner
    then reaches the rows in the order the statement lists them). ``physical_order``: the
    core's sessions plan a walk of the running rows in their physical order, and the lower
    row's newest version is stored after the higher one's (a heartbeat moved it)."""
    with awa.Client(dsn) as client:
        for n in range(2):
            client.insert({"n": n}, kind="lock_order")
        client.insert_many([{"n": n} for n in range(5000)], kind="filler", queue="other")
    with psycopg.connect(dsn, autocommit=True) as conn:
        if table == "fleet":  # other workers' running jobs
            conn.execute(
                "UPDATE awa.jobs SET state = 'running', attempt = 1, run_lease = 1, "
                "attempted_at = now(), heartbeat_at = now() WHERE kind = 'filler'"
            )
        conn.execute("ANALYZE awa.jobs")
    kwargs: dict[str, Any] = {"autocommit": True}
    if table == "physical_order":
        kwargs["options"] = PHYSICAL_ORDER_PLAN
    async with AsyncConnectionPool(dsn, max_size=4, kwargs=kwargs) as pool:
        core = OutcomeCore(pool)
        low, high = sorted(await core.claim("default", 2), key=lambda r: r.id)
        if table == "physical_order":
            with psycopg.connect(dsn, autocommit=True, options=PHYSICAL_ORDER_PLAN) as conn:
                conn.execute(  # not a HOT update: the new version goes after the higher row
                    "UPDATE awa.jobs SET heartbeat_at = now() WHERE id = %s", (low.id,)
                )
                order = conn.execute(
                    "SELECT id FROM awa.jobs WHERE state = 'running' AND kind = 'lock_order'"
                ).fetchall()
            assert order == [(high.id,), (low.id,)]  # the plan under test meets high first
        yield core, low, high


def _waiting_on_a_lock(dsn: str, statement: str) -> bool:
    with psycopg.connect(dsn) as conn:
        row = conn.execute(
            "SELECT count(*) FROM pg_stat_activity "
            "WHERE wait_event_type = 'Lock' AND query LIKE %s",
            ("%" + statement + "%",),
        ).fetchone()
        return bool(row and row[0])


async def _holder_takes_high_after(
    dsn: str, low: JobRow, high: JobRow, statement: str, run: Callable[[], Awaitable[Any]]
) -> Any:
    """Hold ``low``, start ``run``, wait until it waits on a lock, take ``high``, release."""
    holder = await psycopg.AsyncConnection.connect(dsn)
    try:
        await holder.execute("SET lock_timeout = '20s'")
        await holder.execute("SELECT 1 FROM awa.jobs WHERE id = %s FOR UPDATE", (low.id,))
        task = asyncio.create_task(run())
        await wait_until(lambda: _waiting_on_a_lock(dsn, statement), timeout=20)
        await holder.execute("SELECT 1 FROM awa.jobs WHERE id = %s FOR UPDATE", (high.id,))
        await holder.commit()
        return await asyncio.wait_for(task, timeout=20)
    finally:
        await holder.close()


@pytest.mark.asyncio
@pytest.mark.parametrize("table", TABLES)
async def test_the_heartbeat_locks_rows_in_id_order(dsn: str, table: str) -> None:
    async with running_pair(dsn, table) as (core, low, high):
        beat = [(high.id, high.run_lease), (low.id, low.run_lease)]  # descending
        still_ours = await _holder_takes_high_after(
            dsn, low, high, "UPDATE awa.jobs AS j SET heartbeat_at", lambda: core.heartbeat(beat)
        )
        assert still_ours == {low.id, high.id}


@pytest.mark.asyncio
@pytest.mark.parametrize("table", TABLES)
async def test_the_finaliser_locks_rows_in_id_order(dsn: str, table: str) -> None:
    async with running_pair(dsn, table) as (core, low, high):
        results = [AttemptResult(high, "complete"), AttemptResult(low, "complete")]  # descending
        done = await _holder_takes_high_after(
            dsn, low, high, "UPDATE awa.jobs AS j SET", lambda: core.finalize_attempts(results)
        )
        assert sorted(item.job_id for item in done) == [low.id, high.id]
        with psycopg.connect(dsn) as conn:
            states = conn.execute(
                "SELECT state::text FROM awa.jobs WHERE id = ANY(%s)", ([low.id, high.id],)
            ).fetchall()
        assert states == [("completed",), ("completed",)]
