"""The row model: job states, committed rows, callback tokens and prepared inserts.

Pure: nothing here does I/O. What an insert may say and how it is checked lives in
:mod:`awa_cli.enqueue`; the JSON form of args and their kind names in
:mod:`awa_cli.jsonvalues`. Both used to live here, and their names are still importable
from this module (``from awa_cli.jobs import InsertOpts`` keeps working).
"""

from __future__ import annotations

import dataclasses
import enum
import json
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any, Self

from awa_cli.errors import ValidationError

# Re-exported for the old import path; jsonvalues imports nothing of the row model.
from awa_cli.jsonvalues import args_json_of, args_to_dict, kind_for, rebuild_args, to_json

if TYPE_CHECKING:
    from awa_cli.enqueue import (
        DEFAULT_MAX_ATTEMPTS,
        DEFAULT_PRIORITY,
        DEFAULT_QUEUE,
        DEFAULT_UNIQUE_STATES,
        INSERT_OPTION_NAMES,
        MAX_NAME_LENGTH,
        MAX_TAGS,
        EnqueueRequest,
        InsertOpts,
        UniqueOpts,
        prepare,
        prepare_many,
        unique_key,
    )


class JobState(enum.StrEnum):
    """The states of ``awa.job_state``, in the order the enum declares them."""

    SCHEDULED = "scheduled"
    AVAILABLE = "available"
    RUNNING = "running"
    WAITING_EXTERNAL = "waiting_external"
    RETRYABLE = "retryable"
    COMPLETED = "completed"
    FAILED = "failed"
    CANCELLED = "cancelled"
    BLOCKED = "blocked"  # waiting for parents (architecture §16; migration 0008)

    @property
    def is_terminal(self) -> bool:
        return self in (JobState.COMPLETED, JobState.FAILED, JobState.CANCELLED)


@dataclass(frozen=True)
class CallbackToken:
    """What ``job.register_callback()`` returns: the id an external system resolves."""

    id: uuid.UUID
    job_id: int
    run_lease: int
    # (action, URL) pairs, filled by the worker when [serve] callback_base_url is set
    # (built by awa_cli.callbacks.callback_urls; data, so this module stays pure).
    urls: tuple[tuple[str, str], ...] = field(default=(), compare=False, repr=False)

    def url(self, action: str = "complete") -> str:
        """The full URL an external system POSTs to for ``action`` (complete, fail, retry,
        resume or heartbeat); needs ``[serve] callback_base_url`` (``Worker(callback_base_url=)``)."""
        for name, url in self.urls:
            if name == action:
                return url
        if not self.urls:
            raise ValidationError(
                "callback_base_url", "is not configured, so the token has no URL ([serve])"
            )
        known = ", ".join(name for name, _ in self.urls)
        raise ValidationError("action", f"expected one of {known}, got {action!r}")


@dataclass(frozen=True)
class JobRow:
    """One committed row of ``awa.jobs``."""

    id: int
    kind: str
    queue: str
    args: dict[str, Any]
    state: JobState
    priority: int
    attempt: int
    max_attempts: int
    run_at: datetime
    run_lease: int
    heartbeat_at: datetime | None
    deadline_at: datetime | None
    deadline_duration: float | None
    callback_id: uuid.UUID | None
    callback_timeout_at: datetime | None
    callback_result: Any
    errors: list[dict[str, Any]]
    metadata: dict[str, Any]
    tags: list[str]
    unique_key: bytes | None
    unique_states: list[JobState] | None
    output: Any
    ordering_key: str | None
    created_at: datetime
    attempted_at: datetime | None
    finalized_at: datetime | None
    # architecture §11 (migration 0004): the last reported progress ({"percent", "message",
    # "checkpoint", "at"}, kept across retries) and the worker of the current attempt.
    progress: dict[str, Any] | None = None
    attempted_by: str | None = None

    @classmethod
    def from_record(cls, record: Mapping[str, Any]) -> JobRow:
        """Build a row from a ``SELECT *`` / ``RETURNING *`` record (extra columns ignored)."""
        return cls.from_values([record.get(name) for name in JOB_ROW_FIELDS])

    @classmethod
    def from_values(cls, values: Sequence[Any]) -> JobRow:
        """Build a row from column values in ``JOB_ROW_FIELDS`` order (the hot path)."""
        data = dict(zip(JOB_ROW_FIELDS, values, strict=True))
        data["state"] = JobState(data["state"])
        states = data["unique_states"]
        if states is not None:
            if isinstance(states, str):  # awa.job_state[] unknown to the driver: '{a,b}'
                states = [s for s in states.strip("{}").split(",") if s]
            data["unique_states"] = [JobState(s) for s in states]
        if data["unique_key"] is not None:
            data["unique_key"] = bytes(data["unique_key"])
        data["tags"] = list(data["tags"] or ())
        data["errors"] = list(data["errors"] or ())
        data["metadata"] = dict(data["metadata"] or {})
        row = object.__new__(cls)  # frozen: fill the instance dict directly, as __init__ would
        row.__dict__.update(data)
        return row

    @classmethod
    def inserted(cls, job: PreparedJob, values: Sequence[Any]) -> JobRow:
        """The row an insert of ``job`` just wrote, from the values the insert returned
        (``INSERTED_COLUMNS``: what the server chose) and the job's own: the rest are the
        table's defaults for a job that has never run. Saves the client decoding every
        column it sent (measured: 7-30 µs of client CPU per ``AsyncClient.insert``)."""
        job_id, state, run_at, created_at = values
        states = job.unique_states
        row = object.__new__(cls)
        row.__dict__.update(
            _NEVER_RUN,
            id=job_id,
            kind=job.kind,
            queue=job.queue,
            args=json.loads(job.args_json),
            state=JobState(state),
            priority=job.priority,
            max_attempts=job.max_attempts,
            run_at=run_at,
            deadline_duration=job.deadline_duration,
            errors=[],
            metadata=json.loads(job.metadata_json),
            tags=list(job.tags),
            unique_key=job.unique_key,
            unique_states=None if states is None else [JobState(s) for s in states],
            ordering_key=job.ordering_key,
            created_at=created_at,
        )
        return row

    def evolve(self, **changes: Any) -> Self:
        """A copy with ``changes`` applied (a fast ``dataclasses.replace`` for hot paths), of
        the same class (a ``DeadLetter`` stays one)."""
        new = object.__new__(type(self))
        new.__dict__.update(self.__dict__)
        new.__dict__.update(changes)
        return new

    def without_output(self) -> JobRow:
        """The row as follow-up specs see it: a job must not read another job's output."""
        return dataclasses.replace(self, output=None)

    def to_json(self) -> dict[str, Any]:
        """A JSON-ready dict (``--json`` output)."""
        out: dict[str, Any] = {}
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if isinstance(value, datetime):
                value = value.isoformat()
            elif isinstance(value, uuid.UUID):
                value = str(value)
            elif isinstance(value, bytes):
                value = value.hex()
            elif f.name == "unique_states" and value is not None:
                value = [str(s) for s in value]
            elif isinstance(value, JobState):
                value = str(value)
            out[f.name] = value
        return out


JOB_ROW_FIELDS: tuple[str, ...] = tuple(f.name for f in dataclasses.fields(JobRow))
JOB_COLUMNS = ", ".join(f"j.{name}" for name in JOB_ROW_FIELDS)  # for RETURNING in field order

INSERTED_COLUMNS = ("id", "state", "run_at", "created_at")
"""What an insert returns for :meth:`JobRow.inserted`, in order: the values the server chose."""

# The columns of a row that has never run, as the table's defaults leave them (errors, a
# list, is made afresh per row).
_NEVER_RUN: dict[str, Any] = {
    "attempt": 0,
    "run_lease": 0,
    "heartbeat_at": None,
    "deadline_at": None,
    "callback_id": None,
    "callback_timeout_at": None,
    "callback_result": None,
    "output": None,
    "attempted_at": None,
    "finalized_at": None,
    "progress": None,
    "attempted_by": None,
}


@dataclass(frozen=True)
class PreparedJob:
    """A validated insert: every column value ready for SQL."""

    kind: str
    queue: str
    args_json: str
    priority: int
    max_attempts: int
    run_at: datetime | None
    deadline_duration: float | None
    metadata_json: str
    tags: list[str]
    unique_key: bytes | None
    unique_states: list[str] | None
    ordering_key: str | None
    concurrency_key: str | None = None

    @property
    def state(self) -> str:
        return "scheduled" if self.run_at is not None else "available"

    def serialized_size(self) -> int:
        """Bytes counted against the staging limit (kind, queue, args, metadata, tags, ordering key)."""
        parts = [self.kind, self.queue, self.args_json, self.metadata_json, *self.tags]
        if self.ordering_key:
            parts.append(self.ordering_key)
        return sum(len(p.encode()) for p in parts)


# Names that moved to awa_cli.enqueue, which imports this module: loaded on first use so
# that either module can be imported first.
_MOVED_TO_ENQUEUE = frozenset(
    {
        "DEFAULT_MAX_ATTEMPTS",
        "DEFAULT_PRIORITY",
        "DEFAULT_QUEUE",
        "DEFAULT_UNIQUE_STATES",
        "INSERT_OPTION_NAMES",
        "MAX_NAME_LENGTH",
        "MAX_TAGS",
        "EnqueueRequest",
        "InsertOpts",
        "UniqueOpts",
        "prepare",
        "prepare_many",
        "unique_key",
    }
)


def parse_callback_id(value: Any) -> uuid.UUID:
    """A callback id as a UUID; anything else is a ValidationError naming ``callback_id``
    (pure, so the CLI can refuse a malformed id before it connects)."""
    if isinstance(value, uuid.UUID):
        return value
    try:
        return uuid.UUID(str(value).strip())
    except (ValueError, AttributeError, TypeError):
        raise ValidationError(
            "callback_id", f"not a valid callback id: {str(value)[:80]!r}"
        ) from None


def __getattr__(name: str) -> Any:
    if name in _MOVED_TO_ENQUEUE:
        from awa_cli import enqueue

        return getattr(enqueue, name)
    raise AttributeError(f"module 'awa_cli.jobs' has no attribute {name!r}")


__all__ = [
    "DEFAULT_MAX_ATTEMPTS",
    "DEFAULT_PRIORITY",
    "DEFAULT_QUEUE",
    "DEFAULT_UNIQUE_STATES",
    "INSERT_OPTION_NAMES",
    "JOB_COLUMNS",
    "JOB_ROW_FIELDS",
    "MAX_NAME_LENGTH",
    "MAX_TAGS",
    "CallbackToken",
    "EnqueueRequest",
    "InsertOpts",
    "JobRow",
    "JobState",
    "PreparedJob",
    "UniqueOpts",
    "args_json_of",
    "args_to_dict",
    "kind_for",
    "prepare",
    "prepare_many",
    "rebuild_args",
    "to_json",
    "unique_key",
]
