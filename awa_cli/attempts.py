"""The pure attempt model: what one attempt of a claimed job decided (architecture §2 table).

``decide`` maps a handler's return value or exception to an :class:`AttemptResult`; the
outcome core (``awa_cli.outcomes``) turns that into the guarded transition and its event.
Nothing here does I/O: the table is tested directly, without a database
(``tests/unit/test_attempts.py``).
"""

from __future__ import annotations

import json
import random
import traceback
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime, UTC
from typing import TYPE_CHECKING, Any, Literal
from uuid import UUID

from awa_cli.errors import Interrupted
from awa_cli.events import JobEvent, Outcome
from awa_cli.jobs import JobRow, JobState, PreparedJob
from awa_cli.results import (
    Cancel,
    RetryAfter,
    Snooze,
    TerminalError,
    WaitForCallback,
    seconds,
)

if TYPE_CHECKING:
    from awa_cli.events import AnyEvent

MAX_BACKOFF_SECONDS = 24 * 3600.0
BACKOFF_JITTER = 0.25  # up to 25 % on top
MAX_BACKOFF_EXPONENT = 62  # 2**62 s is far past the cap; keeps the float finite

Action = Literal["complete", "retry", "fail", "cancel", "snooze", "park", "interrupt"]

STATE_OF_ACTION: dict[Action, JobState] = {
    "complete": JobState.COMPLETED,
    "retry": JobState.RETRYABLE,
    "fail": JobState.FAILED,
    "cancel": JobState.CANCELLED,
    "snooze": JobState.SCHEDULED,
    "park": JobState.WAITING_EXTERNAL,
    "interrupt": JobState.AVAILABLE,  # handed back at shutdown, the attempt refunded
}
"""The state each action moves a job to (the one action → state map)."""

OUTCOME_OF_ACTION: dict[Action, Outcome | None] = {
    "complete": Outcome.COMPLETED,
    "retry": Outcome.RETRIED,
    "fail": Outcome.EXHAUSTED,
    "cancel": Outcome.CANCELLED,
    "snooze": None,
    "park": Outcome.WAITING_FOR_CALLBACK,
    "interrupt": None,
}


def backoff_seconds(attempt: int) -> float:
    """Delay after failed attempt ``attempt``: 2**n s plus 0–25 % jitter, capped at 24 h."""
    base = 2.0 ** min(attempt, MAX_BACKOFF_EXPONENT)
    return min(base * (1.0 + random.uniform(0.0, BACKOFF_JITTER)), MAX_BACKOFF_SECONDS)


def error_entry(
    message: str, attempt: int, *, terminal: bool = False, tb: str | None = None
) -> dict[str, Any]:
    """One element of the ``errors`` column: ``{error, attempt, at, terminal?, traceback?}``."""
    entry: dict[str, Any] = {
        "error": message,
        "attempt": attempt,
        "at": datetime.now(UTC).isoformat(),
    }
    if terminal:
        entry["terminal"] = True
    if tb:
        entry["traceback"] = tb
    return entry


def describe_exception(exc: BaseException, tail_lines: int = 6) -> tuple[str, str]:
    """``"<ExceptionType>: <message>"`` and a short traceback tail."""
    message = f"{type(exc).__name__}: {exc}"
    lines = traceback.format_exception(exc)
    tail = "".join(lines[-tail_lines:]).strip()
    return message, tail[-2000:]


@dataclass(frozen=True)
class AttemptRecord:
    """What a handler's ``Job`` recorded during one attempt (``Job.finish()``): its output,
    the callback it registered, and the follow-ups it staged (or the first failed stage)."""

    output: Any = None
    has_output: bool = False
    registered_callback: UUID | None = None
    staged: tuple[PreparedJob, ...] = ()
    staging_failure: BaseException | None = None
    progress: str | None = None  # the JSON of the last set_progress (None: none this attempt)


NOTHING_RECORDED = AttemptRecord()


@dataclass(frozen=True)
class AttemptResult:
    """What one attempt of a claimed job decided; the core turns it into a transition."""

    job: JobRow  # the row as claimed (state running)
    action: Action
    args: Any = None  # the rebuilt args (or the dict), for events and specs
    delay: float | None = None  # retry / snooze
    error: str = ""  # for events; verbatim
    error_entry: dict[str, Any] | None = None  # appended to the errors column
    reason: str = ""  # cancel
    output: Any = None
    has_output: bool = False
    callback_id: UUID | None = None  # park
    duration: float = 0.0
    staged: tuple[PreparedJob, ...] = ()
    discarded: int = 0  # staged follow-ups dropped by a WaitForCallback park
    silent: bool = False  # no event (unknown kind)
    terminal: bool = False  # a TerminalError or awa's refusal (bad args, misuse): no retry asked
    progress: str | None = None  # JSON written with the outcome (None: the row's stays)

    @property
    def outcome(self) -> Outcome | None:
        return None if self.silent else OUTCOME_OF_ACTION[self.action]

    @property
    def state(self) -> JobState:
        """The state this result moves the job to."""
        return STATE_OF_ACTION[self.action]


@dataclass
class Finalized:
    """The result of applying one transition (filled in by the outcome core)."""

    job_id: int
    row: JobRow | None  # the committed row; None when stale or rolled back
    stale: bool = False
    error: BaseException | None = None
    events: list[AnyEvent] = field(default_factory=list)
    follow_ups: list[int] = field(default_factory=list)  # ids inserted
    duplicates: int = 0
    staged_inserted: int = 0
    staged_duplicates: int = 0
    queues: set[str] = field(default_factory=set)  # queues that received follow-ups


def _failure(job: JobRow, message: str, *, terminal: bool, tb: str | None = None) -> dict[str, Any]:
    entry = error_entry(message, job.attempt, terminal=terminal, tb=tb)
    # The attempt's start and worker, for the job's timeline (awa_cli.history).
    if job.attempted_by is not None:
        entry["worker"] = job.attempted_by
    if job.attempted_at is not None:
        entry["started_at"] = job.attempted_at.isoformat()
    return entry


def _raised(job: JobRow, exc: BaseException, last_attempt: bool) -> dict[str, Any]:
    """The fields of a result whose handler raised ``exc``."""
    message, tb = describe_exception(exc)
    terminal = isinstance(exc, TerminalError) or last_attempt
    entry = _failure(job, message, terminal=terminal, tb=tb)
    if terminal:
        return {
            "action": "fail",
            "error": message,
            "error_entry": entry,
            "terminal": isinstance(exc, TerminalError),
        }
    return {
        "action": "retry",
        "delay": backoff_seconds(job.attempt),
        "error": message,
        "error_entry": entry,
    }


def _returned(
    job: JobRow, result: Any, record: AttemptRecord, last_attempt: bool
) -> dict[str, Any]:
    """The fields of a result whose handler returned ``result``."""
    match result:
        case None:
            return {
                "action": "complete",
                "output": record.output,
                "has_output": record.has_output,
                "staged": tuple(record.staged),
            }
        case RetryAfter(seconds=delay):
            entry = _failure(job, "", terminal=last_attempt)
            if last_attempt:
                return {"action": "fail", "error_entry": entry}
            return {
                "action": "retry",
                "delay": seconds(delay, "RetryAfter.seconds"),
                "error_entry": entry,
            }
        case Snooze(seconds=delay):
            return {"action": "snooze", "delay": seconds(delay, "Snooze.seconds")}
        case Cancel(reason=reason):
            return {"action": "cancel", "reason": reason}
        case WaitForCallback(token=token):
            if record.registered_callback is None or token.id != record.registered_callback:
                message = "WaitForCallback returned without a callback registered by job.register_callback()"
                return _terminal(job, message)
            return {"action": "park", "callback_id": token.id, "discarded": len(record.staged)}
        case _:
            message = f"handler returned {type(result).__name__}; expected None or an awa outcome"
            return _terminal(job, message)


def _interrupted(job: JobRow, reason: str) -> dict[str, Any]:
    """The fields of an attempt handed back (``awa.Interrupted`` after a cancellation): the
    job is available again with its attempt refunded; the error entry says why."""
    message = f"interrupted: {reason}"
    return {
        "action": "interrupt",
        "error": message,
        "error_entry": _failure(job, message, terminal=False),
    }


def hands_back(exc: BaseException | None, cancel_reason: str | None) -> bool:
    """Whether the attempt is handed back rather than failed: the handler raised
    ``Interrupted`` once cancelled (a deadline excepted: that attempt ran out of time). A
    handler the drain had to stop at ``shutdown_timeout`` is a failed attempt (retryable)."""
    if cancel_reason is None or cancel_reason == "deadline":
        return False
    return isinstance(exc, Interrupted)


def _terminal(job: JobRow, message: str) -> dict[str, Any]:
    return {
        "action": "fail",
        "terminal": True,
        "error": message,
        "error_entry": _failure(job, message, terminal=True),
    }


def decide(
    job: JobRow,
    *,
    args: Any,
    result: Any,
    exc: BaseException | None,
    duration: float,
    record: AttemptRecord = NOTHING_RECORDED,
    cancel_reason: str | None = None,
) -> AttemptResult:
    """Map a handler's return value or exception to an attempt result (architecture §2 table).

    ``record`` is what the handler's job recorded (``Job.finish()``). Any failed stage fails
    the attempt terminally, even if the handler swallowed the error. ``cancel_reason`` is the
    job's ``cancel_reason`` when the handler ended (``Interrupted`` hands the job back then).
    """
    last_attempt = job.attempt >= job.max_attempts
    if record.staging_failure is not None and not isinstance(exc, TerminalError):
        exc = record.staging_failure
    if hands_back(exc, cancel_reason):
        fields = _interrupted(job, cancel_reason or "")
    elif exc is not None:
        fields = _raised(job, exc, last_attempt)
    else:
        fields = _returned(job, result, record, last_attempt)
    return AttemptResult(job=job, args=args, duration=duration, progress=record.progress, **fields)


def unknown_kind(job: JobRow) -> AttemptResult:
    """A claimed job whose kind this worker does not know: failed, no event."""
    message = f"unknown job kind: {job.kind}"
    return AttemptResult(
        job=job,
        action="fail",
        args=job.args,
        error=message,
        error_entry=error_entry(message, job.attempt, terminal=True),
        silent=True,
        terminal=True,
    )


DEADLINE_EXCEEDED = "hard deadline exceeded"


def deadline_exceeded(job: JobRow, *, args: Any, duration: float) -> AttemptResult:
    """An attempt the runtime stopped at its deadline: retryable with backoff and the error
    ``hard deadline exceeded`` (as the deadline rescue records), or failed on the last attempt."""
    last_attempt = job.attempt >= job.max_attempts
    entry = error_entry(DEADLINE_EXCEEDED, job.attempt, terminal=last_attempt)
    if last_attempt:
        return AttemptResult(
            job=job,
            action="fail",
            args=args,
            error=DEADLINE_EXCEEDED,
            error_entry=entry,
            duration=duration,
        )
    return AttemptResult(
        job=job,
        action="retry",
        args=args,
        delay=backoff_seconds(job.attempt),
        error=DEADLINE_EXCEEDED,
        error_entry=entry,
        duration=duration,
    )


def args_rejected(
    job: JobRow, args_type: type | None, problem: BaseException | str
) -> AttemptResult:
    """A claimed job whose args cannot be rebuilt as the registered type (including args that
    are valid JSON but not an object): failed terminally on this attempt (architecture §5.11).

    The event carries the committed args as stored (a dict, or the bare JSON value)."""
    name = (
        "a JSON object" if args_type in (None, dict) else getattr(args_type, "__name__", args_type)
    )
    error = TerminalError(f"args do not rebuild as {name}: {problem}")
    return decide(job, args=plain_args(job.args), result=None, exc=error, duration=0.0)


_JSON_TYPES = {str: "string", list: "array", int: "number", float: "number", bool: "boolean"}


def not_an_object(value: Any) -> str:
    """Why args that are valid JSON but not an object cannot be rebuilt (for messages)."""
    kind = "null" if value is None else _JSON_TYPES.get(type(value), type(value).__name__)
    return f"args are a JSON {kind}, not an object"


def plain_args(value: Any) -> Any:
    """Args as untyped hooks see them: a dict for a JSON object, else the JSON value itself."""
    return dict(value) if isinstance(value, Mapping) else value


def committed_row(result: AttemptResult, changed: Mapping[str, Any]) -> JobRow:
    """The row as committed: the claimed row plus the columns the finalisation changed."""
    claimed = result.job
    errors = claimed.errors if result.error_entry is None else [*claimed.errors, result.error_entry]
    state = JobState(changed["state"])
    output = (
        result.output if (result.has_output and state is JobState.COMPLETED) else claimed.output
    )
    return claimed.evolve(
        state=state,
        run_at=changed["run_at"],
        attempt=changed["attempt"],
        errors=errors,
        output=output,
        heartbeat_at=None,
        deadline_at=None,
        finalized_at=changed["finalized_at"],
        callback_id=changed["callback_id"],
        callback_timeout_at=changed["callback_timeout_at"],
        progress=claimed.progress if result.progress is None else json.loads(result.progress),
    )


def finalized(result: AttemptResult, changed: Mapping[str, Any] | None) -> Finalized:
    """A finalisation from the changed columns of the job (None: the change was stale)."""
    if changed is None:
        return Finalized(result.job.id, None, stale=True)
    row = committed_row(result, changed)
    event = event_for(result, row)
    return Finalized(result.job.id, row, events=[event] if event else [])


def event_for(result: AttemptResult, row: JobRow) -> AnyEvent | None:
    """The event a committed attempt result emits (none for snooze or a silent failure)."""
    if result.silent:
        return None
    args = result.args
    match result.action:
        case "complete":
            return JobEvent.Completed(row, args, result.duration, row.output)
        case "retry":
            return JobEvent.Retried(row, args, result.error, result.job.attempt, row.run_at)
        case "fail":
            return JobEvent.Exhausted(row, args, result.error, result.job.attempt)
        case "cancel":
            return JobEvent.Cancelled(row, args, result.reason)
        case "park":
            if row.state != JobState.WAITING_EXTERNAL:
                return None  # resumed before it parked: it re-enters execution instead
            return JobEvent.WaitingForCallback(row, args)
        case "snooze" | "interrupt":
            return None
