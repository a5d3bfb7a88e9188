"""External callbacks: park, resolve, resume — from clients (architecture §3, §5 decisions 4, 5, 10)."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import threading
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass

import psycopg
import pytest

import awa_cli as awa
from tests.helpers import job_row, run_in_threads, running_worker, wait_until

pytestmark = [pytest.mark.integration]


@dataclass
class Order:
    n: int = 0
    mode: str = "park"


def callback_app(events: list[object], payloads: list[object] | None = None) -> awa.App:
    app = awa.App()

    @app.task(Order)
    async def order(job: awa.Job) -> awa.JobResult | None:
        match job.args.mode:
            case "park":
                if job.callback_result is not None:  # re-entered by resume_external
                    job.set_output({"resumed_with": job.callback_result})
                    return None
                token = await job.register_callback(timeout=600)
                return awa.WaitForCallback(token)
            case "unregistered":
                return awa.WaitForCallback(awa.CallbackToken(uuid.uuid4(), job.id, job.run_lease))
            case "sequential":
                got = []
                for _ in range(2):
                    token = await job.register_callback(timeout=600)
                    if payloads is not None:
                        payloads.append(("registered", token.id))
                    got.append(await job.wait_for_callback(token))
                job.set_output({"payloads": got})
                return None
            case "wait_once":
                token = await job.register_callback(timeout=600)
                if payloads is not None:
                    payloads.append(("registered", token.id))
                try:
                    await job.wait_for_callback(token)
                except awa.AwaError as exc:
                    if payloads is not None:
                        payloads.append(("aborted", str(exc)))
                    raise
                return None
        raise AssertionError(job.args.mode)

    app.on_event_kind("order", events.append)
    return app


async def park_one(dsn: str, args: Order | None = None) -> awa.JobRow:
    """Insert an order and wait until the running worker has parked it on a callback."""
    async with awa.AsyncClient(dsn) as client:
        job = await client.insert(args or Order())
    await wait_until(lambda: job_row(dsn, job.id).state == "waiting_external")
    return job_row(dsn, job.id)


async def parked_by_worker(
    dsn: str, events: list[object] | None = None, count: int = 1
) -> list[awa.JobRow]:
    """Run a worker of ``callback_app(events)`` until ``count`` orders are parked; stop it."""
    async with running_worker(callback_app([] if events is None else events), dsn):
        return [await park_one(dsn) for _ in range(count)]


def names(events: list[object]) -> list[str]:
    return [type(e).__name__ for e in events]


@pytest.mark.asyncio
async def test_park_fires_waiting_and_releases_the_slot(dsn: str) -> None:
    events: list[object] = []
    app = callback_app(events)
    async with running_worker(app, dsn, {"default": 1}) as worker:
        first = await park_one(dsn)
        second = await park_one(dsn)  # only runs if the slot was released
        await wait_until(lambda: names(events).count("WaitingForCallback") == 2)
    assert first.callback_id is not None and first.callback_timeout_at is not None
    assert first.callback_id.version == 4 and second.callback_id != first.callback_id
    waiting = [e for e in events if isinstance(e, awa.JobEvent.WaitingForCallback)]
    assert {e.job.callback_id for e in waiting} == {first.callback_id, second.callback_id}
    assert all(e.job.state == "waiting_external" for e in waiting)


@pytest.mark.asyncio
async def test_wait_for_callback_without_registering_fails_terminally(dsn: str) -> None:
    app = callback_app([])
    async with running_worker(app, dsn):
        async with awa.AsyncClient(dsn) as client:
            job = await client.insert(Order(mode="unregistered"))
        await wait_until(lambda: job_row(dsn, job.id).state == "failed")
    assert "without a callback registered" in job_row(dsn, job.id).errors[-1]["error"]


@pytest.mark.asyncio
async def test_complete_external_with_app_fires_completed_with_zero_duration(dsn: str) -> None:
    events: list[object] = []
    client_events: list[object] = []
    [parked] = await parked_by_worker(dsn, events)
    resolver_app = callback_app(client_events)
    async with awa.AsyncClient(dsn, app=resolver_app) as client:
        row = await client.complete_external(str(parked.callback_id), {"ok": 1})
    assert row.state == "completed" and row.callback_result == {"ok": 1}
    [completed] = [e for e in client_events if isinstance(e, awa.JobEvent.Completed)]
    assert completed.duration == 0 and completed.job.state == "completed"
    assert isinstance(completed.args, dict)


@pytest.mark.asyncio
async def test_bare_client_transitions_without_hooks(dsn: str) -> None:
    events: list[object] = []
    [parked] = await parked_by_worker(dsn, events)
    count = len(events)
    async with awa.AsyncClient(dsn) as client:
        row = await client.complete_external(parked.callback_id)
    await asyncio.sleep(0.2)
    assert row.state == "completed" and len(events) == count


@pytest.mark.asyncio
async def test_fail_external_records_the_error_verbatim(dsn: str) -> None:
    events: list[object] = []
    [parked] = await parked_by_worker(dsn, events)
    async with awa.AsyncClient(dsn, app=callback_app(events)) as client:
        row = await client.fail_external(parked.callback_id, "payment declined: card 4242")
    assert row.state == "failed"
    assert row.errors[-1]["error"] == "payment declined: card 4242" and row.errors[-1]["terminal"]
    [exhausted] = [e for e in events if isinstance(e, awa.JobEvent.Exhausted)]
    assert exhausted.error == "payment declined: card 4242" and exhausted.attempt == 1


@contextlib.asynccontextmanager
async def parked_under_a_worker(
    dsn: str, events: list[object]
) -> AsyncIterator[tuple[awa.App, awa.JobRow]]:
    """``callback_app(events)`` and one of its jobs parked by a worker that keeps running."""
    app = callback_app(events)
    async with running_worker(app, dsn):
        yield app, await park_one(dsn)


@pytest.mark.asyncio
async def test_retry_external_resets_attempts_and_runs_again(dsn: str) -> None:
    events: list[object] = []
    async with parked_under_a_worker(dsn, events) as (app, parked):
        async with awa.AsyncClient(dsn, app=app) as client:  # closing it flushes the events
            row = await client.retry_external(parked.callback_id)
        assert row.state == "available" and row.attempt == 0 and row.callback_id is None
        [retried] = [e for e in events if isinstance(e, awa.JobEvent.Retried)]
        assert retried.attempt == 1 and retried.job.state == "available"
        # it runs again and parks under a new callback id
        await wait_until(lambda: names(events).count("WaitingForCallback") == 2)
    again = job_row(dsn, parked.id)
    assert again.attempt == 1 and again.callback_id not in (None, parked.callback_id)


@pytest.mark.asyncio
async def test_resolve_callback_actions(dsn: str) -> None:
    a, b, c = await parked_by_worker(dsn, count=3)
    async with awa.AsyncClient(dsn, app=callback_app([])) as client:
        ignored = await client.resolve_callback(a.callback_id, {"x": 1})
        assert ignored.outcome == "ignored" and ignored.job.state == "waiting_external"
        assert job_row(dsn, a.id).state == "waiting_external"
        done = await client.resolve_callback(a.callback_id, {"x": 1}, default_action="complete")
        assert done.outcome == "completed" and done.job.state == "completed"
        failed = await client.resolve_callback(b.callback_id, None, default_action="fail")
        assert failed.outcome == "failed" and failed.job.state == "failed"
        with pytest.raises(awa.ValidationError):
            await client.resolve_callback(c.callback_id, None, default_action="explode")


@pytest.mark.asyncio
async def test_heartbeat_callback_extends_the_timeout(dsn: str) -> None:
    [parked] = await parked_by_worker(dsn)
    async with awa.AsyncClient(dsn) as client:
        row = await client.heartbeat_callback(parked.callback_id, timeout=7200)
    assert parked.callback_timeout_at is not None and row.callback_timeout_at is not None
    assert (row.callback_timeout_at - parked.callback_timeout_at).total_seconds() > 3000
    assert row.state == "waiting_external"


@pytest.mark.asyncio
async def test_resume_external_reenters_a_parked_job(dsn: str) -> None:
    events: list[object] = []
    async with parked_under_a_worker(dsn, events) as (app, parked):
        async with awa.AsyncClient(dsn, app=app) as client:
            resumed = await client.resume_external(parked.callback_id, {"tracking": "Z1"})
        assert resumed.state == "available"
        await wait_until(lambda: job_row(dsn, parked.id).state == "completed")
        await wait_until(lambda: "Completed" in names(events))
    row = job_row(dsn, parked.id)
    assert row.output == {"resumed_with": {"tracking": "Z1"}} and row.attempt == 1
    assert names(events).count("Started") == 2  # re-entered execution
    assert "Retried" not in names(events)


@pytest.mark.asyncio
async def test_sequential_waits_inside_one_handler(dsn: str) -> None:
    events: list[object] = []
    marks: list[object] = []
    app = callback_app(events, marks)
    async with running_worker(app, dsn) as worker:
        async with awa.AsyncClient(dsn) as client:
            job = await client.insert(Order(mode="sequential"))
            for payload in ({"step": 1}, {"step": 2}):
                await wait_until(lambda: job_row(dsn, job.id).state == "waiting_external")
                row = job_row(dsn, job.id)
                await client.resume_external(row.callback_id, payload)
                await wait_until(lambda: job_row(dsn, job.id).callback_id != row.callback_id)
        await wait_until(lambda: job_row(dsn, job.id).state == "completed")
    assert job_row(dsn, job.id).output == {"payloads": [{"step": 1}, {"step": 2}]}
    assert names(events).count("Started") == 1  # the waiting handler continued
    assert len(worker.running) == 0


@pytest.mark.asyncio
async def test_wait_for_callback_raises_when_the_job_is_cancelled(dsn: str) -> None:
    marks: list[object] = []
    app = callback_app([], marks)
    async with running_worker(app, dsn) as worker:
        async with awa.AsyncClient(dsn) as client:
            job = await client.insert(Order(mode="wait_once"))
            await wait_until(lambda: job_row(dsn, job.id).state == "waiting_external")
            await client.cancel(job.id)
        await wait_until(lambda: any(m[0] == "aborted" for m in marks))
    assert job_row(dsn, job.id).state == "cancelled"


@pytest.mark.asyncio
async def test_guards(dsn: str) -> None:
    [parked] = await parked_by_worker(dsn)
    async with awa.AsyncClient(dsn) as client:
        with pytest.raises(awa.CallbackNotFound):
            await client.complete_external(uuid.uuid4())
        with pytest.raises(awa.ValidationError) as bad:
            await client.complete_external("not-a-uuid")
        assert bad.value.field == "callback_id"
        with pytest.raises(awa.CallbackNotFound):
            await client.complete_external(parked.callback_id, run_lease=parked.run_lease + 1)
        await client.complete_external(parked.callback_id, run_lease=parked.run_lease)
        with pytest.raises(awa.CallbackNotFound):  # a second resolution
            await client.fail_external(parked.callback_id, "late")
    assert job_row(dsn, parked.id).state == "completed"


@pytest.mark.asyncio
async def test_resolution_after_rescue_is_not_found(dsn: str) -> None:
    [parked] = await parked_by_worker(dsn)
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("UPDATE awa.jobs SET callback_timeout_at = now() - interval '1 minute'")
    async with awa.AsyncClient(dsn) as client:
        rescued = await client.core.rescue(awa.RescueReason.EXPIRED_CALLBACK)
        assert [r.id for r in rescued] == [parked.id]
        with pytest.raises(awa.CallbackNotFound):
            await client.complete_external(parked.callback_id)
    row = job_row(dsn, parked.id)
    assert row.state == "retryable" and row.callback_id is None
    assert row.errors[-1]["error"] == "callback timed out"


def test_concurrent_resolutions_exactly_one_wins(dsn: str) -> None:
    [parked] = asyncio.run(parked_by_worker(dsn))
    results: list[str] = []
    barrier = threading.Barrier(8)

    def resolve(i: int) -> None:
        with awa.Client(dsn) as client:
            barrier.wait()
            try:
                if i % 2:
                    client.complete_external(parked.callback_id)
                else:
                    client.fail_external(parked.callback_id, f"from {i}")
                results.append("won")
            except awa.CallbackNotFound:
                results.append("lost")

    run_in_threads([functools.partial(resolve, i) for i in range(8)])
    assert sorted(results) == ["lost"] * 7 + ["won"]
    row = job_row(dsn, parked.id)
    assert row.state in ("completed", "failed")
    assert len([e for e in row.errors if e.get("terminal")]) == (1 if row.state == "failed" else 0)


def late_park_app(events: list[object]) -> tuple[awa.App, asyncio.Event, asyncio.Event]:
    """(app, registered, proceed): Order's handler registers a callback, sets ``registered``,
    waits for ``proceed`` and only then parks; run again after a resume, it outputs the
    callback's result. The "order" hook events go to ``events``."""
    registered = asyncio.Event()
    proceed = asyncio.Event()
    app = awa.App()

    @app.task(Order)
    async def order(job: awa.Job) -> awa.JobResult | None:
        if job.callback_result is not None:
            job.set_output(job.callback_result)
            return None
        token = await job.register_callback(timeout=600)
        registered.set()
        await proceed.wait()
        return awa.WaitForCallback(token)

    app.on_event_kind("order", events.append)
    return app, registered, proceed


@pytest.mark.asyncio
async def test_resolution_before_the_handler_parks_completes_and_the_park_is_a_no_op(
    dsn: str,
) -> None:
    events: list[object] = []
    app, registered, proceed = late_park_app(events)
    async with running_worker(app, dsn) as worker:
        async with awa.AsyncClient(dsn, app=app) as client:
            job = await client.insert(Order())
            await asyncio.wait_for(registered.wait(), 10)
            row = job_row(dsn, job.id)
            assert row.state == "running"
            await client.complete_external(row.callback_id)
        proceed.set()
        await wait_until(lambda: not worker.running)
        await asyncio.sleep(0.2)
    assert job_row(dsn, job.id).state == "completed"
    assert "WaitingForCallback" not in names(events)
    assert names(events).count("Completed") == 1


@pytest.mark.asyncio
async def test_resume_before_the_handler_parks_reenters_execution(dsn: str) -> None:
    events: list[object] = []
    app, registered, proceed = late_park_app(events)
    async with running_worker(app, dsn) as worker:
        async with awa.AsyncClient(dsn) as client:
            job = await client.insert(Order())
            await asyncio.wait_for(registered.wait(), 10)
            await client.resume_external(job_row(dsn, job.id).callback_id, {"early": True})
        proceed.set()
        await wait_until(lambda: job_row(dsn, job.id).state == "completed")
    row = job_row(dsn, job.id)
    assert row.output == {"early": True} and row.attempt == 1
    assert "WaitingForCallback" not in names(events)
