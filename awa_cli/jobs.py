"""The job model: states, rows, insert options, uniqueness, validation and kind names.

Pure: nothing here does I/O. The same validation runs for a plain insert, a follow-up
spec's request and a handler-staged follow-up, so a job that passes here is one
PostgreSQL will accept.
"""

from __future__ import annotations

import dataclasses
import enum
import hashlib
import json
import re
import time
import uuid
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta, UTC
from typing import Any, Self

from awa_cli.metadata import contribute
from awa_cli.results import ValidationError, seconds

MAX_NAME_LENGTH = 200
MAX_TAGS = 20
DEFAULT_PRIORITY = 2
DEFAULT_MAX_ATTEMPTS = 25
DEFAULT_QUEUE = "default"


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

    @property
    def is_terminal(self) -> bool:
        return self in (JobState.COMPLETED, JobState.FAILED, JobState.CANCELLED)


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
class CallbackToken:
    """What ``job.register_callback()`` returns: the id an external system resolves."""

    id: uuid.UUID
    job_id: int
    run_lease: int


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

    def evolve(self, **changes: Any) -> JobRow:
        """A copy with ``changes`` applied (a fast ``dataclasses.replace`` for hot paths)."""
        new = object.__new__(JobRow)
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
        if period <= 0:
            raise ValidationError("unique_opts.by_period", "must be greater than zero")
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

    def with_opts(self, opts: InsertOpts) -> Self:
        """Replace every option, including ones set before this call."""
        self.opts = opts
        return self


_ACRONYM_BOUNDARY = re.compile(r"([A-Z]+)([A-Z][a-z])")
_WORD_BOUNDARY = re.compile(r"([a-z0-9])([A-Z])")


_KINDS: dict[type, str] = {}


def kind_for(args_type: type) -> str:
    """Derive a kind from an args class name: ``SMTPEmail`` → ``smtp_email``."""
    kind = _KINDS.get(args_type)
    if kind is None:
        name = args_type.__name__
        kind = _WORD_BOUNDARY.sub(r"\1_\2", _ACRONYM_BOUNDARY.sub(r"\1_\2", name)).lower()
        if len(_KINDS) < 4096:  # classes made on the fly must not grow it without bound
            _KINDS[args_type] = kind
    return kind


def args_to_dict(args: Any, field_name: str = "args") -> dict[str, Any]:
    """Turn a dataclass, pydantic model or mapping into a JSON-ready dict."""
    if dataclasses.is_dataclass(args) and not isinstance(args, type):
        value: Any = dataclasses.asdict(args)
    elif hasattr(args, "model_dump") and not isinstance(args, type):
        value = args.model_dump(mode="json")
    elif isinstance(args, Mapping):
        value = dict(args)
    else:
        raise ValidationError(
            field_name, f"expected a dataclass, pydantic model or dict, got {type(args).__name__}"
        )
    result: dict[str, Any] = json.loads(to_json(value, field_name))
    return result


_FIELD_NAMES: dict[type, tuple[str, ...]] = {}


def args_json_of(args: Any, field_name: str = "args") -> str:
    """Args as compact JSON text; the same text ``to_json(args_to_dict(args))`` gives, faster
    (a dataclass's fields are taken shallowly; nested values go through the JSON default)."""
    kind = type(args)
    names = _FIELD_NAMES.get(kind)
    if names is None and dataclasses.is_dataclass(args) and not isinstance(args, type):
        names = _FIELD_NAMES[kind] = tuple(f.name for f in dataclasses.fields(args))
    if names is not None:
        value: Any = {name: getattr(args, name) for name in names}
    elif isinstance(args, dict):
        value = args
    else:
        value = args_to_dict(args, field_name)
    return to_json(value, field_name)


# json.dumps writes NUL as the escape \u0000; an escaped backslash followed by "u0000" (a
# literal backslash in the data) is not one, so count the backslashes before it.
_NUL_ESCAPE = re.compile(r"(?<!\\)(?:\\\\)*\\u0000")


def to_json(value: Any, field_name: str) -> str:
    """Serialise to compact JSON, naming the field when the value does not serialise."""
    try:
        text = _ENCODER.encode(value)
    except (TypeError, ValueError, RecursionError) as exc:
        raise ValidationError(field_name, f"not JSON-serialisable: {exc}") from None
    if "\\u0000" in text and _NUL_ESCAPE.search(text):
        raise ValidationError(field_name, "contains a NUL character")
    return text


def _json_default(value: Any) -> Any:
    if isinstance(value, datetime):
        return value.isoformat()
    if isinstance(value, uuid.UUID):
        return str(value)
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return dataclasses.asdict(value)
    if hasattr(value, "model_dump"):
        return value.model_dump(mode="json")
    raise TypeError(f"{type(value).__name__} is not JSON-serialisable")


_ENCODER = json.JSONEncoder(separators=(",", ":"), allow_nan=False, default=_json_default)


def rebuild_args(args_type: type | None, data: Mapping[str, Any]) -> Any:
    """Rebuild args as the registered type; raises on a mismatch."""
    if args_type is None or args_type is dict:
        return dict(data)
    if hasattr(args_type, "model_validate"):
        return args_type.model_validate(data)
    return args_type(**data)


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


def _check_metadata(value: Any) -> dict[str, Any]:
    if not isinstance(value, Mapping):
        raise ValidationError("metadata", "expected a dict")
    result: dict[str, Any] = json.loads(to_json(dict(value), "metadata"))
    return result


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

    @property
    def state(self) -> str:
        return "scheduled" if self.run_at is not None else "available"

    def serialized_size(self) -> int:
        """Bytes counted against the staging limit (kind, queue, args, metadata, tags, ordering key)."""
        parts = [self.kind, self.queue, self.args_json, self.metadata_json, *self.tags]
        if self.ordering_key:
            parts.append(self.ordering_key)
        return sum(len(p.encode()) for p in parts)


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
    )


def prepare_many(
    args_list: Iterable[Any],
    opts: InsertOpts,
    *,
    queue_for_kind: Any = None,
    kind_for_type: Any = None,
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
