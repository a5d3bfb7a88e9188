"""Batches (architecture §16): a group of jobs with callback jobs for when the group is done.

The pure model: :class:`Batch` (what a producer declares), :class:`BatchCounts` and
:class:`BatchRow` (what a batch is), :class:`JobBatch` (what a handler's ``job.batch`` says),
and the stored form of a callback job (:func:`spec_of`). The counting itself happens in the
database, in the statement that moves a member (``sql/0012_batches.sql``); the gateway is
``awa_cli/db/batches.py``.
"""

from __future__ import annotations

import dataclasses
import functools
import json
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal

from awa_cli.app import App, prepare_job
from awa_cli.enqueue import EnqueueRequest, InsertOpts
from awa_cli.errors import ValidationError
from awa_cli.jobs import PreparedJob

CALLBACKS: tuple[str, ...] = ("on_success", "on_complete", "on_death")
"""The callback names, in the order they are shown."""

BATCH_ID_KEY = "awa.batch_id"  # metadata of members and of callback jobs
BATCH_CALLBACK_KEY = "awa.batch_callback"  # metadata of a callback job: which one it is
BATCH_COUNTS_KEY = "awa.batch_counts"  # metadata of a callback job: the counts when it fired

DEFAULT_SHARDS = 16
MAX_SHARDS = 256

BatchState = Literal["open", "running", "completed"]

Prepare = Callable[[Any, InsertOpts], PreparedJob]


@dataclass(frozen=True)
class Batch:
    """A batch to open: each callback is an ordinary job (args, or an ``EnqueueRequest`` for
    options), any may be None. ``on_success`` runs once every member completed,
    ``on_complete`` once every member is terminal, ``on_death`` once the first member failed
    (or was dead-lettered), each exactly once and only after the batch is sealed.

    ``shards`` is how many counter rows the members' counts are spread over (1–256): more
    lets more workers finish members of one batch at the same moment without waiting on
    each other. ``metadata`` is stored on the batch (shown by ``awa batch show``).
    """

    on_success: Any = None
    on_complete: Any = None
    on_death: Any = None
    metadata: Mapping[str, Any] = field(default_factory=dict)
    shards: int = DEFAULT_SHARDS

    def __post_init__(self) -> None:
        if isinstance(self.shards, bool) or not isinstance(self.shards, int):
            raise ValidationError("shards", "must be an integer")
        if not 1 <= self.shards <= MAX_SHARDS:
            raise ValidationError("shards", f"must be between 1 and {MAX_SHARDS}")
        if not isinstance(self.metadata, Mapping):
            raise ValidationError("metadata", "must be a mapping")

    def callbacks(self) -> dict[str, Any]:
        """The callbacks that are set, by name."""
        named = {
            "on_success": self.on_success,
            "on_complete": self.on_complete,
            "on_death": self.on_death,
        }
        return {name: value for name, value in named.items() if value is not None}


def prepare_callback(name: str, value: Any, prepare: Prepare) -> PreparedJob:
    """Validate one callback (args or an ``EnqueueRequest``), naming it in the error."""
    if isinstance(value, EnqueueRequest):
        args, opts = value.args, value.opts
    else:
        args, opts = value, InsertOpts()
    try:
        return prepare(args, opts)
    except ValidationError as exc:
        raise ValidationError(f"{name}.{exc.field}", _reason(exc)) from None


def prepare_members(
    app: App | None,
    jobs: Iterable[Any],
    insert_options: Mapping[str, Any],
    prepare: Prepare | None = None,
) -> list[PreparedJob]:
    """Validate members: each args, or an ``EnqueueRequest`` (its own options win), for
    ``app`` (or by ``prepare``, a handler's own, which knows its worker's app)."""
    prepare = prepare or functools.partial(prepare_job, app)
    shared = InsertOpts.from_kwargs(dict(insert_options))
    prepared = []
    for index, item in enumerate(jobs):
        args, opts = (item.args, item.opts) if isinstance(item, EnqueueRequest) else (item, shared)
        try:
            prepared.append(prepare(args, opts))
        except ValidationError as exc:
            raise ValidationError(f"jobs[{index}].{exc.field}", _reason(exc)) from None
    return prepared


def prepare_batch(app: App | None, batch: Batch) -> dict[str, PreparedJob]:
    """The batch's callbacks, validated (``ValidationError`` names ``on_success.<field>``)."""
    prepare = functools.partial(prepare_job, app)
    return {
        name: prepare_callback(name, value, prepare) for name, value in batch.callbacks().items()
    }


def _reason(exc: ValidationError) -> str:
    text, prefix = str(exc), f"{exc.field}: "
    return text[len(prefix) :] if text.startswith(prefix) else text


def spec_of(job: PreparedJob) -> str:
    """The stored form of a callback job: a validated insert as JSON (read back by
    ``awa.batch_enqueue`` in SQL when the condition comes true)."""
    return json.dumps(
        {
            "kind": job.kind,
            "queue": job.queue,
            "args": json.loads(job.args_json),
            "priority": job.priority,
            "max_attempts": job.max_attempts,
            "run_at": job.run_at.isoformat() if job.run_at is not None else None,
            "deadline_duration": job.deadline_duration,
            "metadata": json.loads(job.metadata_json),
            "tags": list(job.tags),
            "unique_key": job.unique_key.hex() if job.unique_key is not None else None,
            "unique_states": job.unique_states,
            "ordering_key": job.ordering_key,
            "concurrency_key": job.concurrency_key,
        },
        separators=(",", ":"),
    )


def member_metadata(job: PreparedJob, batch_id: int) -> PreparedJob:
    """``job`` with its metadata naming its batch (the read-only mirror of ``batch_id``)."""
    metadata = json.loads(job.metadata_json)
    metadata[BATCH_ID_KEY] = batch_id
    return dataclasses.replace(job, metadata_json=json.dumps(metadata, separators=(",", ":")))


@dataclass(frozen=True)
class BatchCounts:
    """Members by outcome: ``pending`` (not yet terminal), ``completed``, ``failed`` (dead-
    lettered included), ``cancelled``; ``total`` is their sum."""

    pending: int = 0
    completed: int = 0
    failed: int = 0
    cancelled: int = 0

    @property
    def total(self) -> int:
        return self.pending + self.completed + self.failed + self.cancelled

    @property
    def done(self) -> int:
        return self.completed + self.failed + self.cancelled

    @property
    def percent(self) -> float:
        """Terminal members as a percentage of all members (100 for an empty batch)."""
        return 100.0 if self.total == 0 else round(100.0 * self.done / self.total, 1)

    @classmethod
    def from_json(cls, value: Mapping[str, Any] | None) -> BatchCounts:
        value = value or {}
        return cls(
            pending=int(value.get("pending", 0)),
            completed=int(value.get("completed", 0)),
            failed=int(value.get("failed", 0)),
            cancelled=int(value.get("cancelled", 0)),
        )

    def to_dict(self) -> dict[str, int]:
        return {
            "pending": self.pending,
            "completed": self.completed,
            "failed": self.failed,
            "cancelled": self.cancelled,
            "total": self.total,
        }


@dataclass(frozen=True)
class BatchRow:
    """A row of ``awa.batches`` with its counts.

    ``callbacks`` maps each set callback to its kind; ``callback_jobs`` to the id of the job
    enqueued for it (None until its condition came true, or when a held unique key skipped
    it). ``by_state`` (filled by ``get_batch``) counts the members still in ``awa.jobs`` by
    their exact state.
    """

    id: int
    counts: BatchCounts
    created_at: datetime
    sealed_at: datetime | None
    first_failed_at: datetime | None
    succeeded_at: datetime | None
    completed_at: datetime | None
    died_at: datetime | None
    callbacks: dict[str, str]
    callback_jobs: dict[str, int | None]
    metadata: dict[str, Any]
    shards: int
    by_state: dict[str, int] = field(default_factory=dict)

    @property
    def state(self) -> BatchState:
        """``open`` (members may still be added), ``running`` (sealed, members pending),
        ``completed`` (sealed, every member terminal)."""
        if self.sealed_at is None:
            return "open"
        return "completed" if self.completed_at is not None else "running"

    @property
    def succeeded(self) -> bool:
        return self.succeeded_at is not None

    @classmethod
    def from_record(cls, record: Mapping[str, Any]) -> BatchRow:
        callbacks = {}
        for name in CALLBACKS:
            spec = record.get(name)
            if spec is not None:
                spec = json.loads(spec) if isinstance(spec, str) else spec
                callbacks[name] = str(spec.get("kind"))
        return cls(
            id=int(record["id"]),
            counts=BatchCounts.from_json(record.get("counts")),
            created_at=record["created_at"],
            sealed_at=record.get("sealed_at"),
            first_failed_at=record.get("first_failed_at"),
            succeeded_at=record.get("succeeded_at"),
            completed_at=record.get("completed_at"),
            died_at=record.get("died_at"),
            callbacks=callbacks,
            callback_jobs={name: record.get(f"{name}_job_id") for name in callbacks},
            metadata=dict(record.get("metadata") or {}),
            shards=int(record.get("shards") or DEFAULT_SHARDS),
        )

    def to_dict(self) -> dict[str, Any]:
        """The JSON form (``--json``, the admin API)."""

        def at(value: datetime | None) -> str | None:
            return value.isoformat() if value is not None else None

        return {
            "id": self.id,
            "state": self.state,
            "succeeded": self.succeeded,
            "counts": self.counts.to_dict(),
            "percent": self.counts.percent,
            "by_state": dict(self.by_state),
            "created_at": at(self.created_at),
            "sealed_at": at(self.sealed_at),
            "first_failed_at": at(self.first_failed_at),
            "succeeded_at": at(self.succeeded_at),
            "completed_at": at(self.completed_at),
            "died_at": at(self.died_at),
            "callbacks": {
                name: {"kind": kind, "job_id": self.callback_jobs.get(name)}
                for name, kind in self.callbacks.items()
            },
            "metadata": self.metadata,
            "shards": self.shards,
        }


@dataclass(frozen=True)
class JobBatchInfo:
    """What a job's metadata says about its batch: the batch id, and for a callback job
    which callback it is and the counts when its condition came true."""

    id: int
    callback: str | None = None
    counts: BatchCounts | None = None

    @classmethod
    def from_metadata(cls, metadata: Mapping[str, Any]) -> JobBatchInfo | None:
        batch_id = metadata.get(BATCH_ID_KEY)
        if isinstance(batch_id, bool) or not isinstance(batch_id, int):
            return None
        callback = metadata.get(BATCH_CALLBACK_KEY)
        counts = metadata.get(BATCH_COUNTS_KEY)
        return cls(
            id=batch_id,
            callback=callback if isinstance(callback, str) else None,
            counts=BatchCounts.from_json(counts) if isinstance(counts, Mapping) else None,
        )


__all__ = [
    "BATCH_CALLBACK_KEY",
    "BATCH_COUNTS_KEY",
    "BATCH_ID_KEY",
    "CALLBACKS",
    "DEFAULT_SHARDS",
    "MAX_SHARDS",
    "Batch",
    "BatchCounts",
    "BatchRow",
    "BatchState",
    "JobBatchInfo",
    "member_metadata",
    "prepare_batch",
    "prepare_callback",
    "prepare_members",
    "spec_of",
]
