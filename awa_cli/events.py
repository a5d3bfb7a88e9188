"""Lifecycle events: what hooks and plugins receive after a transition commits.

Every event carries the committed :class:`~awa_cli.jobs.JobRow` and the job's args (rebuilt
as the registered type for typed hooks, a dict otherwise). Use them with ``match``::

    match event:
        case JobEvent.Completed(job=job, duration=duration): ...
        case JobEvent.Exhausted(error=error): ...
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from datetime import datetime
from typing import Any, ClassVar

from awa_cli.jobs import JobRow


class RescueReason(enum.StrEnum):
    STALE_HEARTBEAT = "stale_heartbeat"
    DEADLINE_EXCEEDED = "deadline_exceeded"
    EXPIRED_CALLBACK = "expired_callback"


class Outcome(enum.StrEnum):
    """The outcomes follow-up specs are registered for (one per outcome event)."""

    COMPLETED = "completed"
    CANCELLED = "cancelled"
    RETRIED = "retried"
    EXHAUSTED = "exhausted"
    WAITING_FOR_CALLBACK = "waiting_for_callback"
    RESCUED = "rescued"


@dataclass(frozen=True)
class _Event:
    name: ClassVar[str] = ""
    job: JobRow
    args: Any

    def with_args(self, args: Any) -> _Event:
        from dataclasses import replace

        return replace(self, args=args)


class JobEvent:
    """Namespace of the event types (``JobEvent.Started`` … ``JobEvent.Rescued``)."""

    @dataclass(frozen=True)
    class Started(_Event):
        """The claim committed; the handler is about to run (``job.state == running``)."""

        name: ClassVar[str] = "started"

    @dataclass(frozen=True)
    class WaitingForCallback(_Event):
        """The handler returned ``WaitForCallback``; the job is parked (``job.callback_id`` set)."""

        name: ClassVar[str] = "waiting_for_callback"

    @dataclass(frozen=True)
    class Completed(_Event):
        """The job completed. ``duration`` is the handler's wall time in seconds (0 for a callback)."""

        name: ClassVar[str] = "completed"
        duration: float = 0.0
        output: Any = None

    @dataclass(frozen=True)
    class Retried(_Event):
        """The attempt failed (or ``RetryAfter``) and the job will run again at ``next_run_at``."""

        name: ClassVar[str] = "retried"
        error: str = ""
        attempt: int = 0
        next_run_at: datetime | None = None

    @dataclass(frozen=True)
    class Exhausted(_Event):
        """Retries are exhausted or the failure was terminal; the job is ``failed``."""

        name: ClassVar[str] = "exhausted"
        error: str = ""
        attempt: int = 0

    @dataclass(frozen=True)
    class Cancelled(_Event):
        """The job was cancelled (by its handler or an operator)."""

        name: ClassVar[str] = "cancelled"
        reason: str = ""

    @dataclass(frozen=True)
    class Rescued(_Event):
        """Maintenance rescued the job; ``reason`` says why."""

        name: ClassVar[str] = "rescued"
        reason: RescueReason = RescueReason.STALE_HEARTBEAT


AnyEvent = (
    JobEvent.Started
    | JobEvent.WaitingForCallback
    | JobEvent.Completed
    | JobEvent.Retried
    | JobEvent.Exhausted
    | JobEvent.Cancelled
    | JobEvent.Rescued
)

OUTCOME_OF_EVENT: dict[type[_Event], Outcome] = {
    JobEvent.Completed: Outcome.COMPLETED,
    JobEvent.Cancelled: Outcome.CANCELLED,
    JobEvent.Retried: Outcome.RETRIED,
    JobEvent.Exhausted: Outcome.EXHAUSTED,
    JobEvent.WaitingForCallback: Outcome.WAITING_FOR_CALLBACK,
    JobEvent.Rescued: Outcome.RESCUED,
}


def context_of(event: _Event) -> tuple[Any, ...]:
    """The outcome's context passed to follow-up specs after ``(args, job)``."""
    match event:
        case JobEvent.Cancelled(reason=reason):
            return (reason,)
        case JobEvent.Retried(error=error, attempt=attempt, next_run_at=next_run_at):
            return (error, attempt, next_run_at)
        case JobEvent.Exhausted(error=error, attempt=attempt):
            return (error, attempt)
        case JobEvent.Rescued(reason=reason):
            return (reason,)
        case _:
            return ()
