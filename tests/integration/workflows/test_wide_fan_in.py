"""A wide fan-in counts its parents on shard rows (sql/0015_dependency_shards.sql): the
child's row is written only when a shard of its parents is done, its pending_parents is exact
when counted and then moves by whole shards, it unblocks exactly at its last parent, and a
retry counts its shards afresh. (``test_exactly_once.py`` races a 300-to-1 fan-in, wide too,
under two real workers; ``test_workflow_state_machine.py`` runs once with every child wide.)"""

from __future__ import annotations

from typing import Any

import psycopg
import pytest

import awa_cli as awa
from awa_cli.db.statements import SQL
from awa_cli.testing import AsyncAwaTestClient
from tests.helpers import job_row, scalar
from tests.integration.workflows.test_dependencies import Step, step_app

pytestmark = [pytest.mark.integration, pytest.mark.asyncio]

WIDTH = 100  # above awa.dependency_shard_min() (64): wide


def shards(dsn: str, child: int) -> dict[int, tuple[int, int]]:
    """The child's shard rows: shard -> (pending, counted)."""
    with psycopg.connect(dsn) as conn:
        rows = conn.execute(
            "SELECT shard, pending, counted FROM awa.dependency_shards WHERE child_id = %s",
            (child,),
        ).fetchall()
    return {s: (p, c) for s, p, c in rows}


def child_row(dsn: str, child: int) -> tuple[str, int, str]:
    """(state, pending_parents, xmin): xmin changes whenever the row is written."""
    with psycopg.connect(dsn) as conn:
        found = conn.execute(
            "SELECT state::text, pending_parents, xmin::text FROM awa.jobs WHERE id = %s",
            (child,),
        ).fetchone()
    assert found is not None
    return found


async def parents_and_child(
    client: awa.AsyncClient, width: int = WIDTH, **options: Any
) -> tuple[list[awa.JobRow], awa.JobRow]:
    parents = [await client.insert(Step(f"p{i}")) for i in range(width)]
    child = await client.insert(Step("join"), after=parents, **options)
    return parents, child


def shard_of(job_id: int) -> int:
    return (job_id // 16) % 16


async def test_the_child_row_moves_only_when_a_shard_is_done(dsn: str) -> None:
    log: list[Any] = []
    app = step_app(log)
    async with awa.AsyncClient(dsn, app) as client:
        parents, child = await parents_and_child(client)
        counted = shards(dsn, child.id)
        expected = {}
        for p in parents:
            expected[shard_of(p.id)] = expected.get(shard_of(p.id), 0) + 1
        assert counted == {s: (n, n) for s, n in expected.items()}
        assert child_row(dsn, child.id)[:2] == ("blocked", WIDTH)  # exact at insert
        harness = AsyncAwaTestClient(client, app)
        left = dict(expected)
        for done in range(1, WIDTH + 1):
            before = child_row(dsn, child.id)
            result = await harness.work_one(Step)
            assert result.outcome == "completed" and result.job.id == parents[done - 1].id
            shard = shard_of(result.job.id)
            left[shard] -= 1
            after = child_row(dsn, child.id)
            if left[shard]:  # the shard still waits: the child's row is not written
                assert after == before
            else:  # the shard is done: its counted parents leave the count at once
                assert after[2] != before[2]
                assert after[1] == sum(n for s, n in expected.items() if left[s])
            assert after[0] == ("blocked" if done < WIDTH else "available")
        assert shards(dsn, child.id) == {s: (0, n) for s, n in expected.items()}
        result = await harness.work_one(Step)
        assert result.job.id == child.id and result.outcome == "completed"
    name, outputs, seen = log[-1]
    assert name == "join" and len(outputs) == WIDTH and len(seen) == WIDTH


async def test_a_failed_parent_cancels_a_wide_child_and_its_retry_counts_afresh(
    dsn: str,
) -> None:
    app = step_app([])
    async with awa.AsyncClient(dsn, app) as client:
        parents = [await client.insert(Step(f"p{i}")) for i in range(WIDTH - 1)]
        bad = await client.insert(Step("bad", "fail"))
        child = await client.insert(Step("join"), after=[*parents, bad])
        harness = AsyncAwaTestClient(client, app)
        for _ in range(10):  # ten parents complete first
            assert (await harness.work_one(Step)).outcome == "completed"
        with psycopg.connect(dsn, autocommit=True) as conn:  # the failing one next
            conn.execute("UPDATE awa.jobs SET priority = 1 WHERE id = %s", (bad.id,))
        assert (await harness.work_one(Step)).job.id == bad.id
        row = job_row(dsn, child.id)
        assert row.state == "cancelled" and row.errors[-1]["error"] == f"parent {bad.id} failed"
        assert shards(dsn, child.id)  # left as they were: a retry counts afresh
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute(
                "UPDATE awa.jobs SET args = jsonb_set(args, '{mode}', '\"ok\"') WHERE id = %s",
                (bad.id,),
            )
        await client.retry(bad.id)
        # blocked again on the 89 unfinished parents and the retried one: counted exactly
        assert child_row(dsn, child.id)[:2] == ("blocked", WIDTH - 10)
        assert sum(p for p, _ in shards(dsn, child.id).values()) == WIDTH - 10
        while (result := await harness.work_one(Step)).job.id != child.id:
            assert result.outcome == "completed"
        assert result.outcome == "completed"
        assert scalar(dsn, "SELECT count(*) FROM awa.jobs WHERE state <> 'completed'") == 0


async def test_a_run_policy_wide_child_counts_failed_parents_as_done(dsn: str) -> None:
    app = step_app([])
    async with awa.AsyncClient(dsn, app) as client:
        parents = [
            await client.insert(Step(f"p{i}", "fail" if i % 10 == 0 else "ok"))
            for i in range(WIDTH)
        ]
        child = await client.insert(Step("join"), after=parents, on_parent_failure="run")
        harness = AsyncAwaTestClient(client, app)
        for i in range(WIDTH):
            await harness.work_one(Step)
            assert child_row(dsn, child.id)[0] == ("blocked" if i < WIDTH - 1 else "available")


async def test_a_narrow_child_has_no_shards(dsn: str) -> None:
    if scalar(dsn, "SELECT awa.dependency_shard_min()") <= 63:  # AWA_TEST_PG_SETTINGS
        pytest.skip("this server makes every child of 63 parents wide")
    async with awa.AsyncClient(dsn, step_app([])) as client:
        _, child = await parents_and_child(client, width=63)
        assert shards(dsn, child.id) == {}
        assert child_row(dsn, child.id)[:2] == ("blocked", 63)


async def test_retention_deletes_a_wide_childs_shards_with_it(dsn: str) -> None:
    app = step_app([])
    async with awa.AsyncClient(dsn, app) as client:
        _, child = await parents_and_child(client)
        harness = AsyncAwaTestClient(client, app)
        for _ in range(WIDTH + 1):
            await harness.work_one(Step)
        assert job_row(dsn, child.id).state == "completed" and shards(dsn, child.id)
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute("UPDATE awa.jobs SET finalized_at = now() - interval '30 days'")
        assert await client.core.prune(60, 60) == WIDTH + 1
        assert shards(dsn, child.id) == {}


async def test_the_retention_sweep_plans_without_jit(dsn: str) -> None:
    """Its estimate is far above jit_above_cost: compiling the plan cost 0.5 s a sweep."""
    explain = "EXPLAIN (FORMAT JSON) " + SQL["prune"]
    params = {"completed": 60, "failed": 60, "limit": 10}
    async with awa.AsyncClient(dsn, step_app([])) as client:
        await parents_and_child(client)
        async with client.core.pool.connection() as conn, conn.transaction():
            cur = await conn.execute("SELECT pg_jit_available()")
            if not (await cur.fetchone())[0]:  # type: ignore[index]
                pytest.skip("this server has no JIT")
            await conn.execute("SET LOCAL jit_above_cost = 0")  # as a big table's estimate is
            cur = await conn.execute(explain, params)
            assert "JIT" in (await cur.fetchone())[0][0]  # type: ignore[index]
            await conn.execute(SQL["prune_plan_settings"])
            cur = await conn.execute(explain, params)
            assert "JIT" not in (await cur.fetchone())[0][0]  # type: ignore[index]
