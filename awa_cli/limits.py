"""Concurrency keys and rate limits (architecture §13): the ``[limits.NAME]`` model, pure.

A :class:`Limit` selects jobs by ``kind`` or by ``queue``; each selected job has a key (its
explicit ``concurrency_key``, else the one ``key`` computes: a dotted path into the args,
the kind or the queue) and at most ``max_running`` jobs of one key run at once across the
fleet; with ``rate``, at most ``rate_count`` attempts of one key start in any span of
``rate_window`` seconds. A job selected by a kind limit is not also under its queue's limit:
the kind limit is the more specific one.

:class:`ClaimPlan` is what one queue's claim needs: the limits that can select its jobs and
its priority aging, turned into the array parameters of the ``claim_limited_*`` statements
(``awa_cli/db/sql/claim_limits.sql``).

From outside the claim: :func:`wait_reason` says why a runnable job is not running (from the
``limit_explain`` row that ``db/limits.py:explain`` reads), and :class:`LimitGauges` holds the
leader's last count of jobs waiting on each limit for a metrics plugin.
"""

from __future__ import annotations

import dataclasses
import difflib
import functools
import hashlib
import inspect
import json
import re
import time
import types
import typing
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any

from awa_cli.durations import format_duration, parse_duration
from awa_cli.errors import ConfigError

if TYPE_CHECKING:
    from awa_cli.app import App

MAX_CONCURRENCY_KEY_LENGTH = 200
MAX_RATE_WINDOW = 86_400.0  # a day: the leader prunes starts older than this
# The first key of the two-int advisory lock a claim takes per (limit, key): 'awa' in ASCII.
# The two-int form never collides with the one-bigint locks awa takes elsewhere.
LIMIT_LOCK_CLASS = 0x617761
# Workers joining the fleet (the limits check and the announcement) take (this, 0): 'awb'.
FLEET_LOCK_CLASS = 0x617762

# How often a limited queue's claims look for jobs inserted since their last look (seconds),
# how long one full candidates scan serves them at most, and how many candidates it keeps.
CANDIDATES_MAX_AGE = 0.5
CANDIDATES_FULL_MAX_AGE = 5.0
CANDIDATES_PER_SCAN = 2000

_PATH_PART = re.compile(r"[A-Za-z0-9_-]+")
_RATE = re.compile(r"\s*(\d+)\s*/\s*(\S+)\s*")


@dataclass(frozen=True)
class Limit:
    """One ``[limits.NAME]`` table."""

    name: str
    key: str  # "args.<dotted path>", "kind" or "queue"
    max_running: int
    kind: str | None = None
    queue: str | None = None
    rate_count: int | None = None
    rate_window: float | None = None  # seconds

    @property
    def key_path(self) -> tuple[str, ...]:
        """The args path of an ``args.`` key; () for "kind" and "queue"."""
        return tuple(self.key.split(".")[1:]) if self.key.startswith("args.") else ()

    @property
    def rate(self) -> str | None:
        if self.rate_count is None or self.rate_window is None:
            return None
        return f"{self.rate_count}/{format_duration(self.rate_window)}"

    def selects(self, kind: str, queue: str) -> bool:
        return self.kind == kind if self.kind is not None else self.queue == queue

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "kind": self.kind,
            "queue": self.queue,
            "key": self.key,
            "max_running": self.max_running,
            "rate": self.rate,
        }


def parse_key(value: Any, field: str) -> str:
    """``"kind"``, ``"queue"`` or ``"args.<dotted path>"`` (each part letters, digits, _ or -)."""
    if isinstance(value, str):
        if value in ("kind", "queue"):
            return value
        parts = value.split(".")
        if (
            len(parts) >= 2
            and parts[0] == "args"
            and all(_PATH_PART.fullmatch(p) for p in parts[1:])
        ):
            return value
    raise ConfigError(
        f'{field}: expected "args.<dotted path>", "kind" or "queue", got {value!r}', key=field
    )


def parse_rate(value: Any, field: str) -> tuple[int, float]:
    """``"N/DURATION"`` such as ``"100/1m"``: (N, seconds); N ≥ 1, 0 < DURATION ≤ 1 day."""
    match = _RATE.fullmatch(value) if isinstance(value, str) else None
    if match is None or int(match.group(1)) < 1:
        raise ConfigError(f'{field}: expected "N/DURATION" like "100/1m", got {value!r}', key=field)
    try:
        window = parse_duration(match.group(2), field)
    except ConfigError:
        raise ConfigError(
            f'{field}: expected "N/DURATION" like "100/1m", got {value!r}', key=field
        ) from None
    if not 0 < window <= MAX_RATE_WINDOW:
        raise ConfigError(f"{field}: the window must be more than 0 and at most 1d", key=field)
    return int(match.group(1)), window


def check_limits(limits: Iterable[Limit]) -> None:
    """Two limits may not select the same kind, or the same queue."""
    seen: dict[tuple[str, str], str] = {}
    for limit in limits:
        selector = ("kind", limit.kind) if limit.kind is not None else ("queue", limit.queue or "")
        other = seen.setdefault(selector, limit.name)
        if other != limit.name:
            key = f"[limits.{limit.name}] {selector[0]}"
            raise ConfigError(
                f"{key}: {selector[1]!r} is already limited by [limits.{other}]", key=key
            )


def limit_for(limits: Iterable[Limit], kind: str, queue: str) -> Limit | None:
    """The limit that selects a job of ``kind`` in ``queue``: its kind's, else its queue's."""
    by_queue = None
    for limit in limits:
        if limit.kind is not None and limit.kind == kind:
            return limit
        if limit.kind is None and limit.queue == queue:
            by_queue = limit
    return by_queue


# --- one set of limits for the fleet -----------------------------------------------------------


def limits_digest(limits: Iterable[Limit]) -> str:
    """A short digest of a set of limits (order does not matter): equal digests, equal
    limits. Each worker records the digest it enforces (``awa.workers.limits_digest``)."""
    canonical = json.dumps(
        sorted((lim.to_json() for lim in limits), key=lambda d: str(d["name"])), sort_keys=True
    )
    return hashlib.sha256(canonical.encode()).hexdigest()[:16]


def limits_diff(mine: Iterable[Limit], fleet: Iterable[Limit]) -> list[str]:
    """How ``mine`` differs from ``fleet``, one phrase per difference, by limit name."""
    ours = {lim.name: lim.to_json() for lim in mine}
    theirs = {lim.name: lim.to_json() for lim in fleet}
    out: list[str] = []
    for name in sorted(ours.keys() | theirs.keys()):
        if name not in theirs:
            out.append(f"[limits.{name}] only in this worker's config")
        elif name not in ours:
            out.append(f"[limits.{name}] only in the fleet's limits")
        else:
            for field in ("kind", "queue", "key", "max_running", "rate"):
                if ours[name][field] != theirs[name][field]:
                    out.append(
                        f"[limits.{name}] {field}: fleet {_shown(theirs[name][field])}, "
                        f"this worker {_shown(ours[name][field])}"
                    )
    return out


def _shown(value: Any) -> str:
    return "(not set)" if value is None else repr(value) if isinstance(value, str) else str(value)


# --- checked against the loaded app ---------------------------------------------------------


def validate_limits(
    limits: Iterable[Limit], app: App, queues: Iterable[str] = ()
) -> list[ConfigError]:
    """What is wrong with ``limits`` for ``app`` (empty: nothing), one error per problem,
    each naming its key: the kind is registered (or the queue is one of ``queues``, the
    app's task queues and ``default``), the ``args.`` path exists in the kind's args type
    (dataclass, pydantic model or constructor fields; a dict-args kind accepts any path),
    ``max_running`` ≥ 1 and the rate is sane. ``awa config check`` and the worker's start
    both call it and exit 2 on any error (architecture §13)."""
    known_queues = {"default", *queues, *(t.queue for t in app.tasks.values() if t.queue)}
    errors: list[ConfigError] = []
    for limit in limits:
        label = f"[limits.{limit.name}]"
        if limit.max_running < 1:
            errors.append(
                _error(f"{label} max_running", f"must be at least 1, got {limit.max_running}")
            )
        if limit.rate_count is not None and (
            limit.rate_count < 1 or not 0 < (limit.rate_window or 0) <= MAX_RATE_WINDOW
        ):
            errors.append(
                _error(f"{label} rate", f"expected N ≥ 1 per 0 < window ≤ 1d, got {limit.rate!r}")
            )
        if limit.kind is not None:
            if limit.kind not in app.tasks:
                errors.append(_unknown(f"{label} kind", "kind", limit.kind, app.tasks))
                continue
            types_ = [(limit.kind, app.tasks[limit.kind].args_type)]
        else:
            queue = limit.queue or ""
            if queue not in known_queues:
                errors.append(_unknown(f"{label} queue", "queue", queue, known_queues))
                continue
            # the typed kinds registered on the queue; the path must be in one at least
            types_ = [(t.kind, t.args_type) for t in app.tasks.values() if t.queue == queue]
        path = limit.key_path
        typed = [(kind, t) for kind, t in types_ if t is not None and t is not dict]
        if path and typed and not any(_has_path(t, path) for _, t in typed):
            kinds = ", ".join(f"{kind} ({t.__name__})" for kind, t in typed)
            errors.append(
                _error(f"{label} key", f"{limit.key!r} is not a field path of the args of {kinds}")
            )
    return errors


def _error(key: str, problem: str) -> ConfigError:
    return ConfigError(f"{key}: {problem}", key=key)


def _unknown(key: str, what: str, value: str, known: Iterable[str]) -> ConfigError:
    near = difflib.get_close_matches(value, sorted(known), n=1)
    hint = f" (did you mean {near[0]!r}?)" if near else ""
    return _error(key, f"no {what} named {value!r} in the app{hint}")


def _has_path(args_type: Any, path: Sequence[str]) -> bool:
    """Whether ``path`` names a field (and sub-fields) of ``args_type``; a part whose type
    says nothing of its fields (a dict, Any, a union) accepts the rest of the path."""
    if not path:
        return True
    fields = _fields(args_type)
    if fields is None:
        return True
    if path[0] not in fields:
        return False
    return _has_path(fields[path[0]], path[1:])


def _fields(args_type: Any) -> dict[str, Any] | None:
    """A type's field names (pydantic aliases too) and their types; None: unknown (any)."""
    args_type = _unwrap_optional(args_type)
    if not isinstance(args_type, type) or args_type is dict:
        return None
    model_fields = getattr(args_type, "model_fields", None)
    if isinstance(model_fields, dict):
        out: dict[str, Any] = {}
        for name, info in model_fields.items():
            annotation = getattr(info, "annotation", None)
            out[name] = annotation
            alias = getattr(info, "alias", None)
            if isinstance(alias, str):
                out[alias] = annotation
        return out
    if dataclasses.is_dataclass(args_type):
        try:
            hints = typing.get_type_hints(args_type)
        except Exception:  # unresolvable annotations: names only
            hints = {}
        return {f.name: hints.get(f.name) for f in dataclasses.fields(args_type)}
    try:
        params = inspect.signature(args_type).parameters.values()
    except (TypeError, ValueError):
        return None
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params):
        return None
    return {p.name: None for p in params if p.kind is not inspect.Parameter.VAR_POSITIONAL}


def _unwrap_optional(tp: Any) -> Any:
    """``X | None`` → ``X``; anything else as it is."""
    if typing.get_origin(tp) in (typing.Union, types.UnionType):
        rest = [a for a in typing.get_args(tp) if a is not type(None)]
        return rest[0] if len(rest) == 1 else None
    return tp


def args_have_path(args: Any, path: Sequence[str]) -> bool:
    """Whether a job's args (a JSON object) hold a value at ``path``."""
    for part in path:
        if not isinstance(args, dict) or part not in args:
            return False
        args = args[part]
    return args is not None


def array_literal(values: Iterable[object]) -> str:
    """A PostgreSQL array literal of ``values`` (None: NULL; text quoted), for a parameter
    the statement casts (``%(x)s::text[]``): psycopg sends a str as it is, where a list goes
    through its per-element array dumper, which cost the limited claim a tenth of the
    worker's CPU per job. Numbers come out as ``str()`` writes them (floats round-trip)."""
    parts = []
    for value in values:
        if value is None:
            parts.append("NULL")
        elif isinstance(value, int | float):
            parts.append(str(value))
        else:
            text = str(value).replace("\\", "\\\\").replace('"', '\\"')
            parts.append(f'"{text}"')
    return "{" + ",".join(parts) + "}"


def _path_literal(path: Sequence[str]) -> str:
    """A text[] literal for ``args #>> path`` (parts are plain names: no quoting needed)."""
    return "{" + ",".join(path) + "}"


@dataclass(frozen=True)
class ClaimPlan:
    """What one queue's limit-aware claim needs: the limits that can select its jobs (every
    kind limit, and the queue's own) and its priority aging in seconds (0: none)."""

    limits: tuple[Limit, ...] = ()
    priority_aging: float = 0.0

    @classmethod
    def for_queue(
        cls, queue: str, limits: Iterable[Limit], priority_aging: float = 0.0
    ) -> ClaimPlan:
        chosen = tuple(lim for lim in limits if lim.kind is not None or lim.queue == queue)
        return cls(chosen, priority_aging)

    @property
    def needed(self) -> bool:
        """False: the plain claim does the same (no limit, no aging)."""
        return bool(self.limits) or self.priority_aging > 0

    @property
    def rated(self) -> bool:
        """Some limit of the plan has a ``rate``."""
        return any(lim.rate_count is not None for lim in self.limits)

    @functools.cached_property
    def params(self) -> dict[str, Any]:
        """The limit arrays shared by the ``claim_limited_*`` statements, as array literals
        (:func:`array_literal`), built once."""
        limits = self.limits
        return {
            "aging": self.priority_aging,
            "l_names": array_literal(lim.name for lim in limits),
            "l_kinds": array_literal(lim.kind for lim in limits),
            "l_queues": array_literal(lim.queue for lim in limits),
            "l_sources": array_literal(lim.key if not lim.key_path else "args" for lim in limits),
            "l_paths": array_literal(_path_literal(lim.key_path) for lim in limits),
            "l_max": array_literal(lim.max_running for lim in limits),
            "l_rate_n": array_literal(lim.rate_count for lim in limits),
            "l_rate_w": array_literal(lim.rate_window for lim in limits),
        }


Candidate = tuple[int, str | None, str | None, int]  # job id, limit name, key, rank


class Candidates:
    """One queue's ranked candidates, taken a chunk per claim until they run out.

    A full scan (``claim_limited_candidates``) ranks every runnable job of the queue, which
    costs as much as its backlog, so it runs only when the candidates ran out (or a claim
    came back short) or are ``full_max_age`` old (jobs that became due since, or were
    retried, wait at most that long to be ranked under a backlog). Every ``max_age`` in
    between, ``claim_limited_arrivals`` ranks only the jobs inserted since (a primary-key
    range above the ``watermark``), and :meth:`merge` puts them after their key's cached
    candidates: a new key's first job goes to the front within ``max_age``. The take
    re-checks each candidate (state, counts, rate) under the key locks, so a candidate that
    went stale is only skipped, never wrongly claimed.
    """

    def __init__(
        self, max_age: float = CANDIDATES_MAX_AGE, full_max_age: float = CANDIDATES_FULL_MAX_AGE
    ) -> None:
        self.max_age = max_age
        self.full_max_age = full_max_age
        self._rows: list[Candidate] = []
        self._scanned_at = float("-inf")  # the last full scan
        self._looked_at = float("-inf")  # the last scan or look for arrivals
        self.watermark = 0  # the highest job id when the last look began

    def usable(self, now: float) -> bool:
        """Candidates left, and the last full scan is recent enough."""
        return bool(self._rows) and now - self._scanned_at <= self.full_max_age

    def stale_arrivals(self, now: float) -> bool:
        """Time to look for jobs inserted since the last look."""
        return now - self._looked_at > self.max_age

    def refill(self, rows: Sequence[Candidate], now: float, watermark: int = 0) -> None:
        self._rows = list(rows)
        self._scanned_at = self._looked_at = now
        self.watermark = watermark

    def merge(self, arrivals: Sequence[Candidate], now: float, watermark: int) -> None:
        """Jobs inserted since the last look, ranked among themselves per key: each goes
        after its key's cached candidates (its rank plus the key's highest cached rank), so
        round-robin holds across the cache and the arrivals; a new key's jobs rank from 1."""
        self._looked_at = now
        self.watermark = max(self.watermark, watermark)
        if not arrivals:
            return
        known = {c[0] for c in self._rows}
        top: dict[tuple[str | None, str | None], int] = {}
        for c in self._rows:
            top[(c[1], c[2])] = max(top.get((c[1], c[2]), 0), c[3])
        fresh = [
            (i, name, key, rank + (top.get((name, key), 0) if name is not None else 0))
            for i, name, key, rank in arrivals
            if i not in known
        ]
        # stable: the cached order is kept within a rank, the arrivals after it
        self._rows = sorted([*self._rows, *fresh], key=lambda c: c[3])

    def take(self, count: int) -> list[Candidate]:
        chunk, self._rows = self._rows[:count], self._rows[count:]
        return chunk

    def put_back(self, rows: Sequence[Candidate]) -> None:
        """Candidates a full claim did not need: first in line for the next one."""
        self._rows[:0] = rows

    def clear(self) -> None:
        self._rows = []


RUNNABLE = ("available", "scheduled", "retryable")


def _stamp(at: datetime) -> str:
    return at.isoformat(timespec="seconds")


def wait_reason(record: Mapping[str, Any], now: datetime) -> str | None:
    """The first thing keeping a runnable job from running, from a ``limit_explain`` row
    (None: nothing does; it waits for a free worker slot, or is not runnable at all)."""
    if record["state"] not in RUNNABLE:
        return None
    if record["run_at"] > now:
        return f"scheduled for {_stamp(record['run_at'])}"
    if record["paused"]:
        return "queue paused"
    name = record["limit_name"]
    if name is None:
        return None
    key = record["key"]
    if record["running"] >= record["max_running"]:
        return (
            f"key {key!r} of limit {name} at max_running "
            f"({record['running']}/{record['max_running']} running)"
        )
    if record["rate_count"] is not None and record["starts"] >= record["rate_count"]:
        until = record["rate_until"]
        return f"key {key!r} of limit {name} rate-limited until {_stamp(until)}"
    return None


class LimitGauges:
    """The leader's last counts of jobs waiting on each limit (``db/limits.py:waiting``), for a
    metrics plugin; stale (reported as nothing) after ``stale_after`` seconds without a new
    one: leadership moved elsewhere."""

    def __init__(self, stale_after: float = 60.0) -> None:
        self.stale_after = stale_after
        self.values: dict[str, int] = {}
        self.taken_at: float | None = None

    def update(self, snapshot: Mapping[str, int]) -> None:
        self.values = {name: 0 for name in self.values} | dict(snapshot)
        self.taken_at = time.monotonic()

    def current(self) -> dict[str, int]:
        if self.taken_at is None or time.monotonic() - self.taken_at > self.stale_after:
            return {}
        return dict(sorted(self.values.items()))


__all__ = [
    "FLEET_LOCK_CLASS",
    "LIMIT_LOCK_CLASS",
    "MAX_CONCURRENCY_KEY_LENGTH",
    "RUNNABLE",
    "Candidate",
    "Candidates",
    "ClaimPlan",
    "Limit",
    "LimitGauges",
    "args_have_path",
    "check_limits",
    "limit_for",
    "limits_diff",
    "limits_digest",
    "parse_key",
    "parse_rate",
    "validate_limits",
    "wait_reason",
]
