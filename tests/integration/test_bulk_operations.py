"""Bulk retry, cancel and purge (architecture §10) through the client against PostgreSQL and a real
worker: set statements in bounded batches, specs and events per job, refusal, dry runs and
the audit log."""

from __future__ import annotations

import asyncio
import itertools
from dataclasses import dataclass
from typing import Any

import pytest

import awa_cli as awa
from tests.apps.pausing import app as tick_app
from tests.helpers import (
    add_noop_tasks,
    audit_rows,
    execute,
    running_worker,
    scalar,
    states,
    wait_until,
)

pytestmark = [pytest.mark.integration]


def insert_failed(dsn: str, n: int, queue: str = "default") -> None:
    """``n`` failed tick jobs in one INSERT ... SELECT generate_series."""
    execute(
        dsn,
        "INSERT INTO awa.jobs (kind, queue, args, state, attempt, max_attempts, finalized_at)"
        " SELECT 'tick', %s, jsonb_build_object('n', g), 'failed', 1, 1, now()"
        " FROM generate_series(1, %s) AS g",
        queue,
        n,
    )


async def _retry_while_draining(dsn: str, n: int) -> None:
    insert_failed(dsn, n)
    seen: list[tuple[int, int]] = []
    visible_early: list[int] = []

    def progress(done: int, total: int) -> None:
        seen.append((done, total))
        if 0 < done < total and not visible_early:  # an earlier batch has committed
            visible_early.append(
                scalar(dsn, "SELECT count(*) FROM awa.jobs WHERE state <> 'failed'")
            )

    async with running_worker(tick_app, dsn, {"default": 50}):
        async with awa.AsyncClient(dsn) as client:
            client.core.actor = "cli:tester"
            count = await client.retry_jobs("failed", progress=progress)
        await wait_until(lambda: states(dsn) == {"completed": n}, timeout=120)
    assert count == n
    steps = [b - a for (a, _), (b, _) in itertools.pairwise(seen)]
    assert seen[0] == (0, n) and seen[-1] == (n, n)
    assert len(steps) >= n // 1000 and max(steps) <= 1000  # bounded batches of 1000
    assert visible_early and visible_early[0] >= 1000  # batches commit one by one
    assert audit_rows(dsn) == [("cli:tester", "job.retry", "state=failed", "ok", {"count": n})]


@pytest.mark.asyncio
async def test_bulk_retry_of_10k_failed_jobs_in_batches_while_a_worker_drains(dsn: str) -> None:
    await _retry_while_draining(dsn, 10_000)


@pytest.mark.slow
@pytest.mark.asyncio
async def test_bulk_retry_of_100k_failed_jobs_in_batches_while_a_worker_drains(dsn: str) -> None:
    await _retry_while_draining(dsn, 100_000)


@dataclass
class Order:
    n: int


@dataclass
class Undo:
    n: int


def order_app(cancelled: list[Any]) -> awa.App:
    app = add_noop_tasks(awa.App(), Order, Undo)

    def spec(args: Order, job: awa.JobRow, reason: str) -> Undo:
        if args.n == 13:
            raise RuntimeError("unlucky")
        return Undo(args.n)

    app.on_cancelled_enqueue(Order, Undo, spec)

    @app.on_event(Order)
    def record(event: Any) -> None:
        if isinstance(event, awa.JobEvent.Cancelled):
            cancelled.append(event)

    return app


def test_bulk_cancel_runs_specs_per_job_and_leaves_a_failing_one(dsn: str) -> None:
    cancelled: list[Any] = []
    app = order_app(cancelled)
    with awa.Client(dsn, app) as client:
        client.core.actor = "cli:tester"
        client.insert_many([Order(i) for i in range(1, 21)], queue="orders")
        client.insert(Order(100), queue="other")
        assert client.cancel_jobs(queue="orders", dry_run=True) == 20
        assert states(dsn) == {"available": 21}  # a dry run changes nothing
        with pytest.raises(awa.FollowUpError, match="19 jobs cancelled; 1 left uncancelled"):
            client.cancel_jobs(queue="orders")
        undo = sorted(r.args["n"] for r in client.list_jobs(kind="undo", limit=100))
    assert undo == [n for n in range(1, 21) if n != 13]  # each cancel with its follow-up
    assert scalar(dsn, "SELECT state::text FROM awa.jobs WHERE args->>'n' = '13'") == "available"
    assert scalar(dsn, "SELECT state::text FROM awa.jobs WHERE args->>'n' = '100'") == "available"
    assert sorted(e.job.args["n"] for e in cancelled) == sorted(undo)
    assert all(e.reason == "cancelled by operator" for e in cancelled)
    [row] = audit_rows(dsn)
    assert row[:4] == ("cli:tester", "job.cancel", "queue=orders", "failed")
    assert row[4]["count"] == 19 and len(row[4]["left"]) == 1


def test_purge_and_retry_filters_refusal_and_states(dsn: str) -> None:
    insert_failed(dsn, 5, queue="a")
    insert_failed(dsn, 3, queue="b")
    execute(dsn, "UPDATE awa.jobs SET finalized_at = now() - interval '2 days' WHERE queue = 'a'")
    with awa.Client(dsn) as client:
        client.core.actor = "cli:tester"
        with pytest.raises(awa.ValidationError, match="--all"):
            client.purge_jobs()
        with pytest.raises(awa.ValidationError, match="state"):
            client.retry_jobs("available")  # retry acts on failed and cancelled only
        assert client.purge_jobs(older_than=86400, dry_run=True) == 5
        assert client.purge_jobs(older_than=86400) == 5
        assert client.retry_jobs(queue="b", kind="tick") == 3
        assert client.purge_jobs(all=True) == 0  # nothing finished is left
    assert states(dsn) == {"available": 3}
    rows = audit_rows(dsn)
    assert [(r[1], r[3]) for r in rows] == [
        ("job.purge", "refused"),
        ("job.purge", "ok"),
        ("job.retry", "ok"),
        ("job.purge", "ok"),
    ]
    assert rows[1][2] == "older_than=86400.0" and rows[1][4] == {"count": 5}
    assert rows[2][2] == "queue=b kind=tick" and rows[3][2] == "all"


@pytest.mark.asyncio
async def test_cancel_by_unique_key(dsn: str) -> None:
    cancelled: list[Any] = []
    app = order_app(cancelled)
    async with awa.AsyncClient(dsn, app) as client:
        job = await client.insert(Order(5), unique_opts={"by_args": True})
        assert await client.cancel_by_unique_key(Order(6), unique_opts={"by_args": True}) is None
        row = await client.cancel_by_unique_key(Order(5), unique_opts={"by_args": True})
        assert row is not None and row.id == job.id and row.state == "cancelled"
        assert await client.cancel_by_unique_key(Order(5), unique_opts={"by_args": True}) is None
        again = await client.insert(Order(5), unique_opts={"by_args": True})  # the key is free
    await asyncio.sleep(0)
    assert again.id != job.id
    assert [e.job.id for e in cancelled] == [job.id]


@pytest.mark.asyncio
async def test_acting_as_records_each_task_under_its_own_actor(dsn: str) -> None:
    from awa_cli.client_ops import acting_as

    async with awa.AsyncClient(dsn) as client:
        client.core.actor = "cli:fallback"

        async def pause(queue: str, actor: str) -> None:
            with acting_as(actor):
                await client.pause_queue(queue)

        await asyncio.gather(pause("a", "serve:alice"), pause("b", "serve:bob"))
        await client.resume_queue("a")
        entries = await client.audit_log(action="queue.pause")
        resumed = await client.audit_log(target="a", action="queue.resume")
    assert sorted((e.actor, e.target) for e in entries) == [
        ("serve:alice", "a"),
        ("serve:bob", "b"),
    ]
    assert [e.actor for e in resumed] == ["cli:fallback"]
