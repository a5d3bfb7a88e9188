"""Workflows (architecture §16): built in Python, validated and inserted atomically, their
state kept by the transitions of their steps, cancel and retry, the metadata of steps."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import psycopg
import pytest

import awa_cli as awa
from awa_cli.testing import AsyncAwaTestClient
from tests.helpers import job_row, running_worker, wait_until

pytestmark = [pytest.mark.integration]


@dataclass
class Extract:
    day: str = "2026-12-01"


@dataclass
class Work:
    name: str
    mode: str = "ok"


def etl_app(log: list[Any]) -> awa.App:
    app = awa.App()

    @app.task(Extract)
    async def extract(job: awa.Job) -> None:
        log.append(("extract", job.metadata.get("awa.step"), {}))
        job.set_output({"rows": 3})

    @app.task(Work)
    async def work(job: awa.Job) -> None:
        log.append((job.args.name, job.metadata.get("awa.step"), dict(job.parent_outputs)))
        if job.args.mode == "fail":
            raise awa.TerminalError("broken")
        job.set_output({"done": job.args.name})

    return app


def etl() -> awa.Workflow:
    wf = awa.Workflow("etl-2026-12-01")
    e = wf.add("extract", Extract())
    t1 = wf.add("clean", Work("clean"), after=[e])
    t2 = wf.add("enrich", Work("enrich"), after=[e], priority=1)
    wf.add("load", Work("load"), after=[t1, t2])
    return wf


@pytest.mark.asyncio
async def test_a_workflow_runs_in_dependency_order_and_completes(dsn: str) -> None:
    log: list[Any] = []
    app = etl_app(log)
    async with awa.AsyncClient(dsn, app) as client:
        run = await client.insert_workflow(etl())
        assert run.name == "etl-2026-12-01" and run.state == "running"
        assert set(run.steps) == {"extract", "clean", "enrich", "load"}
        assert run.steps["extract"].state == "available"
        assert run.steps["load"].state == "blocked"
        assert run.steps["enrich"].priority == 1
        meta = run.steps["load"].metadata
        assert meta["awa.workflow_id"] == run.id and meta["awa.step"] == "load"
        async with running_worker(app, dsn):
            await wait_until(lambda: job_row(dsn, run.steps["load"].id).state == "completed")
            await wait_until(lambda: _state(dsn, run.id) == "completed")
        got = await client.get_workflow(run.id)
    assert got.state == "completed" and got.finished_at is not None
    assert got.counts == {"completed": 4}
    names = [n for n, _, _ in log]
    assert names[0] == "extract" and names[-1] == "load"
    assert log[-1][2] == {"clean": {"done": "clean"}, "enrich": {"done": "enrich"}}


def _state(dsn: str, wf_id: int) -> str:
    with psycopg.connect(dsn) as conn:
        row = conn.execute("SELECT state FROM awa.workflows WHERE id = %s", (wf_id,)).fetchone()
    assert row is not None
    return str(row[0])


@pytest.mark.asyncio
async def test_a_failed_step_fails_the_workflow_once_nothing_can_run(dsn: str) -> None:
    app = etl_app([])
    wf = awa.Workflow("fails")
    a = wf.add("a", Work("a", "fail"))
    wf.add("b", Work("b"), after=[a])
    side = wf.add("side", Work("side"))
    wf.add("after_side", Work("x"), after=[side])
    async with awa.AsyncClient(dsn, app) as client:
        run = await client.insert_workflow(wf)
        harness = AsyncAwaTestClient(client, app)
        assert (await harness.work_one(Work)).outcome in ("failed", "completed")
        assert (await harness.work_one(Work)).outcome in ("failed", "completed")
        got = await client.get_workflow(run.id)
        assert got.state == "running"  # after_side can still run
        await harness.work_one(Work)
        got = await client.get_workflow(run.id)
        assert got.state == "failed"
        assert got.counts == {"failed": 1, "cancelled": 1, "completed": 2}
        assert got.steps["b"].errors[-1]["error"] == f"parent {run.steps['a'].id} failed"
        # retry re-runs the failed step and what its failure cancelled
        retried = await client.retry_workflow(run.id)
        assert retried.state == "running" and retried.finished_at is None
        assert retried.steps["a"].state == "available" and retried.steps["b"].state == "blocked"


@pytest.mark.asyncio
async def test_retry_workflow_reblocks_a_run_step_its_cancelled_parent_released(
    dsn: str,
) -> None:
    """Found by the state machine: a cancelled step released its "run" child; the workflow's
    retry made the parent available again but left the child available, so it ran first."""
    log: list[Any] = []
    app = etl_app(log)
    wf = awa.Workflow("release-then-retry")
    parent = wf.add("parent", Work("parent"))
    wf.add("child", Work("child"), after=[parent], on_parent_failure="run")
    async with awa.AsyncClient(dsn, app) as client:
        run = await client.insert_workflow(wf)
        await client.cancel(run.steps["parent"].id)
        got = await client.get_workflow(run.id)
        assert got.steps["child"].state == "available"  # released by the parent's cancel
        got = await client.retry_workflow(run.id)
        assert got.steps["parent"].state == "available"
        assert got.steps["child"].state == "blocked"  # waits for the parent's new attempt
        harness = AsyncAwaTestClient(client, app)
        await harness.work_one(Work)
        await harness.work_one(Work)
        assert [name for name, _, _ in log] == ["parent", "child"]
        assert (await client.get_workflow(run.id)).state == "completed"


@pytest.mark.asyncio
async def test_retry_workflow_runs_a_run_step_whose_parent_was_dead_lettered(dsn: str) -> None:
    """Its only parent is a dead letter (not retried with the workflow): nothing it waits
    for is left, so the retried step is available, not blocked for ever."""
    log: list[Any] = []
    app = etl_app(log)
    wf = awa.Workflow("dead-parent")
    parent = wf.add("parent", Work("parent", "fail"), queue="dl")
    wf.add("child", Work("child", "fail"), after=[parent], on_parent_failure="run")
    with psycopg.connect(dsn, autocommit=True) as conn:  # the queue dead-letters
        conn.execute("INSERT INTO awa.queues (name, dead_letter) VALUES ('dl', true)")
    async with awa.AsyncClient(dsn, app) as client:
        run = await client.insert_workflow(wf)
        harness = AsyncAwaTestClient(client, app)
        await harness.work_one(Work, queue="dl")  # the parent fails into the dead letters
        await harness.work_one(Work)  # the child runs for that outcome and fails too
        assert (await client.get_workflow(run.id)).state == "failed"
        got = await client.retry_workflow(run.id)
        assert got.steps["child"].state == "available"
        assert (await harness.work_one(Work)).outcome == "failed"  # ran again


@pytest.mark.asyncio
async def test_cancel_workflow_cancels_every_unfinished_step(dsn: str) -> None:
    async with awa.AsyncClient(dsn) as client:
        client.core.actor = "cli:tester"
        run = await client.insert_workflow(etl())
        got = await client.cancel_workflow(run.id)
        assert got.state == "cancelled" and got.counts == {"cancelled": 4}
        assert all(s.state == "cancelled" for s in got.steps.values())
        entries = await client.audit_log(action="workflow.cancel")
        assert [e.target for e in entries] == [f"workflow:{run.id}"]
        await client.retry_workflow(run.id)
        got = await client.get_workflow(run.id)
        assert got.state == "running" and got.steps["extract"].state == "available"
        assert got.steps["load"].state == "blocked"
        assert [e.action for e in await client.audit_log(action="workflow.retry")] == [
            "workflow.retry"
        ]
        with pytest.raises(awa.WorkflowNotFound):
            await client.get_workflow(999)
        assert [w.id for w in await client.list_workflows()] == [run.id]
        assert await client.list_workflows(state="completed") == []


@pytest.mark.parametrize(
    ("build", "message"),
    [
        (
            lambda wf: (wf.add("a", Work("a")), wf.add("a", Work("b"))),
            "step 'a': duplicate step name",
        ),
        (lambda wf: wf.add("a", Work("a"), after=["nope"]), "step 'a': unknown step 'nope'"),
        (lambda wf: wf.add("a", Work("a"), after=["a"]), "step 'a': depends on itself"),
        (lambda wf: wf.add("a", Work("a"), after=[999999]), "parent job 999999 not found"),
        (lambda wf: wf.add("a", Work("a"), bogus=1), "step 'a': bogus: unknown insert option"),
        (lambda wf: wf.add("a", Work("a"), priority=9), "step 'a': priority"),
    ],
)
@pytest.mark.asyncio
async def test_validation_names_the_step_and_writes_nothing(
    dsn: str, build: Any, message: str
) -> None:
    wf = awa.Workflow("bad")
    build(wf)
    async with awa.AsyncClient(dsn) as client:
        with pytest.raises(awa.ValidationError, match=message):
            await client.insert_workflow(wf)
        assert await client.list_jobs() == [] and await client.list_workflows() == []


@pytest.mark.asyncio
async def test_a_cycle_is_named(dsn: str) -> None:
    wf = awa.Workflow("loop")
    wf.add("a", Work("a"), after=["b"])
    wf.add("b", Work("b"), after=["a"])
    wf.add("c", Work("c"))
    async with awa.AsyncClient(dsn) as client:
        with pytest.raises(awa.ValidationError, match="cycle a -> b -> a"):
            await client.insert_workflow(wf)


def test_insert_workflow_in_the_callers_transaction(dsn: str) -> None:
    with psycopg.connect(dsn) as conn:
        run = awa.insert_workflow(conn, etl())
        conn.rollback()
    with psycopg.connect(dsn) as conn:
        assert conn.execute("SELECT count(*) FROM awa.workflows").fetchone() == (0,)
        assert conn.execute("SELECT count(*) FROM awa.jobs").fetchone() == (0,)
        run = awa.insert_workflow(conn, etl())
        conn.commit()
    with awa.Client(dsn) as client:
        assert client.get_workflow(run.id).counts == {"available": 1, "blocked": 3}
        assert client.insert_workflow(etl()).id != run.id


@pytest.mark.asyncio
async def test_steps_can_wait_for_jobs_outside_the_workflow(dsn: str) -> None:
    app = etl_app([])
    async with awa.AsyncClient(dsn, app) as client:
        outside = await client.insert(Extract())
        wf = awa.Workflow("after-outside")
        wf.add("w", Work("w"), after=[outside])
        run = await client.insert_workflow(wf)
        assert run.steps["w"].state == "blocked"
        await AsyncAwaTestClient(client, app).work_one(Extract)
        assert job_row(dsn, run.steps["w"].id).state == "available"
