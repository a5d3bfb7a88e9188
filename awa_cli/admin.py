"""The operator layer's models (architecture §10, §15.4): queue controls, audit entries and the
filters of bulk operations. Pure: nothing here does I/O beyond asking who the OS user is.
"""

from __future__ import annotations

import getpass
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal

from awa_cli.jobs import JobState
from awa_cli.results import ValidationError

# Rows per batch of a bulk operation or a DLQ move/retry/purge: each batch is one short
# transaction, so a large set never holds one long lock (architecture §10, issue 18).
DEFAULT_BATCH = 1000

BulkOperation = Literal["retry", "cancel", "purge"]

# The states each bulk operation accepts (`--state`), as architecture §10 lists them.
BULK_STATES: dict[BulkOperation, frozenset[JobState]] = {
    "retry": frozenset({JobState.FAILED, JobState.CANCELLED}),
    "cancel": frozenset(
        {JobState.AVAILABLE, JobState.SCHEDULED, JobState.RETRYABLE, JobState.WAITING_EXTERNAL}
    ),
    "purge": frozenset({JobState.COMPLETED, JobState.FAILED, JobState.CANCELLED}),
}


def _show(value: datetime | None) -> str | None:
    return None if value is None else value.isoformat()


@dataclass(frozen=True)
class QueueInfo:
    """A queue's control state (``awa.queues``; a queue without a row is not paused)."""

    queue: str
    paused: bool = False
    paused_at: datetime | None = None
    paused_by: str | None = None
    dead_letter: bool = False  # as the last worker that announced the queue configured it
    updated_at: datetime | None = None

    @classmethod
    def from_record(cls, record: Mapping[str, Any]) -> QueueInfo:
        """From a ``queue_*`` statement's row (columns ``queue, paused, paused_at, ...``)."""
        return cls(
            queue=record["queue"],
            paused=bool(record["paused"]),
            paused_at=record.get("paused_at"),
            paused_by=record.get("paused_by"),
            dead_letter=bool(record.get("dead_letter")),
            updated_at=record.get("updated_at"),
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "queue": self.queue,
            "paused": self.paused,
            "paused_at": _show(self.paused_at),
            "paused_by": self.paused_by,
            "dead_letter": self.dead_letter,
            "updated_at": _show(self.updated_at),
        }


@dataclass(frozen=True)
class AuditEntry:
    """One row of ``awa.audit_log``: who did what to which target, and how it ended."""

    id: int
    at: datetime
    actor: str
    action: str
    target: str | None
    result: str
    detail: dict[str, Any]

    @classmethod
    def from_record(cls, record: Mapping[str, Any]) -> AuditEntry:
        return cls(
            id=record["id"],
            at=record["at"],
            actor=record["actor"],
            action=record["action"],
            target=record["target"],
            result=record["result"],
            detail=dict(record["detail"] or {}),
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "at": self.at.isoformat(),
            "actor": self.actor,
            "action": self.action,
            "target": self.target,
            "result": self.result,
            "detail": dict(self.detail),
        }


def cli_actor() -> str:
    """The audit actor of a CLI command: ``cli:<os user>`` (architecture §15.4)."""
    try:
        user = getpass.getuser()
    except (OSError, KeyError):  # no login name, no passwd entry (a bare container)
        user = "unknown"
    return f"cli:{user}"


def bulk_states(operation: BulkOperation, states: Iterable[JobState | str]) -> list[JobState]:
    """The ``--state`` values of a bulk operation, checked against what it accepts.

    Raises :class:`ValidationError` naming ``state`` for an unknown state or one the operation
    does not act on (retrying a running job, purging an available one). Empty: every accepted
    state.
    """
    allowed = BULK_STATES[operation]
    try:
        chosen = [JobState(s) for s in states]
    except ValueError as exc:
        raise ValidationError("state", str(exc)) from None
    for state in chosen:
        if state not in allowed:
            names = ", ".join(sorted(allowed))
            raise ValidationError("state", f"{operation} acts on {names}, not {state}")
    return sorted(set(chosen) or allowed)


@dataclass(frozen=True)
class JobFilter:
    """Which jobs a bulk retry, cancel or purge acts on. ``states`` empty: every state the
    operation accepts; ``older_than`` (seconds since the job finished) applies to purge only;
    ``all`` allows an action with no filter at all; ``ids`` (a filter) keeps the jobs with
    those ids, ``tag`` those carrying the tag."""

    states: tuple[str, ...] = ()
    queue: str | None = None
    kind: str | None = None
    older_than: float | None = None
    all: bool = False
    tag: str | None = None  # jobs carrying this tag (the dashboard's jobs list filter)
    ids: tuple[int, ...] | None = None  # these jobs only (the ones an operator selected)

    @property
    def state(self) -> str | None:
        """The states as the audit log and the refusal name them (``failed,cancelled``)."""
        return ",".join(self.states) or None

    @property
    def id_list(self) -> str | None:
        """The ids as the audit log names them (``12,13,14``; the first 20, then ``…``)."""
        if self.ids is None:
            return None
        shown = ",".join(str(i) for i in self.ids[:20])
        return shown + ("…" if len(self.ids) > 20 else "")


@dataclass(frozen=True)
class DeadLetterFilter:
    """Which dead letters a bulk retry, move or purge acts on (``id``: purge only)."""

    id: int | None = None
    queue: str | None = None
    kind: str | None = None
    older_than: float | None = None
    all: bool = False


def require_filter(operation: str, *, all_: bool, **filters: Any) -> None:
    """Refuse a bulk operation with no filter unless ``all`` was asked for (architecture §10).

    ``filters`` are the operation's filters by name (``queue=None, kind="k"``); with ``all``
    the given filters still apply.
    """
    if not all_ and all(value is None for value in filters.values()):
        names = ", ".join(f"--{name.replace('_', '-')}" for name in filters)
        refused = ValidationError("all", f"{operation} needs a filter ({names}) or --all")
        # One sentence, not "all: cancel needs ..." (the field stays ``all`` for callers).
        refused.args = (f"{operation} needs a filter ({names}) or --all",)
        raise refused


__all__ = [
    "BULK_STATES",
    "DEFAULT_BATCH",
    "AuditEntry",
    "BulkOperation",
    "DeadLetterFilter",
    "JobFilter",
    "QueueInfo",
    "bulk_states",
    "cli_actor",
    "require_filter",
]
