"""Handler-staged follow-ups (spec "Handler-staged follow-ups", architecture §3, §4, §5 decision 8).

Run by a real Worker or by the test harness, which claims like a worker, runs the handler
through the worker's executor and applies the result through the real outcome core.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone, UTC
from collections.abc import Awaitable, Callable
from typing import Any

import psycopg
import pytest
import pytest_asyncio

import awa_cli as awa
from awa_cli.events import RescueReason
from awa_cli.attempts import AttemptResult
from awa_cli.testing import AsyncAwaTestClient, HandlerJob
from awa_cli.worker.job import MAX_STAGED_BYTES, MAX_STAGED_FOLLOW_UPS
from tests.helpers import add_noop_tasks, job_row, running_worker, wait_until

pytestmark = [pytest.mark.integration]


@dataclass
class StageA:
    item: int
    mode: str = "ok"


@dataclass
class StageB:
    item_id: int


@dataclass
class Audit:
    of: int


@dataclass
class Plain:
    n: int


def rows_of(dsn: str, kind: str) -> list[awa.JobRow]:
    from psycopg.rows import dict_row

    with psycopg.connect(dsn) as conn, conn.cursor(row_factory=dict_row) as cur:
        cur.execute("SELECT * FROM awa.jobs WHERE kind = %s ORDER BY id", (kind,))
        return [awa.JobRow.from_record(r) for r in cur.fetchall()]


class Shared:
    """What handlers report back to the test (errors caught, late tasks, a core to call)."""

    def __init__(self) -> None:
        self.errors: list[BaseException] = []
        self.late: asyncio.Future[BaseException | None] | None = None
        self.tc: AsyncAwaTestClient | None = None


# -- the StageA handler: one small function per mode ------------------------------------------
Mode = Callable[[awa.Job, Shared], Awaitable[awa.JobResult | None]]

# Modes that stage the standard follow-up before doing what they are named for.
STAGES_THE_STANDARD_FOLLOW_UP = frozenset(
    {
        "ok",
        "retry_after",
        "snooze",
        "cancel",
        "raise",
        "terminal",
        "park",
        "rescued",
        "superseded",
        "wait_in_handler",
        "retry_then_ok",
    }
)


async def _completes(job: awa.Job, shared: Shared) -> None:
    return None


async def _retry_after(job: awa.Job, shared: Shared) -> awa.JobResult:
    return awa.RetryAfter(30)


async def _snooze(job: awa.Job, shared: Shared) -> awa.JobResult:
    return awa.Snooze(30)


async def _cancel(job: awa.Job, shared: Shared) -> awa.JobResult:
    return awa.Cancel("no longer needed")


async def _raise(job: awa.Job, shared: Shared) -> None:
    raise RuntimeError("flaky")


async def _terminal(job: awa.Job, shared: Shared) -> None:
    raise awa.TerminalError("bad item")


async def _park(job: awa.Job, shared: Shared) -> awa.JobResult:
    job.enqueue_on_completion(StageB(item_id=999))
    return awa.WaitForCallback(await job.register_callback(timeout=600))


async def _retry_then_ok(job: awa.Job, shared: Shared) -> awa.JobResult | None:
    return awa.RetryAfter(0) if job.attempt == 1 else None


async def _handle(job: awa.Job, shared: Shared) -> None:
    follow_ups = job.follow_ups()

    async def resolve(n: int) -> None:
        await asyncio.sleep(0.01)
        follow_ups.enqueue_on_completion(StageB(item_id=n))

    await asyncio.gather(resolve(1), resolve(2))


async def _same_unique(job: awa.Job, shared: Shared) -> None:
    job.enqueue_on_completion(StageB(item_id=7), unique_opts={})


async def _swallow(job: awa.Job, shared: Shared) -> None:
    try:
        job.enqueue_on_completion(StageB(item_id=1), priority=9)
    except awa.StagingError as exc:
        shared.errors.append(exc)


async def _swallow_then_raise(job: awa.Job, shared: Shared) -> None:
    try:
        job.enqueue_on_completion(StageB(item_id=1), max_attempts=0)
    except awa.StagingError:
        pass
    raise RuntimeError("something else")


async def _unswallowed(job: awa.Job, shared: Shared) -> None:
    job.enqueue_on_completion(StageB(item_id=1), queue="q" * 201)


async def _sixteen(job: awa.Job, shared: Shared) -> None:
    for n in range(MAX_STAGED_FOLLOW_UPS):
        job.enqueue_on_completion(StageB(item_id=n))


async def _seventeen(job: awa.Job, shared: Shared) -> None:
    await _sixteen(job, shared)
    try:
        job.enqueue_on_completion(StageB(item_id=16))
    except awa.StagingError as exc:
        shared.errors.append(exc)


async def _too_big(job: awa.Job, shared: Shared) -> None:
    job.enqueue_on_completion({"pad": "x" * 40_000}, kind="stage_b")
    try:
        job.enqueue_on_completion({"pad": "y" * 30_000}, kind="stage_b")
    except awa.StagingError as exc:
        shared.errors.append(exc)


async def _sealed(job: awa.Job, shared: Shared) -> None:
    loop = asyncio.get_running_loop()
    shared.late = late_result = loop.create_future()

    async def late() -> None:
        await asyncio.sleep(0.05)
        try:
            job.enqueue_on_completion(StageB(item_id=5))
        except BaseException as exc:
            late_result.set_result(exc)
        else:
            late_result.set_result(None)

    loop.create_task(late())  # spawned, never awaited


async def _rescued(job: awa.Job, shared: Shared) -> None:
    assert shared.tc is not None
    await shared.tc.core.rescue(RescueReason.STALE_HEARTBEAT, staleness=0.0)


async def _superseded(job: awa.Job, shared: Shared) -> None:
    assert shared.tc is not None
    await shared.tc.core.cancel(job.id)


async def _wait_in_handler(job: awa.Job, shared: Shared) -> None:
    token = await job.register_callback(timeout=600)
    await job.wait_for_callback(token)  # aborted: complete_external resolved the job


async def _wait_then_stage(job: awa.Job, shared: Shared) -> None:
    token = await job.register_callback(timeout=600)
    payload = await job.wait_for_callback(token)
    job.enqueue_on_completion(StageB(item_id=payload["item_id"]))


MODES: dict[str, Mode] = {
    "ok": _completes,
    "nothing": _completes,
    "retry_after": _retry_after,
    "snooze": _snooze,
    "cancel": _cancel,
    "raise": _raise,
    "terminal": _terminal,
    "park": _park,
    "retry_then_ok": _retry_then_ok,
    "handle": _handle,
    "same_unique": _same_unique,
    "swallow": _swallow,
    "swallow_then_raise": _swallow_then_raise,
    "unswallowed": _unswallowed,
    "seventeen": _seventeen,
    "sixteen": _sixteen,
    "too_big": _too_big,
    "sealed": _sealed,
    "rescued": _rescued,
    "superseded": _superseded,
    "wait_in_handler": _wait_in_handler,
    "wait_then_stage": _wait_then_stage,
}


def staging_app(shared: Shared) -> awa.App:
    app = awa.App()

    @app.task(StageA, queue="stage_a")
    async def stage_a(job: awa.Job) -> awa.JobResult | None:
        mode = job.args.mode
        if mode not in MODES:
            raise AssertionError(mode)
        if mode in STAGES_THE_STANDARD_FOLLOW_UP:
            job.enqueue_on_completion(
                StageB(item_id=job.args.item * 10 + job.attempt), unique_opts={}
            )
        return await MODES[mode](job, shared)

    add_noop_tasks(app, StageB, queue="stage_b")
    return add_noop_tasks(app, Plain)


@pytest_asyncio.fixture
async def harness(dsn: str) -> Any:
    shared = Shared()
    async with AsyncAwaTestClient(dsn, staging_app(shared)) as tc:
        shared.tc = tc
        yield tc, shared


@pytest.fixture
def tc(harness: Any) -> Any:
    """The harness's test client, for the tests that need not its Shared."""
    return harness[0]


# -- only Completed inserts them ---------------------------------------------------------


@pytest.mark.asyncio
async def test_completed_inserts_the_staged_follow_up_in_the_completion_transaction(
    tc: Any, dsn: str
) -> None:
    trigger = await tc.insert(StageA(4))
    result = await tc.work_one(StageA)
    assert result.outcome == "completed"
    [follow] = rows_of(dsn, "stage_b")
    assert result.follow_up_ids == [follow.id]
    assert (
        follow.args == {"item_id": 41} and follow.queue == "stage_b"
    )  # the kind's registered queue
    assert follow.unique_key is not None and follow.state == "available"
    with psycopg.connect(dsn) as conn:  # one transaction: the same xmin as the completion
        xmins = {
            r[0]
            for r in conn.execute(
                "SELECT xmin::text FROM awa.jobs WHERE id IN (%s, %s)", (trigger.id, follow.id)
            ).fetchall()
        }
    assert len(xmins) == 1
    assert tc.core.counters.snapshot() == {"inserted": 1, "duplicate": 0, "discarded": 0}


@pytest.mark.asyncio
@pytest.mark.parametrize(
    ("mode", "outcome"),
    [
        ("retry_after", "retryable"),
        ("snooze", "scheduled"),
        ("cancel", "cancelled"),
        ("raise", "retryable"),
        ("terminal", "failed"),
    ],
)
async def test_every_other_outcome_discards_them(
    tc: Any, dsn: str, mode: str, outcome: str
) -> None:
    await tc.insert(StageA(1, mode))
    result = await tc.work_one(StageA)
    assert result.outcome == outcome and result.follow_up_ids == []
    assert rows_of(dsn, "stage_b") == []
    assert tc.core.counters.snapshot() == {"inserted": 0, "duplicate": 0, "discarded": 0}


@pytest.mark.asyncio
async def test_wait_for_callback_discards_them_with_a_warning_and_the_discard_counter(
    tc: Any, dsn: str, caplog: pytest.LogCaptureFixture
) -> None:
    job = await tc.insert(StageA(1, "park"))
    with caplog.at_level(logging.WARNING, logger="awa.outcomes"):
        result = await tc.work_one(StageA)
    assert result.outcome == "waiting_external"
    assert rows_of(dsn, "stage_b") == []
    assert tc.core.counters.snapshot() == {"inserted": 0, "duplicate": 0, "discarded": 2}
    [record] = [
        r for r in caplog.records if getattr(r, "action", "") == "staged_follow_ups_discarded"
    ]
    assert (
        record.levelno == logging.WARNING and "2 staged follow-ups discarded" in record.getMessage()
    )
    # ... and complete_external does not bring them back
    await tc.client.complete_external(result.job.callback_id)
    assert (await tc.get_job(job.id)).state == "completed"
    assert rows_of(dsn, "stage_b") == []


async def waiting_in_handler(tc: Any, dsn: str, mode: str) -> tuple[awa.JobRow, Any]:
    """Insert a StageA in ``mode`` and work it in a task until its handler waits on a
    callback: (the job, the task)."""
    job = await tc.insert(StageA(1, mode))
    work = asyncio.create_task(tc.work_one(StageA))
    await wait_until(lambda: job_row(dsn, job.id).state == "waiting_external")
    return job, work


@pytest.mark.asyncio
async def test_complete_external_discards_what_a_waiting_handler_staged(tc: Any, dsn: str) -> None:
    job, work = await waiting_in_handler(tc, dsn, "wait_in_handler")
    callback_id = job_row(dsn, job.id).callback_id
    await tc.client.complete_external(callback_id)
    tc.services.wake_waiter(str(job.id))  # what the worker's LISTEN would do
    result = await asyncio.wait_for(work, 10)
    assert result.outcome == "completed" and result.follow_up_ids == []
    assert rows_of(dsn, "stage_b") == []
    assert tc.core.counters.snapshot()["inserted"] == 0


@pytest.mark.asyncio
async def test_stage_after_wait_for_callback_builds_the_follow_up_from_the_payload(
    tc: Any, dsn: str
) -> None:
    job, work = await waiting_in_handler(tc, dsn, "wait_then_stage")
    await tc.resume_external(
        job_row(dsn, job.id).callback_id, {"item_id": 77}
    )  # wakes the waiting handler
    result = await asyncio.wait_for(work, 10)
    assert result.outcome == "completed"
    assert [r.args for r in rows_of(dsn, "stage_b")] == [{"item_id": 77}]


@pytest.mark.asyncio
@pytest.mark.parametrize(("mode", "state"), [("rescued", "retryable"), ("superseded", "cancelled")])
async def test_a_rescued_or_superseded_attempt_discards_them(
    tc: Any, dsn: str, mode: str, state: str
) -> None:
    job = await tc.insert(StageA(1, mode))
    result = await tc.work_one(StageA)
    assert result.outcome == state and result.follow_up_ids == []
    assert result.events == []  # a stale finalisation emits nothing
    assert rows_of(dsn, "stage_b") == []
    assert (await tc.get_job(job.id)).output is None
    assert tc.core.counters.snapshot() == {"inserted": 0, "duplicate": 0, "discarded": 0}


@pytest.mark.asyncio
async def test_a_retried_attempt_starts_with_nothing_staged(tc: Any, dsn: str) -> None:
    await tc.insert(StageA(3, "retry_then_ok"))
    first = await tc.work_one(StageA)
    assert first.outcome == "retryable" and rows_of(dsn, "stage_b") == []
    second = await tc.work_one(StageA)
    assert second.outcome == "completed" and second.job.attempt == 2
    # only what the second attempt staged (item 3 * 10 + attempt 2), nothing left from the first
    assert [r.args for r in rows_of(dsn, "stage_b")] == [{"item_id": 32}]


@pytest.mark.asyncio
async def test_the_follow_ups_handle_stages_from_awaited_tasks(tc: Any, dsn: str) -> None:
    await tc.insert(StageA(1, "handle"))
    result = await tc.work_one(StageA)
    assert result.outcome == "completed"
    assert sorted(r.args["item_id"] for r in rows_of(dsn, "stage_b")) == [1, 2]
    assert len(result.follow_up_ids) == 2


# -- a failed stage fails the attempt ----------------------------------------------------


async def work_caught(harness: Any, item: int, mode: str) -> tuple[Any, awa.StagingError]:
    """Insert StageA(item, mode) and work it: (the result, the one StagingError its handler
    caught)."""
    tc, shared = harness
    await tc.insert(StageA(item, mode))
    result = await tc.work_one(StageA)
    [caught] = shared.errors
    assert isinstance(caught, awa.StagingError)
    return result, caught


@pytest.mark.asyncio
async def test_a_swallowed_staging_error_still_fails_the_attempt_terminally(
    harness: Any, dsn: str
) -> None:
    result, caught = await work_caught(harness, 1, "swallow")
    assert isinstance(caught, awa.TerminalError)
    assert "priority" in str(caught)
    assert result.outcome == "failed" and result.job.attempt == 1 and result.job.max_attempts == 25
    entry = result.job.errors[-1]
    assert entry["terminal"] is True and entry["error"].startswith("StagingError:")
    assert rows_of(dsn, "stage_b") == []
    assert isinstance(result.events[0], awa.JobEvent.Exhausted)


@pytest.mark.asyncio
@pytest.mark.parametrize("mode", ["unswallowed", "swallow_then_raise"])
async def test_a_failed_stage_fails_terminally_whatever_the_handler_does_next(
    tc: Any, mode: str
) -> None:
    await tc.insert(StageA(1, mode))
    result = await tc.work_one(StageA)
    assert result.outcome == "failed"
    assert (
        result.job.errors[-1]["error"].startswith("StagingError:")
        and result.job.errors[-1]["terminal"]
    )


@pytest.mark.asyncio
async def test_staging_after_the_handler_returned_is_sealed(harness: Any, dsn: str) -> None:
    tc, shared = harness
    await tc.insert(StageA(1, "sealed"))
    result = await tc.work_one(StageA)
    late = await asyncio.wait_for(shared.late, 5)
    assert isinstance(late, awa.StagingError) and "sealed" in str(late)
    assert result.outcome == "completed" and rows_of(dsn, "stage_b") == []


@pytest.mark.asyncio
async def test_the_seventeenth_stage_is_rejected_and_fails_the_attempt(
    harness: Any, dsn: str
) -> None:
    tc, _ = harness
    await tc.insert(StageA(1, "sixteen"))
    assert (await tc.work_one(StageA)).outcome == "completed"
    assert len(rows_of(dsn, "stage_b")) == MAX_STAGED_FOLLOW_UPS == 16
    result, caught = await work_caught(harness, 2, "seventeen")
    assert "16" in str(caught)
    assert (
        result.outcome == "failed" and len(rows_of(dsn, "stage_b")) == 16
    )  # none of the second job's


@pytest.mark.asyncio
async def test_the_64_kib_limit_fails_the_attempt(harness: Any, dsn: str) -> None:
    result, caught = await work_caught(harness, 1, "too_big")
    assert str(MAX_STAGED_BYTES) in str(caught)
    assert result.outcome == "failed" and rows_of(dsn, "stage_b") == []


# -- eager validation: the same rules as an insert (HandlerJob runs the worker's staging) --

UTC_PLUS_1 = timezone(timedelta(hours=1))
UTC_MINUS_5 = timezone(timedelta(hours=-5))


class NotSerialisable:
    pass


@pytest.mark.parametrize(
    ("args", "options", "field"),
    [
        (StageB(1), {"priority": 0}, "priority"),
        (StageB(1), {"priority": 5}, "priority"),
        (StageB(1), {"max_attempts": 0}, "max_attempts"),
        (StageB(1), {"max_attempts": 1001}, "max_attempts"),
        (StageB(1), {"kind": "k" * 201}, "kind"),
        (StageB(1), {"queue": "q" * 201}, "queue"),
        (StageB(1), {"tags": [f"t{i}" for i in range(21)]}, "tags"),
        ({"x": "a\x00b"}, {"kind": "stage_b"}, "args"),
        ({"a\x00": 1}, {"kind": "stage_b"}, "args"),
        (StageB(1), {"kind": "stage\x00b"}, "kind"),
        (StageB(1), {"queue": "q\x00"}, "queue"),
        (StageB(1), {"tags": ["ok", "n\x00"]}, "tags"),
        (StageB(1), {"metadata": {"k": "v\x00"}}, "metadata"),
        (StageB(1), {"run_at": datetime(1, 1, 1, tzinfo=UTC_PLUS_1)}, "run_at"),
        (StageB(1), {"run_at": datetime(9999, 12, 31, 23, tzinfo=UTC_MINUS_5)}, "run_at"),
        (StageB(NotSerialisable()), {}, "args"),  # type: ignore[arg-type]
        (42, {"kind": "stage_b"}, "args"),
        (StageB(1), {"colour": "red"}, "colour"),
        (StageB(1), {"unique_opts": "yes"}, "unique_opts"),
        (StageB(1), {"unique_opts": {"by_kind": True}}, "unique_opts"),
        (StageB(1), {"deadline_duration": "soon"}, "deadline_duration"),
        (StageB(1), {"metadata": {"k": NotSerialisable()}}, "metadata"),
        (StageB(1), {"run_at": "tomorrow"}, "run_at"),
    ],
)
def test_staging_validates_eagerly_and_raises_staging_error(
    args: Any, options: dict[str, Any], field: str
) -> None:
    job = HandlerJob(StageA(1))
    with pytest.raises(awa.StagingError) as caught:
        job.enqueue_on_completion(args, **options)
    assert isinstance(caught.value, awa.TerminalError)
    assert field in str(caught.value)
    assert job.staged == [] and job.staging_error is caught.value
    with pytest.raises(awa.StagingError):  # the handle runs the same checks
        HandlerJob(StageA(1)).follow_ups().enqueue_on_completion(args, **options)


def test_the_same_values_are_accepted_at_the_edges() -> None:
    job = HandlerJob(StageA(1))
    job.enqueue_on_completion(
        StageB(1),
        priority=1,
        max_attempts=1000,
        kind="k" * 200,
        queue="q" * 200,
        tags=[f"t{i}" for i in range(20)],
        run_at=datetime(9999, 12, 31, tzinfo=UTC),
    )
    job.enqueue_on_completion(
        StageB(2), priority=4, max_attempts=1, run_at=datetime(1, 1, 1, 2, tzinfo=UTC_PLUS_1)
    )
    assert len(job.staged) == 2 and job.staging_error is None


def _pad_args(n: int) -> dict[str, str]:
    return {"pad": "x" * n}


# '{"pad":"' + n + '"}' is n + 10 bytes; kind "pad" 3, queue "q" 1, metadata "{}" 2.
EXACT = MAX_STAGED_BYTES - 16


@pytest.mark.parametrize(
    ("extra", "ok"),
    [
        ({}, True),
        ({"ordering_key": "k"}, False),
        ({"tags": ["t"]}, False),
        ({"metadata": {"a": 1}}, False),
        ({"queue": "qq"}, False),
        ({"kind": "padd"}, False),
    ],
)
def test_the_byte_limit_counts_kind_queue_args_metadata_tags_and_ordering_key(
    extra: dict[str, Any], ok: bool
) -> None:
    job = HandlerJob(StageA(1))
    options = {"kind": "pad", "queue": "q", **extra}
    if ok:
        job.enqueue_on_completion(_pad_args(EXACT), **options)  # exactly 64 KiB
        assert job.staged[0].prepared.serialized_size() == MAX_STAGED_BYTES
    else:
        with pytest.raises(awa.StagingError, match="bytes"):
            job.enqueue_on_completion(_pad_args(EXACT), **options)


def test_the_byte_limit_is_per_attempt_across_stages() -> None:
    job = HandlerJob(StageA(1))
    job.enqueue_on_completion(_pad_args(EXACT // 2), kind="pad", queue="q")
    with pytest.raises(awa.StagingError, match="bytes"):
        job.enqueue_on_completion(_pad_args(EXACT // 2 + 100), kind="pad", queue="q")
    assert len(job.staged) == 1


# -- deduplication, counters, ordering and the transaction path ---------------------------


@pytest.mark.asyncio
async def test_registered_specs_insert_first_then_staged_with_the_same_dedup(dsn: str) -> None:
    shared = Shared()
    app = staging_app(shared)

    @app.on_completed_enqueue(StageA, Audit)
    def audit(args: StageA, job: awa.JobRow) -> Audit:
        return Audit(of=job.id)

    async with AsyncAwaTestClient(dsn, app) as tc:
        await tc.insert(StageA(1, "handle"))
        result = await tc.work_one(StageA)
        [audit_row] = rows_of(dsn, "audit")
        staged_ids = [r.id for r in rows_of(dsn, "stage_b")]
        assert result.follow_up_ids[0] == audit_row.id
        assert result.follow_up_ids[1:] == staged_ids and audit_row.id < min(staged_ids)
        # the staged counters count only staged follow-ups, not the spec's
        assert tc.core.counters.snapshot() == {"inserted": 2, "duplicate": 0, "discarded": 0}


@pytest.mark.asyncio
async def test_a_spec_that_raises_rolls_back_and_counts_nothing(dsn: str) -> None:
    app = staging_app(Shared())

    @app.on_completed_enqueue(StageA, Audit)
    def broken(args: StageA, job: awa.JobRow) -> Audit:
        raise RuntimeError("spec bug")

    async with AsyncAwaTestClient(dsn, app) as tc:
        job = await tc.insert(StageA(1))
        with pytest.raises(awa.AwaError, match="spec bug"):
            await tc.work_one(StageA)
        assert (await tc.get_job(job.id)).state == "running"  # left for rescue, as in a worker
        assert rows_of(dsn, "stage_b") == [] and rows_of(dsn, "audit") == []
        assert tc.core.counters.snapshot() == {"inserted": 0, "duplicate": 0, "discarded": 0}


class CallSpy:
    def __init__(self, fn: Any) -> None:
        self.fn = fn
        self.calls: list[list[int]] = []

    async def __call__(self, arg: Any) -> Any:
        results = list(arg) if isinstance(arg, (list, tuple)) else [arg]
        self.calls.append([r.job.id for r in results if isinstance(r, AttemptResult)])
        return await self.fn(arg)


@pytest.mark.asyncio
async def test_worker_counters_dedup_and_only_stagers_take_the_follow_up_transaction(
    dsn: str,
) -> None:
    app = staging_app(Shared())
    async with running_worker(app, dsn, {"default": 10, "stage_a": 10}) as worker:
        # spies on the real calls, in place before any job exists
        batch = worker.core.finalize_batch = CallSpy(worker.core.finalize_batch)  # type: ignore[method-assign]
        own = worker.core.finalize_with_follow_ups = CallSpy(  # type: ignore[method-assign]
            worker.core.finalize_with_follow_ups
        )
        async with awa.AsyncClient(dsn) as client:
            plain = [(await client.insert(Plain(n))).id for n in range(4)]
            stagers = [
                (await client.insert(StageA(n, "same_unique"), queue="stage_a")).id
                for n in range(2)
            ]
            nothing = (await client.insert(StageA(9, "nothing"), queue="stage_a")).id
        await wait_until(
            lambda: all(job_row(dsn, i).state == "completed" for i in [*plain, *stagers, nothing])
        )
        await wait_until(lambda: worker.finalizer.in_flight == 0)
        snapshot = worker.core.counters.snapshot()
    assert snapshot == {"inserted": 1, "duplicate": 1, "discarded": 0}
    assert len(rows_of(dsn, "stage_b")) == 1
    batched = {i for call in batch.calls for i in call}
    single = [i for call in own.calls for i in call]
    assert set(plain) | {nothing} <= batched and not batched & set(stagers)
    assert sorted(single) == sorted(stagers)


@pytest.mark.asyncio
async def test_worker_discard_counter_on_wait_for_callback(dsn: str) -> None:
    app = staging_app(Shared())
    async with awa.AsyncClient(dsn) as client:
        job = await client.insert(StageA(1, "park"), queue="stage_a")
    async with running_worker(app, dsn, {"stage_a": 2}) as worker:
        await wait_until(lambda: job_row(dsn, job.id).state == "waiting_external")
        await wait_until(lambda: worker.finalizer.in_flight == 0)
        assert worker.core.counters.snapshot() == {"inserted": 0, "duplicate": 0, "discarded": 2}
    assert rows_of(dsn, "stage_b") == []


@pytest.mark.asyncio
async def test_a_worker_that_does_not_know_the_follow_up_kind_fails_it_terminally(
    tc: Any,
) -> None:
    await tc.insert({"x": 1}, kind="deployed_later")
    result = await tc.work_one("deployed_later")
    assert result.outcome == "failed"
    entry = result.job.errors[-1]
    assert entry["error"] == "unknown job kind: deployed_later" and entry["terminal"] is True


class StagedMetrics:
    """A metrics plugin reading the worker's staged counters (as a Prometheus exporter would)."""

    def __init__(self) -> None:
        self.worker: Any = None
        self.on_completed: list[dict[str, int]] = []
        self.final: dict[str, int] | None = None

    @awa.hookimpl
    def awa_worker_started(self, worker: Any) -> None:
        self.worker = worker

    @awa.hookimpl
    def awa_job_event(self, event: Any) -> None:
        if isinstance(event, awa.JobEvent.Completed) and event.job.kind == "stage_a":
            self.on_completed.append(self.worker.core.counters.snapshot())

    @awa.hookimpl
    def awa_worker_stopping(self, worker: Any) -> None:
        self.final = worker.core.counters.snapshot()


METRICS = StagedMetrics()


@pytest.mark.asyncio
async def test_a_metrics_plugin_reads_the_staged_counters(dsn: str) -> None:
    from awa_cli.plugins.manager import build_plugin_host

    global METRICS
    METRICS = StagedMetrics()
    host = build_plugin_host([f"{__name__}:METRICS"], entry_points=False)
    assert not host.failed, host.failed
    async with awa.AsyncClient(dsn) as client:
        done = await client.insert(StageA(1, "ok"), queue="stage_a")
        parked = await client.insert(StageA(2, "park"), queue="stage_a")
    async with running_worker(staging_app(Shared()), dsn, {"stage_a": 2}, plugins=host) as worker:
        await wait_until(lambda: job_row(dsn, done.id).state == "completed")
        await wait_until(lambda: job_row(dsn, parked.id).state == "waiting_external")
        await wait_until(lambda: len(METRICS.on_completed) == 1)
        await wait_until(lambda: worker.finalizer.in_flight == 0)  # counted once the core returned
    assert METRICS.on_completed[0]["inserted"] == 1  # counted before the event is dispatched
    assert METRICS.final == {"inserted": 1, "duplicate": 0, "discarded": 2}
