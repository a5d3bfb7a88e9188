"""What an insert may say and how it is checked: insert options, uniqueness, validation.

Pure: nothing here does I/O. The same validation runs for a plain insert, a follow-up
spec's request and a handler-staged follow-up, so a job that passes here is one
PostgreSQL will accept. :func:`prepare` turns args and :class:`InsertOpts` into a
:class:`~awa_cli.jobs.PreparedJob`, every column value ready for SQL.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta, UTC
from typing import Any, Self

from awa_cli.durations import seconds
from awa_cli.errors import ValidationError
from awa_cli.metadata import contribute
from awa_cli.jobs import JobState, PreparedJob
from awa_cli.jsonvalues import args_json_of, kind_for, to_json

MAX_NAME_LENGTH = 200
MAX_TAGS = 20
DEFAULT_PRIORITY = 2
DEFAULT_MAX_ATTEMPTS = 25
DEFAULT_QUEUE = "default"


DEFAULT_UNIQUE_STATES: frozenset[JobState] = frozenset(
    {
        JobState.SCHEDULED,
        JobState.AVAILABLE,
        JobState.RUNNING,
        JobState.RETRYABLE,
        JobState.COMPLETED,
    }
)


@dataclass(frozen=True)
class UniqueOpts:
    """Deduplication: which parts make the key, and in which states the key is held."""

    by_args: bool = True
    by_queue: bool = False
    by_period: float | int | timedelta | None = None
    states: frozenset[JobState] | Iterable[JobState | str] = DEFAULT_UNIQUE_STATES

    @classmethod
    def coerce(cls, value: UniqueOpts | Mapping[str, Any] | None) -> UniqueOpts | None:
        if value is None or isinstance(value, UniqueOpts):
            return value
        if isinstance(value, Mapping):
            unknown = set(value) - {f.name for f in dataclasses.fields(cls)}
            if unknown:
                raise ValidationError("unique_opts", f"unknown option {sorted(unknown)[0]!r}")
            return cls(**value)
        raise ValidationError("unique_opts", "expected UniqueOpts or a dict of its fields")

    def period_seconds(self) -> float | None:
        if self.by_period is None:
            return None
        period = seconds(self.by_period, "unique_opts.by_period")
        if period < MIN_UNIQUE_PERIOD:
            # A bucket is floor(epoch seconds / period): below a millisecond the bucket is
            # meaningless (every insert its own) and near 0 it overflows.
            raise ValidationError("unique_opts.by_period", "must be at least 0.001 seconds")
        return period

    def state_set(self) -> frozenset[JobState]:
        states = self.states
        if isinstance(states, (str, bytes)) or not isinstance(states, Iterable):
            raise ValidationError("unique_opts.states", "expected a set of job states")
        try:
            result = frozenset(JobState(s) for s in states)
        except ValueError as exc:
            raise ValidationError("unique_opts.states", str(exc)) from None
        if not result:
            raise ValidationError("unique_opts.states", "must name at least one state")
        return result


INSERT_OPTION_NAMES = (
    "kind",
    "queue",
    "priority",
    "max_attempts",
    "run_at",
    "deadline_duration",
    "metadata",
    "tags",
    "unique_opts",
    "ordering_key",
    "concurrency_key",
)


@dataclass(frozen=True)
class InsertOpts:
    """Insert options; ``None`` means "unset" (use the default)."""

    kind: str | None = None
    queue: str | None = None
    priority: int | None = None
    max_attempts: int | None = None
    run_at: datetime | None = None
    deadline_duration: float | int | timedelta | None = None
    metadata: Mapping[str, Any] | None = None
    tags: Iterable[str] | None = None
    unique_opts: UniqueOpts | Mapping[str, Any] | None = None
    ordering_key: str | None = None
    # the key of the job's [limits.NAME] (architecture §13), instead of the one the limit computes
    concurrency_key: str | None = None

    @classmethod
    def from_kwargs(cls, options: Mapping[str, Any]) -> InsertOpts:
        unknown = [name for name in options if name not in INSERT_OPTION_NAMES]
        if unknown:
            raise ValidationError(unknown[0], "unknown insert option")
        return cls(**options)


@dataclass
class EnqueueRequest:
    """A follow-up to enqueue: args plus options, built with chainable setters."""

    args: Any
    opts: InsertOpts = field(default_factory=InsertOpts)

    def _set(self, **changes: Any) -> Self:
        self.opts = dataclasses.replace(self.opts, **changes)
        return self

    def queue(self, name: str) -> Self:
        return self._set(queue=name)

    def priority(self, value: int) -> Self:
        return self._set(priority=value)

    def max_attempts(self, value: int) -> Self:
        return self._set(max_attempts=value)

    def unique(self, opts: UniqueOpts | Mapping[str, Any] | None = None) -> Self:
        return self._set(unique_opts=UniqueOpts() if opts is None else opts)

    def metadata(self, value: Mapping[str, Any]) -> Self:
        return self._set(metadata=value)

    def concurrency_key(self, value: str) -> Self:
        return self._set(concurrency_key=value)

    def with_opts(self, opts: InsertOpts) -> Self:
        """Replace every option, including ones set before this call."""
        self.opts = opts
        return self


def _check_name(value: Any, field_name: str) -> str:
    if not isinstance(value, str):
        raise ValidationError(field_name, f"expected a string, got {type(value).__name__}")
    if not value:
        raise ValidationError(field_name, "must not be empty")
    if len(value) > MAX_NAME_LENGTH:
        raise ValidationError(field_name, f"longer than {MAX_NAME_LENGTH} characters")
    if "\x00" in value:
        raise ValidationError(field_name, "contains a NUL character")
    return value


def check_name(value: Any, field_name: str) -> str:
    """A kind or queue name as inserts accept it (1-200 characters, no NUL), else
    :class:`ValidationError` naming ``field_name``; the one validator for every name."""
    return _check_name(value, field_name)


def positive_limit(limit: Any) -> int:
    """A listing's ``limit`` as the client methods accept it (a positive integer, not a bool),
    else :class:`ValidationError` naming ``limit``; the one check of an unbounded limit."""
    if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
        raise ValidationError("limit", "must be a positive integer")
    return limit


def _check_int(value: Any, field_name: str, low: int, high: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValidationError(field_name, f"expected an integer, got {type(value).__name__}")
    if not low <= value <= high:
        raise ValidationError(field_name, f"must be between {low} and {high}, got {value}")
    return value


def _check_run_at(value: Any) -> datetime:
    if not isinstance(value, datetime):
        raise ValidationError("run_at", f"expected a datetime, got {type(value).__name__}")
    if value.tzinfo is None:
        value = value.replace(tzinfo=UTC)
    try:
        utc: datetime = value.astimezone(UTC)
    except OverflowError:
        raise ValidationError("run_at", "outside the years 1-9999 in UTC") from None
    return utc


def _check_tags(value: Any) -> list[str]:
    if isinstance(value, (str, bytes)) or not isinstance(value, Iterable):
        raise ValidationError("tags", "expected a list of strings")
    tags = list(value)
    if len(tags) > MAX_TAGS:
        raise ValidationError("tags", f"more than {MAX_TAGS} tags ({len(tags)})")
    for tag in tags:
        if not isinstance(tag, str):
            raise ValidationError("tags", f"expected strings, got {type(tag).__name__}")
        if "\x00" in tag:
            raise ValidationError("tags", "contains a NUL character")
    return tags


MIN_UNIQUE_PERIOD = 0.001  # seconds: the smallest unique_opts.by_period


def _check_metadata(value: Any) -> dict[str, Any]:
    if not isinstance(value, Mapping):
        raise ValidationError("metadata", "expected a dict")
    result: dict[str, Any] = json.loads(to_json(dict(value), "metadata"))
    return result


def unique_key(kind: str, args: dict[str, Any], queue: str, opts: UniqueOpts, now: float) -> bytes:
    """The deduplication key: kind, plus canonical args, queue and time bucket as chosen."""
    period = opts.period_seconds()
    parts = {
        "kind": kind,
        "args": args if opts.by_args else None,
        "queue": queue if opts.by_queue else None,
        "bucket": int(now // period) if period else None,
    }
    canonical = json.dumps(parts, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).digest()


def prepare(
    args: Any,
    opts: InsertOpts,
    *,
    default_queue: str | None = None,
    now: float | None = None,
) -> PreparedJob:
    """Validate one insert. ``default_queue`` is the queue the kind was registered with."""
    if isinstance(args, EnqueueRequest):
        raise ValidationError("args", "pass EnqueueRequest.args and its options separately")
    kind = opts.kind if opts.kind is not None else _derived_kind(args)
    kind = _check_name(kind, "kind")
    queue = _check_name(
        opts.queue if opts.queue is not None else (default_queue or DEFAULT_QUEUE), "queue"
    )
    if isinstance(args, Mapping) and not isinstance(args, dict):
        args = dict(args)
    args_json = args_json_of(args)
    priority = _check_int(
        DEFAULT_PRIORITY if opts.priority is None else opts.priority, "priority", 1, 4
    )
    max_attempts = _check_int(
        DEFAULT_MAX_ATTEMPTS if opts.max_attempts is None else opts.max_attempts,
        "max_attempts",
        1,
        1000,
    )
    run_at = None if opts.run_at is None else _check_run_at(opts.run_at)
    deadline = (
        None
        if opts.deadline_duration is None
        else seconds(opts.deadline_duration, "deadline_duration")
    )
    metadata = _check_metadata({} if opts.metadata is None else opts.metadata)
    tags = _check_tags([] if opts.tags is None else opts.tags)
    ordering_key = opts.ordering_key
    if ordering_key is not None:
        ordering_key = _check_name(ordering_key, "ordering_key")
    concurrency_key = opts.concurrency_key
    if concurrency_key is not None:
        concurrency_key = _check_name(concurrency_key, "concurrency_key")
    unique = UniqueOpts.coerce(opts.unique_opts)
    key = states = None
    if unique is not None:
        data = json.loads(args_json)
        key = unique_key(kind, data, queue, unique, time.time() if now is None else now)
        states = sorted(str(s) for s in unique.state_set())
    return PreparedJob(
        kind=kind,
        queue=queue,
        args_json=args_json,
        priority=priority,
        max_attempts=max_attempts,
        run_at=run_at,
        deadline_duration=deadline,
        metadata_json=to_json(contribute(kind, queue, metadata), "metadata"),
        tags=tags,
        unique_key=key,
        unique_states=states,
        ordering_key=ordering_key,
        concurrency_key=concurrency_key,
    )


def prepare_many(
    args_list: Iterable[Any],
    opts: InsertOpts,
    *,
    queue_for_kind: Callable[[str], str | None] | None = None,
    kind_for_type: Callable[[type], str] | None = None,
) -> list[PreparedJob]:
    """Validate a bulk insert: the shared options once, then each row's kind and args."""
    prepared: list[PreparedJob] = []
    templates: dict[str, PreparedJob] = {}
    # The kind of each args class seen in this call (kind_for_type may scan the app's tasks);
    # never of dicts, whose kind is opts.kind.
    kinds: dict[type, str] = {}
    unique = UniqueOpts.coerce(opts.unique_opts) is not None
    now = time.time()
    for args in args_list:
        if opts.kind is not None:
            kind = opts.kind
        elif (known := kinds.get(type(args))) is not None:
            kind = known
        elif kind_for_type is not None and not isinstance(args, Mapping):
            kind = kinds[type(args)] = kind_for_type(type(args))
        else:
            kind = kinds[type(args)] = _derived_kind(args)
        template = templates.get(kind)
        if template is None or unique:  # the unique key depends on the args: validate fully
            default_queue = queue_for_kind(kind) if queue_for_kind is not None else None
            job = prepare(
                args, dataclasses.replace(opts, kind=kind), default_queue=default_queue, now=now
            )
            templates.setdefault(kind, job)
            prepared.append(job)
            continue
        job = object.__new__(
            PreparedJob
        )  # the template with this row's args (frozen: no replace())
        job.__dict__.update(template.__dict__)
        job.__dict__["args_json"] = args_json_of(dict(args) if isinstance(args, Mapping) else args)
        prepared.append(job)
    return prepared


def _derived_kind(args: Any) -> str:
    if isinstance(args, Mapping):
        raise ValidationError("kind", "required when args is a dict")
    return kind_for(type(args))
