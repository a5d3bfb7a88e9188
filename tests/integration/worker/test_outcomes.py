"""Every row of the architecture §2 outcome table, run by a real worker against PostgreSQL,
with the event each row emits (spec: "How JobResult / outcomes map to events")."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from datetime import datetime, UTC

import pytest

import awa_cli as awa
from tests.helpers import job_row, running_worker, wait_until

pytestmark = [pytest.mark.integration]


@dataclass
class Step:
    mode: str
    value: float = 0


def make_app(events: list[awa.JobEvent.Started]) -> awa.App:
    app = awa.App()

    @app.task(Step)
    async def step(job: awa.Job) -> awa.JobResult | None:
        match job.args.mode:
            case "ok":
                job.set_output({"done": True})
                return None
            case "raise":
                raise ValueError("boom")
            case "retry_after":
                return awa.RetryAfter(job.args.value)
            case "snooze":
                return awa.Snooze(job.args.value)
            case "cancel":
                return awa.Cancel("not needed")
            case "terminal":
                raise awa.TerminalError("bad input")
            case "bogus":
                return 42  # type: ignore[return-value]
        raise AssertionError(job.args.mode)

    @app.on_event(Step)
    def record(event: awa.JobEvent.Started) -> None:
        events.append(event)

    return app


async def run_one(dsn: str, args: Step, **options: object) -> tuple[awa.JobRow, list[object]]:
    events: list[object] = []
    app = make_app(events)  # type: ignore[arg-type]
    with awa.Client(dsn) as client:
        job = client.insert(args, **options)
    async with running_worker(app, dsn):
        await wait_until(lambda: job_row(dsn, job.id).state not in ("available", "running"))
        await wait_until(lambda: len(events) >= 2 or job_row(dsn, job.id).state == "scheduled")
        await asyncio.sleep(0.1)  # let any further (wrong) event arrive
    return job_row(dsn, job.id), events


def kinds(events: list[object]) -> list[str]:
    return [type(e).__name__ for e in events]


@pytest.mark.asyncio
async def test_completed(dsn: str) -> None:
    row, events = await run_one(dsn, Step("ok"))
    assert row.state == "completed" and row.attempt == 1 and row.finalized_at is not None
    assert row.output == {"done": True}
    assert sorted(kinds(events)) == ["Completed", "Started"]
    completed = next(e for e in events if isinstance(e, awa.JobEvent.Completed))
    assert completed.job.state == "completed" and completed.output == {"done": True}
    assert completed.duration >= 0 and isinstance(completed.args, Step)


@pytest.mark.asyncio
async def test_exception_with_attempts_left_is_retried_with_backoff(dsn: str) -> None:
    before = datetime.now(UTC)
    row, events = await run_one(dsn, Step("raise"))
    assert row.state == "retryable" and row.attempt == 1
    delay = (row.run_at - before).total_seconds()
    assert 2 * 0.9 <= delay <= 2 * 1.25 + 2  # 2**1 s plus up to 25 % jitter (+ run time)
    [entry] = row.errors
    assert entry["error"] == "ValueError: boom" and entry["attempt"] == 1 and "at" in entry
    assert "raise ValueError" in entry["traceback"] and "terminal" not in entry
    retried = next(e for e in events if isinstance(e, awa.JobEvent.Retried))
    assert retried.error == "ValueError: boom" and retried.attempt == 1
    assert retried.next_run_at == row.run_at


@pytest.mark.asyncio
async def test_exception_on_last_attempt_exhausts(dsn: str) -> None:
    row, events = await run_one(dsn, Step("raise"), max_attempts=1)
    assert row.state == "failed" and row.errors[-1]["terminal"] is True
    exhausted = next(e for e in events if isinstance(e, awa.JobEvent.Exhausted))
    assert exhausted.error == "ValueError: boom" and exhausted.attempt == 1
    assert "Retried" not in kinds(events)


async def run_delayed(dsn: str, args: Step) -> tuple[awa.JobRow, list[object]]:
    """run_one for a result that puts the job off by ``args.value`` seconds: its run_at is
    that long after the start (a second early at the most, five late)."""
    before = datetime.now(UTC)
    row, events = await run_one(dsn, args)
    assert args.value - 1 <= (row.run_at - before).total_seconds() <= args.value + 5
    return row, events


@pytest.mark.asyncio
async def test_retry_after(dsn: str) -> None:
    row, events = await run_delayed(dsn, Step("retry_after", 120))
    assert row.state == "retryable" and row.attempt == 1
    retried = next(e for e in events if isinstance(e, awa.JobEvent.Retried))
    assert retried.error == "" and retried.next_run_at == row.run_at


@pytest.mark.asyncio
async def test_retry_after_on_last_attempt_exhausts(dsn: str) -> None:
    row, events = await run_one(dsn, Step("retry_after", 5), max_attempts=1)
    assert row.state == "failed"
    assert "Exhausted" in kinds(events) and "Retried" not in kinds(events)


@pytest.mark.asyncio
async def test_terminal_error_fails_now(dsn: str) -> None:
    row, events = await run_one(dsn, Step("terminal"))
    assert row.state == "failed" and row.attempt == 1 and row.max_attempts == 25
    assert row.errors[-1]["error"] == "TerminalError: bad input" and row.errors[-1]["terminal"]
    assert "Exhausted" in kinds(events)


@pytest.mark.asyncio
async def test_cancel(dsn: str) -> None:
    row, events = await run_one(dsn, Step("cancel"))
    assert row.state == "cancelled" and row.finalized_at is not None
    cancelled = next(e for e in events if isinstance(e, awa.JobEvent.Cancelled))
    assert cancelled.reason == "not needed"


@pytest.mark.asyncio
async def test_snooze_does_not_use_an_attempt_and_emits_nothing(dsn: str) -> None:
    row, events = await run_delayed(dsn, Step("snooze", 60))
    assert row.state == "scheduled" and row.attempt == 0
    assert kinds(events) == ["Started"]


@pytest.mark.asyncio
async def test_unknown_kind_fails_without_event(dsn: str) -> None:
    events: list[object] = []
    with awa.Client(dsn) as client:
        job = client.insert({"x": 1}, kind="nobody_handles_this")
    async with running_worker(make_app(events), dsn):  # type: ignore[arg-type]
        await wait_until(lambda: job_row(dsn, job.id).state == "failed")
    row = job_row(dsn, job.id)
    assert row.attempt == 1
    assert row.errors[-1]["error"] == "unknown job kind: nobody_handles_this"
    assert row.errors[-1]["terminal"] is True


@pytest.mark.asyncio
async def test_args_that_do_not_rebuild_fail_terminally(dsn: str) -> None:
    with awa.Client(dsn) as client:
        job = client.insert({"unexpected": 1}, kind="step")
    async with running_worker(make_app([]), dsn):
        await wait_until(lambda: job_row(dsn, job.id).state == "failed")
    row = job_row(dsn, job.id)
    assert row.attempt == 1 and "args do not rebuild as Step" in row.errors[-1]["error"]


@pytest.mark.asyncio
async def test_a_bogus_return_value_fails_terminally(dsn: str) -> None:
    row, _ = await run_one(dsn, Step("bogus"))
    assert row.state == "failed" and "handler returned int" in row.errors[-1]["error"]
