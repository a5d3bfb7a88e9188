"""A child named while its parent's completion is being finalised: the real outcome core on a
real server, the two transactions interleaved on the parent's row lock.

The child's insert locks its parent and flags it ``has_dependents``; the parent's completion
waits for that lock and must then settle the child in its own transaction (it re-reads the
row it locked). Written when a one-statement finalise without a transaction was measured
(docs/performance.md, "Levers tried and reverted"): any finalise that skips the settling
transaction for rows it believes childless must still pass this."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

import psycopg
import pytest
from psycopg_pool import AsyncConnectionPool

import awa_cli as awa
from awa_cli.attempts import AttemptResult
from awa_cli.outcomes import OutcomeCore
from tests.helpers import wait_until

pytestmark = [pytest.mark.integration]


@contextlib.asynccontextmanager
async def core_for(dsn: str) -> AsyncIterator[OutcomeCore]:
    async with AsyncConnectionPool(dsn, max_size=4, kwargs={"autocommit": True}) as pool:
        yield OutcomeCore(pool)


def _states(dsn: str, *ids: int) -> list[str]:
    with psycopg.connect(dsn) as conn:
        rows = conn.execute(
            "SELECT state::text FROM awa.jobs WHERE id = ANY(%s) ORDER BY id", (list(ids),)
        ).fetchall()
    return [r[0] for r in rows]


def _finalise_waits_on_a_lock(dsn: str) -> bool:
    with psycopg.connect(dsn) as conn:
        row = conn.execute(
            "SELECT count(*) FROM pg_stat_activity "
            "WHERE wait_event_type = 'Lock' AND query LIKE '%UPDATE awa.jobs AS j SET%'"
        ).fetchone()
    return bool(row and row[0])


@pytest.mark.asyncio
async def test_a_child_named_while_its_parent_finalises_is_settled(dsn: str) -> None:
    """The child's insert holds the parent's row (flagging it has_dependents) while the
    parent's completion waits for that lock; the child commits first. The first step must
    then leave the parent to the settling transaction, or the child stays blocked forever."""
    with awa.Client(dsn) as client:
        client.insert({"n": 1}, kind="parent")
    async with core_for(dsn) as core:
        [parent] = await core.claim("default", 1)
        async with await psycopg.AsyncConnection.connect(dsn) as child_tx:
            child = await awa.insert_async(child_tx, {"n": 2}, kind="child", after=[parent.id])
            assert child.state is awa.JobState.BLOCKED  # its parent is running
            task = asyncio.create_task(core.finalize_attempts([AttemptResult(parent, "complete")]))
            await wait_until(lambda: _finalise_waits_on_a_lock(dsn), timeout=20)
            await child_tx.commit()
        [item] = await asyncio.wait_for(task, timeout=20)
    assert item.row is not None and item.row.state is awa.JobState.COMPLETED
    assert _states(dsn, parent.id, child.id) == ["completed", "available"]
