"""Handler outcomes: what a handler may return instead of ``None``.

A handler returns ``None`` (completed) or one of the outcome values below, or raises. The
error classes and ``seconds`` are defined in :mod:`awa_cli.errors` and
:mod:`awa_cli.durations` and re-exported here, so ``from awa_cli.results import X`` keeps
working.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta
from typing import TYPE_CHECKING

from awa_cli.durations import seconds
from awa_cli.errors import (
    AwaError,
    CallbackNotFound,
    FollowUpError,
    JobNotFound,
    StagingError,
    TerminalError,
    UniqueConflict,
    UnknownJobKind,
    ValidationError,
)

if TYPE_CHECKING:
    from awa_cli.jobs import CallbackToken


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
