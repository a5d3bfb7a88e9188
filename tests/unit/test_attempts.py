"""The architecture §2 outcome table, tested directly on the pure attempt model (no database).

Each row of the table is one case: what the handler did -> the action, the state it moves
the job to, whether it uses the attempt, the error entry, and the event the committed row
emits. The same table is run end to end by a real worker in tests/integration/worker/test_outcomes.py.
"""

from __future__ import annotations

import dataclasses
import uuid
from datetime import datetime, timedelta, UTC
from typing import Any

import pytest

import awa_cli as awa
from tests.helpers import memory_row
from awa_cli.attempts import (
    MAX_BACKOFF_SECONDS,
    STATE_OF_ACTION,
    AttemptRecord,
    AttemptResult,
    args_rejected,
    backoff_seconds,
    committed_row,
    decide,
    event_for,
    unknown_kind,
)
from awa_cli.db.params import finalize_params
from awa_cli.events import JobEvent, Outcome
from awa_cli.jobs import CallbackToken, JobRow, JobState

NOW = datetime(2026, 12, 1, tzinfo=UTC)
CALLBACK = uuid.uuid4()


def row(attempt: int = 1, max_attempts: int = 25, **fields: Any) -> JobRow:
    """Job 7's running attempt (kind "step" on "default"), heartbeat and start at NOW."""
    values: dict[str, Any] = dict(kind="step", queue="default", args={"n": 1}, run_lease=3)
    values.update(heartbeat_at=NOW, attempted_at=NOW, **fields)
    return memory_row(NOW, attempt=attempt, max_attempts=max_attempts, **values)


def committed(result: AttemptResult) -> JobRow:
    """The row as the finalisation would commit it (what the event carries)."""
    state = result.state
    terminal = state in (JobState.COMPLETED, JobState.FAILED, JobState.CANCELLED)
    return committed_row(
        result,
        {
            "state": str(state),
            "run_at": NOW + timedelta(seconds=result.delay or 0),
            "attempt": result.job.attempt - (1 if result.action == "snooze" else 0),
            "finalized_at": NOW if terminal else None,
            "callback_id": result.callback_id,
            "callback_timeout_at": None,
        },
    )


def refund(result: AttemptResult) -> int:
    """1 when the attempt is not used (the finalisation gives it back)."""
    return int(finalize_params([result])["refunds"][0])


# handler's return value or exception, attempt/max, expected: action, state, attempt used,
# error-entry message (None: no entry), terminal entry, event type (None: no event)
TABLE = [
    pytest.param(None, None, 1, 25, "complete", JobState.COMPLETED, 0, None, None,
                 JobEvent.Completed, id="returns None"),
    pytest.param(None, ValueError("boom"), 1, 25, "retry", JobState.RETRYABLE, 0, "ValueError: boom",
                 False, JobEvent.Retried, id="raises, attempts left"),
    pytest.param(awa.RetryAfter(30), None, 1, 25, "retry", JobState.RETRYABLE, 0, "", False,
                 JobEvent.Retried, id="RetryAfter, attempts left"),
    pytest.param(None, ValueError("boom"), 25, 25, "fail", JobState.FAILED, 0, "ValueError: boom",
                 True, JobEvent.Exhausted, id="raises on the last attempt"),
    pytest.param(awa.RetryAfter(30), None, 3, 3, "fail", JobState.FAILED, 0, "", True,
                 JobEvent.Exhausted, id="RetryAfter on the last attempt"),
    pytest.param(None, awa.TerminalError("bad input"), 1, 25, "fail", JobState.FAILED, 0,
                 "TerminalError: bad input", True, JobEvent.Exhausted, id="TerminalError"),
    pytest.param(None, awa.StagingError("too many"), 1, 25, "fail", JobState.FAILED, 0,
                 "StagingError: too many", True, JobEvent.Exhausted, id="StagingError"),
    pytest.param(awa.Cancel("not needed"), None, 1, 25, "cancel", JobState.CANCELLED, 0, None, None,
                 JobEvent.Cancelled, id="Cancel"),
    pytest.param(awa.Snooze(60), None, 1, 25, "snooze", JobState.SCHEDULED, 1, None, None, None,
                 id="Snooze"),
    pytest.param(awa.Snooze(60), None, 25, 25, "snooze", JobState.SCHEDULED, 1, None, None, None,
                 id="Snooze on the last attempt uses none"),
    pytest.param(awa.WaitForCallback(CallbackToken(CALLBACK, 7, 3)), None, 1, 25, "park",
                 JobState.WAITING_EXTERNAL, 0, None, None, JobEvent.WaitingForCallback,
                 id="WaitForCallback"),
    pytest.param(42, None, 1, 25, "fail", JobState.FAILED, 0,
                 "handler returned int; expected None or an awa outcome", True, JobEvent.Exhausted,
                 id="returns something else"),
]  # fmt: skip


@pytest.mark.parametrize(
    ("returned", "raised", "attempt", "max_attempts", "action", "state", "refunded", "error",
     "terminal", "event"),
    TABLE,
)  # fmt: skip
def test_the_outcome_table(
    returned: Any,
    raised: BaseException | None,
    attempt: int,
    max_attempts: int,
    action: str,
    state: JobState,
    refunded: int,
    error: str | None,
    terminal: bool | None,
    event: type | None,
) -> None:
    job = row(attempt, max_attempts)
    record = AttemptRecord(registered_callback=CALLBACK)
    result = decide(job, args={"n": 1}, result=returned, exc=raised, duration=0.5, record=record)
    assert (result.action, result.state, refund(result)) == (action, state, refunded)
    if error is None:
        assert result.error_entry is None
    else:
        assert result.error_entry is not None
        assert result.error_entry["error"] == error
        assert result.error_entry["attempt"] == attempt
        assert result.error_entry.get("terminal", False) is terminal
    emitted = event_for(result, committed(result))
    assert (type(emitted) if emitted is not None else None) is event
    if emitted is not None:
        assert emitted.job.state is state and emitted.args == {"n": 1}


def test_an_exception_entry_carries_a_traceback_tail() -> None:
    try:
        raise ValueError("boom")
    except ValueError as exc:
        result = decide(row(), args={}, result=None, exc=exc, duration=0.0)
    assert result.error == "ValueError: boom"
    assert result.error_entry is not None and "raise ValueError" in result.error_entry["traceback"]


@pytest.mark.parametrize("attempt", [1, 2, 5, 10, 16])
def test_backoff_is_two_to_the_n_plus_up_to_a_quarter(attempt: int) -> None:
    base = 2.0**attempt
    delays = [backoff_seconds(attempt) for _ in range(200)]
    assert all(base <= d <= base * 1.25 for d in delays)
    assert max(delays) > min(delays)  # jittered


@pytest.mark.parametrize("attempt", [17, 30, 62, 63, 1000])
def test_backoff_is_capped_at_24_hours(attempt: int) -> None:
    assert MAX_BACKOFF_SECONDS == 24 * 3600
    assert all(backoff_seconds(attempt) <= MAX_BACKOFF_SECONDS for _ in range(50))
    assert backoff_seconds(attempt) >= min(2.0 ** min(attempt, 62), MAX_BACKOFF_SECONDS)


def test_a_retry_after_a_raise_waits_the_backoff_of_that_attempt() -> None:
    result = decide(row(attempt=4), args={}, result=None, exc=ValueError(), duration=0.0)
    assert result.delay is not None and 16 <= result.delay <= 20


@pytest.mark.parametrize(
    ("returned", "delay"),
    [
        (awa.RetryAfter(30), 30.0),
        (awa.RetryAfter(timedelta(minutes=2)), 120.0),
        (awa.Snooze(1.5), 1.5),
        (awa.Snooze(timedelta(seconds=9)), 9.0),
    ],
)
def test_retry_after_and_snooze_take_seconds_or_a_timedelta(returned: Any, delay: float) -> None:
    assert decide(row(), args={}, result=returned, exc=None, duration=0.0).delay == delay


def test_a_completion_keeps_its_output_and_staged_follow_ups() -> None:
    staged = (object(),)
    record = AttemptRecord(output={"done": True}, has_output=True, staged=staged)  # type: ignore[arg-type]
    result = decide(row(), args={}, result=None, exc=None, duration=1.0, record=record)
    assert (result.output, result.has_output, result.staged) == ({"done": True}, True, staged)
    emitted = event_for(result, committed(result))
    assert isinstance(emitted, JobEvent.Completed) and emitted.output == {"done": True}
    assert emitted.duration == 1.0


def test_a_failed_stage_fails_the_attempt_terminally_even_if_swallowed() -> None:
    record = AttemptRecord(staging_failure=awa.StagingError("follow-up rejected: priority"))
    result = decide(row(), args={}, result=None, exc=None, duration=0.0, record=record)
    assert result.action == "fail" and result.error_entry is not None
    assert result.error_entry["error"] == "StagingError: follow-up rejected: priority"
    assert result.error_entry["terminal"] is True


def test_a_terminal_error_raised_wins_over_a_failed_stage() -> None:
    record = AttemptRecord(staging_failure=awa.StagingError("later"))
    result = decide(
        row(), args={}, result=None, exc=awa.TerminalError("first"), duration=0.0, record=record
    )
    assert result.error == "TerminalError: first"


def test_wait_for_callback_needs_the_callback_this_attempt_registered() -> None:
    token = CallbackToken(uuid.uuid4(), 7, 3)
    for record in (AttemptRecord(), AttemptRecord(registered_callback=CALLBACK)):
        result = decide(
            row(), args={}, result=awa.WaitForCallback(token), exc=None, duration=0.0, record=record
        )
        assert result.action == "fail" and result.error_entry is not None
        assert result.error_entry["terminal"] is True
        assert "WaitForCallback returned without a callback" in result.error


def test_a_park_counts_the_staged_follow_ups_it_discards() -> None:
    record = AttemptRecord(registered_callback=CALLBACK, staged=(object(), object()))  # type: ignore[arg-type]
    token = CallbackToken(CALLBACK, 7, 3)
    result = decide(
        row(), args={}, result=awa.WaitForCallback(token), exc=None, duration=0.0, record=record
    )
    assert (result.action, result.callback_id, result.discarded, result.staged) == (
        "park",
        CALLBACK,
        2,
        (),
    )


def test_a_park_resumed_before_it_parked_emits_nothing() -> None:
    token = CallbackToken(CALLBACK, 7, 3)
    record = AttemptRecord(registered_callback=CALLBACK)
    result = decide(
        row(), args={}, result=awa.WaitForCallback(token), exc=None, duration=0.0, record=record
    )
    resumed = committed(result).evolve(state=JobState.AVAILABLE)
    assert event_for(result, resumed) is None


def test_an_unknown_kind_fails_terminally_without_an_event() -> None:
    result = unknown_kind(row(kind="not_deployed"))
    assert (result.action, result.state, result.outcome) == ("fail", JobState.FAILED, None)
    assert result.error_entry is not None
    assert result.error_entry["error"] == "unknown job kind: not_deployed"
    assert result.error_entry["terminal"] is True
    assert event_for(result, committed(result)) is None


@pytest.mark.parametrize("args", ["a string", [1, 2], 3, None])
def test_args_that_are_not_an_object_fail_terminally_on_the_first_attempt(args: Any) -> None:
    result = args_rejected(row(args=args), None, "args are not an object")
    assert (result.action, result.state) == ("fail", JobState.FAILED)
    assert result.error_entry is not None and result.error_entry["terminal"] is True
    emitted = event_for(result, committed(result))
    assert isinstance(emitted, JobEvent.Exhausted) and emitted.args == args


def test_every_action_has_a_state_and_an_outcome() -> None:
    assert set(STATE_OF_ACTION) == {
        "complete",
        "retry",
        "fail",
        "cancel",
        "snooze",
        "park",
        "interrupt",
    }
    outcomes = {
        a: dataclasses.replace(unknown_kind(row()), action=a, silent=False).outcome
        for a in STATE_OF_ACTION
    }  # type: ignore[arg-type]
    assert outcomes == {
        "complete": Outcome.COMPLETED,
        "retry": Outcome.RETRIED,
        "fail": Outcome.EXHAUSTED,
        "cancel": Outcome.CANCELLED,
        "snooze": None,
        "park": Outcome.WAITING_FOR_CALLBACK,
        "interrupt": None,
    }


def test_interrupted_hands_the_job_back_only_once_cancelled() -> None:
    """Issue 27 item 2: ``awa.Interrupted`` after a shutdown signal hands the job back
    (available, refunded, an error entry ``interrupted: shutdown``); without a cancellation
    it is an ordinary failure; after a deadline the attempt ran out of time."""
    handed = decide(
        row(),
        args={},
        result=None,
        exc=awa.Interrupted("shutdown"),
        duration=0.0,
        cancel_reason="shutdown",
    )
    assert (handed.action, handed.state) == ("interrupt", JobState.AVAILABLE)
    assert handed.error_entry is not None and handed.error_entry["error"] == "interrupted: shutdown"
    assert "terminal" not in handed.error_entry and event_for(handed, committed(handed)) is None
    plain = decide(row(), args={}, result=None, exc=awa.Interrupted(), duration=0.0)
    assert plain.action == "retry"
    late = decide(
        row(), args={}, result=None, exc=awa.Interrupted(), duration=0.0, cancel_reason="deadline"
    )
    assert late.action == "retry"


def test_an_attempt_result_is_immutable() -> None:
    result = decide(row(), args={}, result=None, exc=None, duration=0.0)
    with pytest.raises(dataclasses.FrozenInstanceError):
        result.action = "fail"  # type: ignore[misc]
