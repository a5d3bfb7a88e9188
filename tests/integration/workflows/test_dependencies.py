"""Jobs that wait for other jobs (architecture §16): ``after=`` on every insert path, the
``blocked`` state, unblocking in the last parent's transaction, the failure policies,
parent outputs, retry re-blocking, retention and why_not_running."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
import pytest
import pytest_asyncio

import awa_cli as awa
from awa_cli.testing import AsyncAwaTestClient
from tests.helpers import job_row, running_worker, wait_until

pytestmark = [pytest.mark.integration]


@dataclass
class Step:
    name: str
    mode: str = "ok"


def step_app(log: list[tuple[str, Any]]) -> awa.App:
    app = awa.App()

    @app.task(Step)
    async def step(job: awa.Job) -> awa.JobResult | None:
        log.append(
            (job.args.name, dict(job.parent_outputs), [(p.id, str(p.state)) for p in job.parents])
        )
        if job.args.mode == "fail":
            raise awa.TerminalError("boom")
        if job.args.mode == "cancel":
            return awa.Cancel("no")
        job.set_output({"from": job.args.name})
        return None

    return app


def state(dsn: str, job_id: int) -> str:
    return str(job_row(dsn, job_id).state)


@pytest.fixture
def log() -> list[Any]:
    """What the step app's handler saw, a run: (name, parent outputs, [(parent id, state)])."""
    return []


@pytest.fixture
def app(log: list[Any]) -> awa.App:
    return step_app(log)


@pytest_asyncio.fixture
async def client(dsn: str, app: awa.App) -> AsyncIterator[awa.AsyncClient]:
    """An AsyncClient bound to the step app."""
    async with awa.AsyncClient(dsn, app) as client:
        yield client


@pytest.fixture
def harness(client: awa.AsyncClient, app: awa.App) -> AsyncAwaTestClient:
    """Works the step app's jobs one at a time."""
    return AsyncAwaTestClient(client, app)


async def run_child_of_a_failing_and_a_fine_parent(
    client: awa.AsyncClient,
) -> tuple[awa.JobRow, awa.JobRow, awa.JobRow]:
    """a (fails), b (completes) and c after both with on_parent_failure="run"."""
    a = await client.insert(Step("a", "fail"))
    b = await client.insert(Step("b"))
    c = await client.insert(Step("c"), after=[a, b], on_parent_failure="run")
    return a, b, c


@pytest.mark.asyncio
async def test_a_child_is_blocked_until_its_parent_completes_and_sees_its_output(
    dsn: str, client: awa.AsyncClient, harness: AsyncAwaTestClient, log: list[Any]
) -> None:
    a = await client.insert(Step("a"))
    b = await client.insert(Step("b"), after=[a.id])
    c = await client.insert(Step("c"), after=[b])  # a JobRow works too
    assert b.state == awa.JobState.BLOCKED and c.state == "blocked"
    assert await client.why_not_running(b.id) == f"blocked on parents {a.id} (available)"
    assert (await harness.work_one(Step)).outcome == "completed"  # a
    assert state(dsn, b.id) == "available" and state(dsn, c.id) == "blocked"
    assert (await harness.work_one(Step)).outcome == "completed"  # b
    assert (await harness.work_one(Step)).outcome == "completed"  # c
    assert [name for name, _, _ in log] == ["a", "b", "c"]
    assert log[1][1] == {a.id: {"from": "a"}} and log[1][2] == [(a.id, "completed")]
    assert log[2][1] == {b.id: {"from": "b"}}


def test_sync_client_and_insert_in_the_callers_transaction(dsn: str) -> None:
    with awa.Client(dsn) as client:
        a = client.insert(Step("a"))
        assert client.insert_many([Step("x"), Step("y")], after=[a]) == 2
    with psycopg.connect(dsn) as conn:
        child = awa.insert(conn, Step("c"), after=[a.id])
        conn.rollback()  # nothing written: not the child, not its edge
    with psycopg.connect(dsn) as conn:
        assert conn.execute(
            "SELECT count(*) FROM awa.jobs WHERE id = %s", (child.id,)
        ).fetchone() == (0,)
        child = awa.insert(conn, Step("c"), after=[a.id])
        conn.commit()
        assert child.state == "blocked"
        edges = conn.execute(
            "SELECT count(*) FROM awa.job_dependencies WHERE parent_id = %s", (a.id,)
        ).fetchone()
        assert edges == (3,)


@pytest.mark.asyncio
async def test_a_childs_run_at_still_applies(
    dsn: str, client: awa.AsyncClient, harness: AsyncAwaTestClient
) -> None:
    later = datetime.now(UTC) + timedelta(hours=1)
    a = await client.insert(Step("a"))
    b = await client.insert(Step("b"), after=[a], run_at=later)
    await harness.work_one(Step)
    assert state(dsn, b.id) == "scheduled"


@pytest.mark.asyncio
async def test_bad_after_is_one_validation_error_and_nothing_is_written(dsn: str) -> None:
    async with awa.AsyncClient(dsn) as client:
        a = await client.insert(Step("a"))
        with pytest.raises(awa.ValidationError, match="parent job 999999 not found"):
            await client.insert(Step("b"), after=[a.id, 999999])
        with pytest.raises(awa.ValidationError, match="on_parent_failure"):
            await client.insert(Step("b"), after=[a.id], on_parent_failure="ignore")
        with pytest.raises(awa.ValidationError, match="at most 10000"):
            await client.insert(Step("b"), after=range(1, 10_002))
        assert len(await client.list_jobs()) == 1


@pytest.mark.asyncio
async def test_a_failed_parent_cancels_the_descendants_transitively(dsn: str) -> None:
    events: list[Any] = []
    app = step_app([])
    app.on_event_kind("step", events.append)
    async with awa.AsyncClient(dsn, app) as client:
        a = await client.insert(Step("a", "fail"))
        b = await client.insert(Step("b"), after=[a])
        c = await client.insert(Step("c"), after=[b])
        d = await client.insert(Step("d"), after=[b], on_parent_failure="run")
        harness = AsyncAwaTestClient(client, app)
        assert (await harness.work_one(Step)).outcome == "failed"
        assert state(dsn, b.id) == "cancelled" and state(dsn, c.id) == "cancelled"
        assert job_row(dsn, b.id).errors[-1]["error"] == f"parent {a.id} failed"
        assert job_row(dsn, c.id).errors[-1]["error"] == f"parent {b.id} cancelled"
        assert state(dsn, d.id) == "available"  # "run": its parent b is terminal
        # retrying the failed parent re-blocks what its failure cancelled
        await client.retry(a.id)
        assert state(dsn, a.id) == "available"
        assert state(dsn, b.id) == "blocked" and state(dsn, c.id) == "blocked"
        assert state(dsn, d.id) == "blocked"  # "run": waits for b's new attempt (issue 32)
        # a child named after a parent that already failed is cancelled at insert
    await asyncio.sleep(0.1)
    cancelled = [e for e in events if isinstance(e, awa.JobEvent.Cancelled)]
    assert {e.job.id for e in cancelled} == {b.id, c.id}


@pytest.mark.asyncio
async def test_run_policy_runs_once_every_parent_is_terminal_and_sees_states(
    dsn: str, client: awa.AsyncClient, harness: AsyncAwaTestClient, log: list[Any]
) -> None:
    a, b, c = await run_child_of_a_failing_and_a_fine_parent(client)
    await harness.work_one(Step)
    assert state(dsn, c.id) == "blocked"
    await harness.work_one(Step)
    await harness.work_one(Step)
    name, outputs, parents = log[-1]
    assert name == "c" and outputs == {b.id: {"from": "b"}}
    assert parents == [(a.id, "failed"), (b.id, "completed")]


@pytest.mark.asyncio
async def test_retrying_a_parent_reblocks_a_run_policy_child_that_has_not_started(
    dsn: str, client: awa.AsyncClient, harness: AsyncAwaTestClient
) -> None:
    # issue 32: a "run" child released by its parents' old outcomes started while the
    # retried parent was available again
    a, _, c = await run_child_of_a_failing_and_a_fine_parent(client)
    await harness.work_one(Step)
    await harness.work_one(Step)
    assert state(dsn, c.id) == "available"
    await client.retry(a.id)
    assert state(dsn, a.id) == "available" and state(dsn, c.id) == "blocked"
    await harness.work_one(Step)  # only a is claimable: it fails again
    assert state(dsn, a.id) == "failed" and state(dsn, c.id) == "available"


@pytest.mark.asyncio
async def test_a_parent_that_already_failed_cancels_a_new_child(
    client: awa.AsyncClient, harness: AsyncAwaTestClient
) -> None:
    a = await client.insert(Step("a", "fail"))
    await harness.work_one(Step)
    b = await client.insert(Step("b"), after=[a])
    ok = await client.insert(Step("ok"))
    await client.cancel(ok.id)
    r = await client.insert(Step("r"), after=[a, ok], on_parent_failure="run")
    assert b.state == "cancelled" and b.errors[-1]["error"] == f"parent {a.id} failed"
    assert r.state == "available"


@pytest.mark.asyncio
async def test_retention_keeps_a_parent_while_a_descendant_is_unfinished(dsn: str) -> None:
    async with awa.AsyncClient(dsn) as client:
        a = await client.insert(Step("a"))
        b = await client.insert(Step("b"), after=[a])
        c = await client.insert(Step("c"), after=[b])
        lone = await client.insert(Step("lone"))
        with psycopg.connect(dsn, autocommit=True) as conn:  # a and b finished long ago
            conn.execute(
                "UPDATE awa.jobs SET state = 'completed', finalized_at = now() - interval '30 days'"
                " WHERE id = ANY(%s)",
                ([a.id, b.id, lone.id],),
            )
        assert await client.core.prune(60, 60) == 1  # lone only: c (below a and b) is unfinished
        await client.cancel(c.id)
        assert await client.core.prune(60, 60) == 2
        with psycopg.connect(dsn) as conn:
            # a and b went with their edges; c (cancelled just now) stays, without its edge
            assert conn.execute("SELECT count(*) FROM awa.job_dependencies").fetchone() == (0,)


@pytest.mark.asyncio
async def test_blocked_is_its_own_state_in_counts_and_no_worker_claims_it(
    dsn: str, app: awa.App, client: awa.AsyncClient, log: list[Any]
) -> None:
    a = await client.insert(Step("a"), run_at=datetime.now(UTC) + timedelta(hours=1))
    b = await client.insert(Step("b"), after=[a])
    async with running_worker(app, dsn):
        await asyncio.sleep(0.6)
    assert log == [] and state(dsn, b.id) == "blocked"
    counts = {c.state: c.count for c in await client.job_counts()}
    assert counts["blocked"] == 1 and counts["scheduled"] == 1
    assert [j.id for j in await client.list_jobs(state="blocked")] == [b.id]
    [stats] = await client.queue_stats("default")
    assert stats["counts"].get("blocked") == 1 or stats.get("blocked") == 1, stats


@pytest.mark.asyncio
async def test_the_real_worker_drains_a_chain_in_order(
    dsn: str, app: awa.App, client: awa.AsyncClient, log: list[Any]
) -> None:
    first = await client.insert(Step("0"))
    prev = first
    ids = [first.id]
    for i in range(1, 6):
        prev = await client.insert(Step(str(i)), after=[prev])
        ids.append(prev.id)
    async with running_worker(app, dsn):
        await wait_until(lambda: state(dsn, ids[-1]) == "completed")
    assert [n for n, _, _ in log] == [str(i) for i in range(6)]


@pytest.mark.asyncio
async def test_a_dead_lettered_parent_counts_as_failed_and_its_retry_reblocks(
    dsn: str, client: awa.AsyncClient, harness: AsyncAwaTestClient
) -> None:
    a = await client.insert(Step("a", "fail"), queue="dl")
    b = await client.insert(Step("b"), after=[a])
    with psycopg.connect(dsn, autocommit=True) as conn:  # the queue dead-letters
        conn.execute("INSERT INTO awa.queues (name, dead_letter) VALUES ('dl', true)")
    await harness.work_one(Step, queue="dl")
    assert state(dsn, b.id) == "cancelled"
    assert (await client.get_dlq_job(a.id)).id == a.id
    assert [(p["id"], p["state"]) for p in await client.job_parents(b.id)] == [(a.id, "failed")]
    await client.retry_from_dlq(a.id)
    assert state(dsn, b.id) == "blocked"
