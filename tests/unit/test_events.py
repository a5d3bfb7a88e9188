"""Unit tests of the lifecycle event types (no database): ``match`` patterns, immutability,
RescueReason values."""

from __future__ import annotations

import dataclasses
from datetime import datetime, UTC
from typing import Any
from uuid import uuid4

import pytest

import awa_cli as awa
from tests.helpers import memory_row
from awa_cli.events import OUTCOME_OF_EVENT, JobEvent, Outcome, RescueReason, context_of
from awa_cli.jobs import JobRow, JobState

NOW = datetime(2024, 1, 2, 3, 4, 5, tzinfo=UTC)


def row(state: str = "completed", **changes: Any) -> JobRow:
    return memory_row(NOW, state=state, **changes)


def describe(event: Any) -> str:
    match event:
        case JobEvent.Started(job=JobRow(state=JobState.RUNNING)):
            return "started"
        case JobEvent.WaitingForCallback(job=JobRow(callback_id=callback_id)) if callback_id:
            return "waiting"
        case JobEvent.Completed(duration=duration, output=output):
            return f"completed {duration} {output}"
        case JobEvent.Retried(error=error, attempt=attempt, next_run_at=next_run_at):
            return f"retried {error} {attempt} {next_run_at.year}"
        case JobEvent.Exhausted(error=error, attempt=attempt):
            return f"exhausted {error} {attempt}"
        case JobEvent.Cancelled(reason=reason):
            return f"cancelled {reason}"
        case JobEvent.Rescued(reason=RescueReason.DEADLINE_EXCEEDED):
            return "rescued: deadline"
        case JobEvent.Rescued(reason=reason):
            return f"rescued {reason}"
    return "unmatched"


def test_every_event_matches_by_keyword() -> None:
    args = {"to": "a@example.com"}
    assert describe(JobEvent.Started(row("running"), args)) == "started"
    assert (
        describe(JobEvent.WaitingForCallback(row("waiting_external", callback_id=uuid4()), args))
        == "waiting"
    )
    assert (
        describe(JobEvent.Completed(row(), args, 0.5, {"sent": True}))
        == "completed 0.5 {'sent': True}"
    )
    assert (
        describe(JobEvent.Retried(row("retryable"), args, "ValueError: x", 1, NOW))
        == "retried ValueError: x 1 2024"
    )
    assert describe(JobEvent.Exhausted(row("failed"), args, "boom", 25)) == "exhausted boom 25"
    assert (
        describe(JobEvent.Cancelled(row("cancelled"), args, "not needed")) == "cancelled not needed"
    )
    assert (
        describe(JobEvent.Rescued(row("retryable"), args, RescueReason.DEADLINE_EXCEEDED))
        == "rescued: deadline"
    )
    assert (
        describe(JobEvent.Rescued(row("retryable"), args, RescueReason.STALE_HEARTBEAT))
        == "rescued stale_heartbeat"
    )


def test_events_match_positionally_job_and_args_first() -> None:
    event = JobEvent.Completed(row(), {"to": "x"}, 1.25, None)
    match event:
        case JobEvent.Completed(job, args, duration, output):
            assert (job.id, args, duration, output) == (7, {"to": "x"}, 1.25, None)
        case _:
            pytest.fail("positional pattern did not match")
    match JobEvent.Retried(row("retryable"), {}, "e", 3, NOW):
        case JobEvent.Retried(_, _, error, attempt, next_run_at):
            assert (error, attempt, next_run_at) == ("e", 3, NOW)
        case _:
            pytest.fail("positional pattern did not match")


def test_an_event_matches_only_its_own_class() -> None:
    event = JobEvent.Cancelled(row("cancelled"), {}, "why")
    match event:
        case JobEvent.Completed() | JobEvent.Exhausted():
            pytest.fail("matched the wrong event")
        case JobEvent.Cancelled():
            pass
    assert not isinstance(event, JobEvent.Completed)


def test_events_are_frozen_and_named() -> None:
    event = JobEvent.Started(row("running"), {})
    with pytest.raises(dataclasses.FrozenInstanceError):
        event.args = {"x": 1}  # type: ignore[misc]
    names = {
        cls.name
        for cls in (
            JobEvent.Started,
            JobEvent.WaitingForCallback,
            JobEvent.Completed,
            JobEvent.Retried,
            JobEvent.Exhausted,
            JobEvent.Cancelled,
            JobEvent.Rescued,
        )
    }
    assert names == {
        "started",
        "waiting_for_callback",
        "completed",
        "retried",
        "exhausted",
        "cancelled",
        "rescued",
    }


def test_with_args_returns_a_copy_of_the_event() -> None:
    event = JobEvent.Exhausted(row("failed"), {"to": "x"}, "boom", 2)
    typed = event.with_args("typed")
    assert typed.args == "typed" and event.args == {"to": "x"}
    assert (typed.job, typed.error, typed.attempt) == (event.job, "boom", 2)
    assert type(typed) is JobEvent.Exhausted


def test_completed_defaults_and_field_order() -> None:
    event = JobEvent.Completed(row(), {})
    assert event.duration == 0.0 and event.output is None
    assert JobEvent.Completed.__match_args__ == ("job", "args", "duration", "output")
    assert JobEvent.Retried.__match_args__ == ("job", "args", "error", "attempt", "next_run_at")
    assert JobEvent.Exhausted.__match_args__ == ("job", "args", "error", "attempt")
    assert JobEvent.Cancelled.__match_args__ == ("job", "args", "reason")
    assert JobEvent.Rescued.__match_args__ == ("job", "args", "reason")
    assert JobEvent.Started.__match_args__ == ("job", "args")
    assert JobEvent.WaitingForCallback.__match_args__ == ("job", "args")


def test_rescue_reason_values() -> None:
    assert {r.value for r in RescueReason} == {
        "stale_heartbeat",
        "deadline_exceeded",
        "expired_callback",
    }
    assert RescueReason("expired_callback") is RescueReason.EXPIRED_CALLBACK
    assert str(RescueReason.STALE_HEARTBEAT) == "stale_heartbeat"
    with pytest.raises(ValueError):
        RescueReason("bogus")


def test_public_names() -> None:
    assert awa.JobEvent is JobEvent and awa.RescueReason is RescueReason


def test_each_outcome_event_has_an_outcome_and_its_spec_context() -> None:
    assert set(OUTCOME_OF_EVENT.values()) == set(Outcome)
    assert JobEvent.Started not in OUTCOME_OF_EVENT  # Started has no follow-up specs
    assert context_of(JobEvent.Retried(row(), {}, "e", 2, NOW)) == ("e", 2, NOW)
    assert context_of(JobEvent.Exhausted(row(), {}, "e", 3)) == ("e", 3)
    assert context_of(JobEvent.Cancelled(row(), {}, "why")) == ("why",)
    assert context_of(JobEvent.Rescued(row(), {}, RescueReason.EXPIRED_CALLBACK)) == (
        RescueReason.EXPIRED_CALLBACK,
    )
    assert context_of(JobEvent.Completed(row(), {}, 1.0)) == ()
    assert context_of(JobEvent.WaitingForCallback(row(), {})) == ()
