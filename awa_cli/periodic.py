"""Periodic schedules: cron expressions, wall-clock time zones and catch-up (architecture §9). Pure.

Parsing and matching cron expressions is cronsim's; this module adds what a job queue needs on
top of it:

* **Wall-clock time zones.** cronsim is driven with *naive local* datetimes, so it does plain
  calendar arithmetic, and each local candidate is then placed on the UTC time line here: a
  local time that does not exist that day (spring forward) is skipped, and a local time that
  occurs twice (fall back) fires once, at its first occurrence (``fold=0``). cronsim's own
  time-zone mode follows Debian cron instead (a skipped ``30 2 * * *`` runs at 03:00, an hourly
  job runs twice in the repeated hour), which is why it is not used.
* **Catch-up** after downtime (:func:`due_fires`): ``latest`` (one job for the most recent
  missed fire time), ``all`` (each missed one, at most ``limit`` per sweep) or ``none``.

Time is always passed in (``after``, ``now``): nothing here reads the clock, so tests drive a
spring-forward night without sleeping. The one place that does read it is the :class:`Clock`
seam, which the maintenance leader takes as a parameter (``SYSTEM_CLOCK`` by default) and a
test replaces with a clock of its own.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from functools import lru_cache
from typing import Any, Final, Literal, Protocol
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from cronsim import CronSim, CronSimError

from awa_cli.enqueue import InsertOpts, UniqueOpts
from awa_cli.errors import ScheduleError

CatchUp = Literal["latest", "all", "none"]
CATCH_UP_POLICIES: Final = ("latest", "all", "none")

NAME_PATTERN: Final = re.compile(r"[A-Za-z0-9_.:-]{1,200}")

# The @-aliases and the 5-field expressions they stand for (cronsim has no aliases).
ALIASES: Final[Mapping[str, str]] = {
    "@yearly": "0 0 1 1 *",
    "@annually": "0 0 1 1 *",
    "@monthly": "0 0 1 * *",
    "@weekly": "0 0 * * 0",
    "@daily": "0 0 * * *",
    "@midnight": "0 0 * * *",
    "@hourly": "0 * * * *",
}

# The insert options a schedule may carry: ``run_at`` is the fire time, never an option.
SCHEDULE_OPTION_NAMES: Final = (
    "queue",
    "priority",
    "max_attempts",
    "deadline_duration",
    "metadata",
    "tags",
    "unique_opts",
    "ordering_key",
)

# A fire time older than this when a sweep sees it counts as *missed* (the fleet was down);
# younger ones are on time and always fire. It absorbs a slow sweep or a leader change.
DEFAULT_GRACE: Final = timedelta(seconds=60)
DEFAULT_LIMIT: Final = 100

# Job metadata that marks a periodic job (architecture §9).
META_PERIODIC: Final = "awa.periodic"
META_FIRE_AT: Final = "awa.fire_at"


class Clock(Protocol):
    """Where the maintenance leader gets the time: the seam tests replace."""

    def now(self) -> datetime:
        """The current time, timezone-aware (UTC)."""
        ...


class SystemClock:
    def now(self) -> datetime:
        return datetime.now(UTC)


SYSTEM_CLOCK: Final[Clock] = SystemClock()


@dataclass(frozen=True)
class Schedule:
    """One periodic job: what to enqueue (``kind``, ``args``, ``options``) and when.

    Constructing one validates ``name``, ``cron``, ``timezone`` and ``catch_up``
    (:class:`ScheduleError`). ``args`` is the job's args as a JSON-able dict and ``options``
    the insert options as JSON-able values (see :data:`SCHEDULE_OPTION_NAMES`);
    ``App.periodic`` fills both from validated input.
    """

    name: str
    cron: str
    kind: str
    args: dict[str, Any] = field(default_factory=dict)
    timezone: str = "UTC"
    catch_up: CatchUp = "latest"
    options: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        check_name(self.name)
        compiled_expression(self.name, self.cron)
        zone_of(self.name, self.timezone)
        if self.catch_up not in CATCH_UP_POLICIES:
            raise ScheduleError(
                self.name,
                "catch_up",
                f"expected one of {', '.join(CATCH_UP_POLICIES)}, got {self.catch_up!r}",
            )
        unknown = sorted(set(self.options) - set(SCHEDULE_OPTION_NAMES))
        if unknown:
            raise ScheduleError(self.name, unknown[0], "not an option of a periodic job")

    @property
    def zone(self) -> ZoneInfo:
        return zone_of(self.name, self.timezone)

    @property
    def expression(self) -> str:
        """The cron expression with an @-alias expanded."""
        return compiled_expression(self.name, self.cron)

    def definition(self) -> dict[str, Any]:
        """The JSON stored in ``awa.periodic_jobs.definition``."""
        return {
            "cron": self.cron,
            "timezone": self.timezone,
            "catch_up": self.catch_up,
            "kind": self.kind,
            "args": self.args,
            "options": self.options,
        }

    def definition_json(self) -> str:
        return json.dumps(self.definition(), sort_keys=True, separators=(",", ":"))

    @classmethod
    def from_definition(cls, name: str, definition: Mapping[str, Any]) -> Schedule:
        """The schedule stored under ``name`` (what the leader fires from)."""
        return cls(
            name=name,
            cron=definition["cron"],
            kind=definition["kind"],
            args=dict(definition.get("args") or {}),
            timezone=definition.get("timezone", "UTC"),
            catch_up=definition.get("catch_up", "latest"),
            options=dict(definition.get("options") or {}),
        )

    def insert_opts(self, fire_at: datetime) -> InsertOpts:
        """The options of the job for fire time ``fire_at``: ``run_at = fire_at`` and the
        ``awa.periodic`` / ``awa.fire_at`` metadata (over any metadata of the schedule's)."""
        options = dict(self.options)
        metadata = dict(options.pop("metadata", None) or {})
        metadata[META_PERIODIC] = self.name
        metadata[META_FIRE_AT] = iso_utc(fire_at)
        return InsertOpts(kind=self.kind, run_at=fire_at, metadata=metadata, **options)


def iso_utc(moment: datetime) -> str:
    """``2026-03-29T01:00:00Z``-style text of an aware datetime (microseconds kept if any)."""
    return _aware(moment).astimezone(UTC).isoformat().replace("+00:00", "Z")


def options_json(opts: InsertOpts) -> dict[str, Any]:
    """The set insert options of ``opts`` as JSON-able values, for :attr:`Schedule.options`
    (``kind`` and ``run_at`` are not options of a schedule and are left out)."""
    out: dict[str, Any] = {}
    for name in SCHEDULE_OPTION_NAMES:
        value = getattr(opts, name)
        if value is None:
            continue
        if name == "deadline_duration" and isinstance(value, timedelta):
            value = value.total_seconds()
        elif name == "tags":
            value = list(value)
        elif name == "metadata":
            value = dict(value)
        elif name == "unique_opts":
            value = _unique_json(UniqueOpts.coerce(value))
        out[name] = value
    result: dict[str, Any] = json.loads(json.dumps(out))
    return result


def _unique_json(opts: UniqueOpts | None) -> dict[str, Any]:
    assert opts is not None
    return {
        "by_args": opts.by_args,
        "by_queue": opts.by_queue,
        "by_period": opts.period_seconds(),
        "states": sorted(str(s) for s in opts.state_set()),
    }


# --- validation ------------------------------------------------------------------------------


def check_name(name: Any) -> str:
    if not isinstance(name, str) or not NAME_PATTERN.fullmatch(name):
        shown = name if isinstance(name, str) else type(name).__name__
        raise ScheduleError(
            str(shown)[:200], "name", "must be 1 to 200 of the characters A-Z a-z 0-9 _ . : -"
        )
    return name


@lru_cache(maxsize=4096)
def _compiled(cron: str) -> str | None:
    """The 5- or 6-field expression for ``cron``, or None when ``cron`` is no alias."""
    text = cron.strip()
    if text.startswith("@"):
        return ALIASES.get(text.lower())
    return " ".join(text.split())


def compiled_expression(schedule: str, cron: Any) -> str:
    """Validate ``cron`` (5 fields, 6 with leading seconds, or an @-alias) and return it with
    an alias expanded; :class:`ScheduleError` naming the schedule otherwise."""
    if not isinstance(cron, str):
        raise ScheduleError(schedule, "cron", f"expected a string, got {type(cron).__name__}")
    expression = _compiled(cron)
    if expression is None:
        known = " ".join(sorted(set(ALIASES)))
        raise ScheduleError(schedule, "cron", f"unknown alias {cron.strip()!r} (known: {known})")
    if len(expression.split()) not in (5, 6):
        raise ScheduleError(
            schedule,
            "cron",
            f"{cron!r}: expected 5 fields (minute hour day month weekday) "
            "or 6 with leading seconds",
        )
    _check_fires(schedule, cron, expression)
    return expression


@lru_cache(maxsize=4096)
def _fires_ever(expression: str) -> str | None:
    """None if ``expression`` parses and fires at least once; else cronsim's complaint."""
    try:
        next(CronSim(expression, datetime(2000, 1, 1)))
    except CronSimError as exc:
        return str(exc) or "invalid expression"
    except StopIteration:
        return "never fires"
    return None


def _check_fires(schedule: str, cron: str, expression: str) -> None:
    problem = _fires_ever(expression)
    if problem is not None:
        raise ScheduleError(schedule, "cron", f"{cron!r}: {problem}")


def zone_of(schedule: str, timezone: Any) -> ZoneInfo:
    """The IANA zone ``timezone``; :class:`ScheduleError` naming the schedule otherwise."""
    if not isinstance(timezone, str) or not timezone:
        raise ScheduleError(schedule, "timezone", f"expected an IANA zone name, got {timezone!r}")
    try:
        return ZoneInfo(timezone)
    except (ZoneInfoNotFoundError, ValueError, OSError):
        raise ScheduleError(
            schedule, "timezone", f"unknown time zone {timezone!r} (expected an IANA name)"
        ) from None


# --- fire times ------------------------------------------------------------------------------


def _aware(moment: datetime) -> datetime:
    if moment.tzinfo is None or moment.utcoffset() is None:
        raise ValueError(f"expected a timezone-aware datetime, got {moment!r}")
    return moment


def _instant(local: datetime, zone: ZoneInfo) -> datetime | None:
    """The UTC instant of the naive local time ``local``: its first occurrence when it occurs
    twice, None when it does not exist (it falls in a spring-forward gap)."""
    utc = local.replace(tzinfo=zone, fold=0).astimezone(UTC)
    if utc.astimezone(zone).replace(tzinfo=None) != local:
        return None
    return utc


def next_fire_after(schedule: Schedule, after: datetime) -> datetime | None:
    """The first fire time strictly after ``after`` (aware), in UTC; None if it never fires
    again (cronsim finds no match within 50 years)."""
    after = _aware(after).astimezone(UTC)
    zone = schedule.zone
    local = after.astimezone(zone).replace(tzinfo=None)
    try:
        for candidate in CronSim(schedule.expression, local):
            instant = _instant(candidate, zone)
            # Skipped: a local time in a gap; and, when ``after`` lies in the second pass of
            # a repeated hour, the local times whose first occurrence is already past.
            if instant is not None and instant > after:
                return instant
    except (StopIteration, OverflowError):
        return None
    return None


def latest_fire_at_or_before(schedule: Schedule, moment: datetime) -> datetime | None:
    """The last fire time at or before ``moment`` (aware), in UTC; None if there is none
    within 50 years."""
    moment = _aware(moment).astimezone(UTC)
    zone = schedule.zone
    local_aware = moment.astimezone(zone)
    local = local_aware.replace(tzinfo=None)
    if local_aware.fold:
        # In the second pass of a repeated hour, every local time of that hour has had its
        # first occurrence already: search back from the end of the repeated hour.
        first = local.replace(tzinfo=zone, fold=0).utcoffset()
        second = local.replace(tzinfo=zone, fold=1).utcoffset()
        if first is not None and second is not None and first > second:
            local += first - second
    start = local.replace(microsecond=0) + timedelta(seconds=1)
    try:
        for candidate in CronSim(schedule.expression, start, reverse=True):
            instant = _instant(candidate, zone)
            if instant is not None and instant <= moment:
                return instant
    except (StopIteration, OverflowError):
        return None
    return None


@dataclass(frozen=True)
class DueFires:
    """What a sweep at ``now`` must do for one schedule.

    ``fires``: the fire times to enqueue, oldest first (one job each); ``next_fire_at``: when
    the schedule is next due (None: never again). It is in the past when ``limit`` cut the
    list short, so the next sweep goes on at once; ``last_fire_at`` becomes ``fires[-1]``.
    """

    fires: tuple[datetime, ...]
    next_fire_at: datetime | None


def due_fires(
    schedule: Schedule,
    last_fire_at: datetime | None,
    created_at: datetime,
    now: datetime,
    limit: int = DEFAULT_LIMIT,
    *,
    grace: timedelta = DEFAULT_GRACE,
) -> DueFires:
    """The fire times due at ``now``, after the schedule's last fire and never before it first
    existed (``created_at``; the leader passes the row's ``active_since``, which a resume or a
    new cron or timezone moves on too), by its catch-up policy.

    A fire time up to ``grace`` old is on time and always fires; older ones were missed:
    ``all`` fires each, ``latest`` only the most recent missed one, ``none`` none of them. At
    most ``limit`` fire times are returned.
    """
    if limit < 1:
        raise ValueError("limit must be at least 1")
    now = _aware(now).astimezone(UTC)
    lower = _aware(created_at).astimezone(UTC)
    if last_fire_at is not None:
        lower = max(lower, _aware(last_fire_at).astimezone(UTC))
    fires: list[datetime] = []
    start = lower
    if schedule.catch_up != "all":
        cutoff = now - grace
        if schedule.catch_up == "latest" and cutoff > lower:
            missed = latest_fire_at_or_before(schedule, cutoff)
            if missed is not None and missed > lower:
                fires.append(missed)
        start = max(lower, cutoff)
    moment = start
    while len(fires) < limit:
        following = next_fire_after(schedule, moment)
        if following is None or following > now:
            return DueFires(tuple(fires), following)
        fires.append(following)
        moment = following
    # Cut short by ``limit``: the next fire time is already due, and the next sweep goes on.
    return DueFires(tuple(fires), next_fire_after(schedule, fires[-1]))


# --- one sweep -------------------------------------------------------------------------------

# How long a schedule whose stored definition no longer validates waits before it is looked at
# again (it is logged each time; a worker upserting a good definition fixes it).
INVALID_RETRY: Final = timedelta(minutes=1)


@dataclass(frozen=True)
class DueRow:
    """A row of ``periodic_due``: what the sweep needs of one locked schedule."""

    name: str
    definition: Mapping[str, Any]
    active_since: datetime  # no fire time before it: creation, last resume or cron change
    last_fire_at: datetime | None


@dataclass(frozen=True)
class SweepPlan:
    """What one sweep writes, in its one transaction: the jobs of ``fires`` (``periodic_fire``),
    then each swept schedule's ``advances`` (``periodic_advance``: name -> (last_fire_at or
    None to keep it, next_fire_at)). ``invalid``: (name, error) of stored definitions that do not
    validate; they are advanced by :data:`INVALID_RETRY` and fire nothing."""

    fires: tuple[tuple[Schedule, datetime], ...]
    advances: Mapping[str, tuple[datetime | None, datetime | None]]
    invalid: tuple[tuple[str, str], ...] = ()


def plan_sweep(
    rows: Sequence[DueRow],
    now: datetime,
    *,
    limit: int = DEFAULT_LIMIT,
    grace: timedelta = DEFAULT_GRACE,
) -> SweepPlan:
    """The fire times of every due row at ``now`` (the database's clock, so that every leader
    agrees), each schedule by its own catch-up policy and at most ``limit`` fire times each."""
    fires: list[tuple[Schedule, datetime]] = []
    advances: dict[str, tuple[datetime | None, datetime | None]] = {}
    invalid: list[tuple[str, str]] = []
    for row in rows:
        try:
            schedule = Schedule.from_definition(row.name, row.definition)
        except (ValueError, KeyError, TypeError) as exc:  # ValidationError is a ValueError
            invalid.append((row.name, f"stored definition is invalid: {exc}"))
            advances[row.name] = (None, now + INVALID_RETRY)
            continue
        due = due_fires(schedule, row.last_fire_at, row.active_since, now, limit, grace=grace)
        fires += [(schedule, fire_at) for fire_at in due.fires]
        advances[row.name] = (due.fires[-1] if due.fires else None, due.next_fire_at)
    return SweepPlan(tuple(fires), advances, tuple(invalid))


# --- what `awa cron list` and Client.list_periodic show --------------------------------------


def _shown_next_fire(record: Mapping[str, Any]) -> datetime | None:
    """The next fire time as an operator reads it. A resume stores ``next_fire_at`` =
    ``active_since`` = now, so the leader picks the schedule up at once; until it has, the
    real next fire time (the first after the resume) is computed here instead of showing
    "now"."""
    stored: datetime | None = record.get("next_fire_at")
    since: datetime | None = record.get("active_since")
    if stored is None or since is None or stored > since:
        return stored
    try:
        schedule = Schedule.from_definition(record["name"], record["definition"])
    except (ScheduleError, KeyError, TypeError, ValueError):
        return stored
    return next_fire_after(schedule, since) or stored


@dataclass(frozen=True)
class PeriodicJob:
    """One row of ``awa.periodic_jobs`` with the state of its last job (``periodic_list``).
    ``next_fire_at`` is None while paused (nothing will fire) and once it never fires again."""

    name: str
    cron: str
    timezone: str
    catch_up: str
    kind: str
    args: dict[str, Any]
    options: dict[str, Any]
    paused: bool
    created_at: datetime
    updated_at: datetime
    active_since: datetime
    last_fire_at: datetime | None
    next_fire_at: datetime | None
    last_job_id: int | None
    last_job_state: str | None  # None: no job yet, or it is gone (retention)

    @classmethod
    def from_record(cls, record: Mapping[str, Any]) -> PeriodicJob:
        definition = record["definition"]
        state = record.get("last_job_state")
        return cls(
            name=record["name"],
            cron=definition.get("cron", ""),
            timezone=definition.get("timezone", "UTC"),
            catch_up=definition.get("catch_up", "latest"),
            kind=definition.get("kind", ""),
            args=dict(definition.get("args") or {}),
            options=dict(definition.get("options") or {}),
            paused=record["paused"],
            created_at=record["created_at"],
            updated_at=record["updated_at"],
            active_since=record["active_since"],
            last_fire_at=record.get("last_fire_at"),
            next_fire_at=None if record.get("paused") else _shown_next_fire(record),
            last_job_id=record.get("last_job_id"),
            last_job_state=None if state is None else str(state),
        )

    def to_json(self) -> dict[str, Any]:
        """JSON-ready (``--json``): times as ISO 8601 UTC."""
        out: dict[str, Any] = {}
        for name, value in self.__dict__.items():
            out[name] = iso_utc(value) if isinstance(value, datetime) else value
        return out
