"""Handler outcomes and the error hierarchy.

A handler returns ``None`` (completed) or one of the outcome values below, or raises.
Every error awa raises on purpose is an :class:`AwaError`.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from awa_cli.jobs import CallbackToken


class AwaError(Exception):
    """Base class of every error awa raises on purpose."""


class ValidationError(AwaError, ValueError):
    """Bad input (an insert option, a callback id, a payload); the message names the field."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field


class UniqueConflict(AwaError):
    """A plain insert whose unique key is already held by another job."""

    def __init__(self, kind: str, existing_id: int | None = None) -> None:
        detail = f" (held by job {existing_id})" if existing_id is not None else ""
        super().__init__(f"a job of kind {kind!r} with the same unique key already exists{detail}")
        self.kind = kind
        self.existing_id = existing_id


class CallbackNotFound(AwaError, LookupError):
    """No job is waiting on this callback id (unknown, already resolved, rescued, or a wrong run_lease)."""


class JobNotFound(AwaError, LookupError):
    """No job has this id."""


class UnknownJobKind(AwaError, LookupError):
    """The kind is not registered in the app at hand."""


class TerminalError(AwaError):
    """Raise from a handler to fail the job now, whatever attempts are left."""


class StagingError(TerminalError):
    """A handler-staged follow-up was rejected (validation, a limit, or staging after return)."""


class FollowUpError(AwaError):
    """A follow-up spec raised or its insert failed; the triggering transition was rolled back."""


def seconds(value: float | int | timedelta, field: str) -> float:
    """Normalise a duration given as seconds or a timedelta; negative values are rejected."""
    if isinstance(value, timedelta):
        result = value.total_seconds()
    elif isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValidationError(field, f"expected seconds or a timedelta, got {type(value).__name__}")
    else:
        result = float(value)
    if result != result or result < 0 or result == float("inf"):
        raise ValidationError(field, f"must be a finite, non-negative duration, got {value!r}")
    return result


@dataclass(frozen=True)
class RetryAfter:
    """Retry the job after ``seconds`` (uses an attempt)."""

    seconds: float | int | timedelta


@dataclass(frozen=True)
class Snooze:
    """Run the job again after ``seconds`` without using an attempt."""

    seconds: float | int | timedelta


@dataclass(frozen=True)
class Cancel:
    """Cancel the job with a reason."""

    reason: str = ""


@dataclass(frozen=True)
class WaitForCallback:
    """Park the job in ``waiting_external`` until the callback ``token`` is resolved."""

    token: CallbackToken


JobResult = RetryAfter | Snooze | Cancel | WaitForCallback

__all__ = [
    "AwaError",
    "CallbackNotFound",
    "Cancel",
    "FollowUpError",
    "JobNotFound",
    "JobResult",
    "RetryAfter",
    "Snooze",
    "StagingError",
    "TerminalError",
    "UniqueConflict",
    "UnknownJobKind",
    "ValidationError",
    "WaitForCallback",
    "seconds",
]
