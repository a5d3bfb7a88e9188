"""Two reads of the dependency machinery against PostgreSQL: a claim hands back the claimed
children's parents in its own statement (the worker reads them for ``job.parents`` and
``job.parent_outputs`` without a second round trip), and a parent's settling statement does
work linear in the children it settles whatever the planner's statistics say."""

from __future__ import annotations

import json
import threading
import time
from typing import Any

import psycopg
import pytest
from psycopg_pool import AsyncConnectionPool

import awa_cli as awa
from awa_cli.db import dependencies
from awa_cli.db.statements import SQL
from awa_cli.limits import ClaimPlan, Limit
from awa_cli.outcomes import OutcomeCore
from awa_cli.testing import AsyncAwaTestClient
from tests.integration.workflows.test_dependencies import Step, step_app

pytestmark = [pytest.mark.integration]


async def _parents_case(dsn: str) -> tuple[int, int]:
    """A 'run' child of a completed parent (with output), a failed one and a pruned one,
    now available; and a plain job. Their ids."""
    log: list[Any] = []
    app = step_app(log)
    async with awa.AsyncClient(dsn, app) as client:
        ok = await client.insert(Step("ok"))
        bad = await client.insert(Step("bad", mode="fail"))
        gone = await client.insert(Step("gone"))
        child = await client.insert(Step("child"), after=[ok, bad, gone], on_parent_failure="run")
        harness = AsyncAwaTestClient(client, app)
        for _ in range(3):
            await harness.work_one(Step)
        plain = await client.insert(Step("plain"))
    with psycopg.connect(dsn) as conn:
        conn.execute("DELETE FROM awa.jobs WHERE id = %s", (gone.id,))  # retention pruned it
    return child.id, plain.id


@pytest.mark.asyncio
@pytest.mark.parametrize("limited", [False, True], ids=["plain claim", "limited claim"])
async def test_a_claim_returns_its_childrens_parents_as_the_handler_reads_them(
    dsn: str, limited: bool
) -> None:
    child, plain = await _parents_case(dsn)
    async with AsyncConnectionPool(
        dsn, min_size=1, max_size=2, kwargs={"autocommit": True}
    ) as pool:
        core = OutcomeCore(pool)
        if limited:
            core.plan_claims("default", ClaimPlan((Limit("few", key="args.name", max_running=10),)))
            assert "default" in core.claim_plans
        parents: dict[int, list[Any]] = {}
        rows = await core.claim("default", 10, 0.0, parents)
        assert sorted(r.id for r in rows) == [child, plain]
        async with pool.connection() as conn:
            alone = [dict(r) for r in await dependencies.parents_of(conn, child)]
    assert list(parents) == [child]  # the plain job has none: nothing kept for it
    assert parents[child] == alone
    assert [(p["state"], p["step"], p["output"]) for p in parents[child]] == [
        ("completed", None, {"from": "ok"}),
        ("failed", None, None),
        ("deleted", None, None),
    ]


def _rows_removed_by_join_filters(plan: dict[str, Any]) -> int:
    own = int(plan.get("Rows Removed by Join Filter", 0))
    return own + sum(_rows_removed_by_join_filters(p) for p in plan.get("Plans", []))


@pytest.mark.asyncio
async def test_settling_a_wide_fan_out_is_linear_under_one_row_statistics(dsn: str) -> None:
    """After ANALYZE sees about two edges per parent, the planner estimates one row for every
    step of the settling statement; a join of two of its CTEs then became a nested loop that
    compared every child with every child (a 10,000-wide fan-out: 10^8 rows, 14 s)."""
    width = 2000
    wf = awa.Workflow("wide")
    root = wf.add("root", Step("root"))
    middle = [wf.add(f"s{i}", Step(f"s{i}"), after=[root]) for i in range(width)]
    wf.add("join", Step("join"), after=middle)
    async with awa.AsyncClient(dsn, step_app([])) as client:
        await client.insert_workflow(wf)
    with psycopg.connect(dsn) as conn:
        conn.execute("ANALYZE awa.job_dependencies")
        conn.execute("ANALYZE awa.jobs")
        root_id = conn.execute(
            "SELECT id FROM awa.jobs WHERE metadata ->> 'awa.step' = 'root'"
        ).fetchone()[0]  # type: ignore[index]
        conn.execute(
            "UPDATE awa.jobs SET state = 'completed', finalized_at = now() WHERE id = %s",
            (root_id,),
        )
        (plan,) = conn.execute(
            "EXPLAIN (ANALYZE, FORMAT JSON) " + SQL["dep_settle"],
            {"ids": [root_id], "states": ["completed"]},
        ).fetchone()  # type: ignore[misc]
        plan = plan if isinstance(plan, list) else json.loads(plan)
        made_available = conn.execute(
            "SELECT count(*) FROM awa.jobs WHERE state = 'available'"
        ).fetchone()[0]  # type: ignore[index]
        conn.rollback()
    assert made_available == width
    assert _rows_removed_by_join_filters(plan[0]["Plan"]) <= 4 * width


def test_the_last_of_two_steps_finishing_at_once_ends_the_workflow(dsn: str) -> None:
    """Two transactions each make one of a workflow's last two steps terminal. The first
    checks while the second's step is still running; the second's check waits for the
    first's lock and then looks with a snapshot taken after it: it sees both steps done and
    ends the workflow (a check without the lock, or with the snapshot of the moment it began
    to wait, would see the first step still running, and the workflow would stay running)."""
    wf = awa.Workflow("pair")
    wf.add("a", Step("a"))
    wf.add("b", Step("b"))
    with awa.Client(dsn, step_app([])) as client:
        run = client.insert_workflow(wf)
    a, b = run.steps["a"].id, run.steps["b"].id
    finish = SQL["wf_finish"]
    ended: list[Any] = []
    with psycopg.connect(dsn) as first, psycopg.connect(dsn) as second:
        first.execute("UPDATE awa.jobs SET state = 'completed' WHERE id = %s", (a,))
        assert first.execute(finish, {"ids": [run.id]}).fetchall() == []  # b still running
        second.execute("UPDATE awa.jobs SET state = 'completed' WHERE id = %s", (b,))
        waiter = threading.Thread(
            target=lambda: ended.extend(second.execute(finish, {"ids": [run.id]}).fetchall())
        )
        waiter.start()
        with psycopg.connect(dsn, autocommit=True) as probe:
            for _ in range(500):  # until the second's check waits for the first's lock
                if probe.execute(
                    "SELECT wait_event_type = 'Lock' FROM pg_stat_activity WHERE pid = %s",
                    (second.info.backend_pid,),
                ).fetchone() == (True,):
                    break
                time.sleep(0.01)
            else:
                raise AssertionError("the second check never waited for the first's lock")
        first.commit()
        waiter.join(timeout=30)
        second.commit()
    assert ended == [(run.id, "completed")]
    with psycopg.connect(dsn) as conn:
        assert conn.execute(
            "SELECT state FROM awa.workflows WHERE id = %s", (run.id,)
        ).fetchone() == ("completed",)
