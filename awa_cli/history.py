"""A job's history, answered from the job itself (architecture §11): the pure timeline model.

:class:`JobTimeline` is built from the row (its ``errors`` entries, ``attempted_at`` /
``attempted_by`` of the current attempt, ``finalized_at``, the callback, output and progress),
the follow-ups it produced (jobs whose metadata ``awa.trigger_id`` is its id) and the job that
produced it. ``AsyncClient.job_history`` reads those; ``awa job show`` prints
:meth:`JobTimeline.lines` and ``--json`` prints :meth:`JobTimeline.to_json`; the dashboard
renders the same data.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any

from awa_cli.events import RescueReason
from awa_cli.jobs import JobRow, JobState

if TYPE_CHECKING:
    from awa_cli.workflows import JobRelations

TRIGGER_KEY = "awa.trigger_id"
WAITS_KEY = "awa.waits"  # the callback waits that ended (written by the resolving statement)

RESCUE_MESSAGES = {
    "heartbeat stale: worker presumed dead": RescueReason.STALE_HEARTBEAT,
    "hard deadline exceeded": RescueReason.DEADLINE_EXCEEDED,
    "callback timed out": RescueReason.EXPIRED_CALLBACK,
}
"""The error entries a rescue writes (``outcomes/rescue.py``), and the reason each means."""


@dataclass(frozen=True)
class AttemptEntry:
    """One attempt: when it started and on which worker (when known), how it ended."""

    attempt: int
    outcome: str  # completed, retried, failed, cancelled, rescued, running, waiting_external, ...
    started_at: str | None = None
    worker: str | None = None
    ended_at: str | None = None
    error: str | None = None
    rescue_reason: str | None = None

    def to_json(self) -> dict[str, Any]:
        return dict(self.__dict__)


@dataclass(frozen=True)
class RelatedJob:
    """A job this one produced, or the one that produced it (``state`` None: pruned)."""

    id: int
    kind: str | None
    state: str | None

    def to_json(self) -> dict[str, Any]:
        return dict(self.__dict__)


@dataclass(frozen=True)
class JobTimeline:
    """What happened to one job: its attempts, callback wait, output, progress, follow-ups."""

    job: JobRow
    attempts: list[AttemptEntry]
    follow_ups: list[RelatedJob] = field(default_factory=list)
    trigger: RelatedJob | None = None

    @property
    def callback(self) -> dict[str, Any] | None:
        """The callback the job waits on now (None: it waits on none; a callback that was
        resolved is one of :attr:`callback_waits`, with no timeout left)."""
        if self.job.callback_id is None or self.job.callback_timeout_at is None:
            return None
        return {
            "id": str(self.job.callback_id),
            "timeout_at": _iso(self.job.callback_timeout_at),
            "waiting": self.job.state is JobState.WAITING_EXTERNAL,
        }

    @property
    def callback_waits(self) -> list[dict[str, Any]]:
        """Every callback wait that ended, oldest first: ``callback_id``, the ``attempt`` and
        the run that waited (``started_at``, ``worker``), how it ended (``resolved``:
        completed, failed, retried, resumed, timed out) and when (``at``). Kept in metadata
        ``awa.waits`` by the resolving statement, so a resumed job keeps its first run."""
        waits = self.job.metadata.get(WAITS_KEY)
        if not isinstance(waits, list):
            return []
        return [dict(w) for w in waits if isinstance(w, dict)]

    def to_json(self) -> dict[str, Any]:
        return {
            "id": self.job.id,
            "kind": self.job.kind,
            "state": str(self.job.state),
            "attempts": [a.to_json() for a in self.attempts],
            "callback": self.callback,
            "callback_waits": self.callback_waits,
            "output": self.job.output,
            "progress": self.job.progress,
            "follow_ups": [f.to_json() for f in self.follow_ups],
            "trigger": self.trigger.to_json() if self.trigger else None,
        }

    def lines(self) -> list[str]:
        """The timeline as text, one event a line (``awa job show``)."""
        out = [f"created  {_iso(self.job.created_at)}"]
        if self.trigger is not None:
            t = self.trigger
            out.append(f"produced by job {t.id} ({t.kind or '?'}, {t.state or 'pruned'})")
        for a in self.attempts:
            where = f" on {a.worker}" if a.worker else ""
            started = f" started {a.started_at}" if a.started_at else ""
            ended = f", ended {a.ended_at}" if a.ended_at else ""
            text = f"attempt {a.attempt}{started}{where}: {a.outcome}{ended}"
            if a.rescue_reason:
                text += f" (rescued: {a.rescue_reason})"
            if a.error:
                text += f": {a.error}"
            out.append(text)
        for w in self.callback_waits:
            run = f" (started {w['started_at']}" if w.get("started_at") else " ("
            run += f" on {w['worker']})" if w.get("worker") else ")"
            run = "" if run == " ()" else run.replace("( ", "(")
            out.append(
                f"callback {w.get('callback_id')}: attempt {w.get('attempt')}{run} waited, "
                f"{w.get('resolved')} {w.get('at')}"
            )
        callback = self.callback
        if callback is not None:
            out.append(f"callback {callback['id']} times out {callback['timeout_at']}")
        if self.job.progress is not None:
            out.append(f"progress {format_progress(self.job.progress)}")
        if self.job.output is not None:
            out.append(f"output   {json.dumps(self.job.output, sort_keys=True)}")
        out.extend(f"follow-up job {f.id} ({f.kind}, {f.state})" for f in self.follow_ups)
        return out


def format_progress(progress: dict[str, Any]) -> str:
    """``42% copying (checkpoint {"offset": 3})`` for terminal output."""
    text = f"{progress.get('percent')}%"
    if progress.get("message"):
        text += f" {progress['message']}"
    if progress.get("checkpoint"):
        text += f" (checkpoint {json.dumps(progress['checkpoint'], sort_keys=True)})"
    return text


def trigger_of(row: JobRow) -> int | None:
    """The id of the job whose outcome enqueued this one (metadata ``awa.trigger_id``)."""
    value = row.metadata.get(TRIGGER_KEY)
    try:
        return int(value) if value is not None else None
    except (TypeError, ValueError):
        return None


def timeline(
    row: JobRow, follow_ups: Iterable[RelatedJob] = (), trigger: RelatedJob | None = None
) -> JobTimeline:
    """The timeline of ``row``: one entry per attempt it made, from its error entries and,
    for the current attempt, its claim and finalisation timestamps."""
    by_attempt: dict[int, list[dict[str, Any]]] = {}
    for entry in row.errors:
        by_attempt.setdefault(int(entry.get("attempt") or 0), []).append(entry)
    attempts = [_attempt(row, n, by_attempt.get(n, ())) for n in range(1, max(row.attempt, 0) + 1)]
    # Entries numbered past the current attempt (an operator retry resets the count) last.
    attempts.extend(_attempt(row, n, by_attempt[n]) for n in sorted(by_attempt) if n > row.attempt)
    return JobTimeline(row, attempts, list(follow_ups), trigger)


def _attempt(row: JobRow, n: int, entries: Sequence[dict[str, Any]]) -> AttemptEntry:
    current = n == row.attempt
    last = entries[-1] if entries else None
    started = (last or {}).get("started_at") or (_iso(row.attempted_at) if current else None)
    worker = (last or {}).get("worker") or (row.attempted_by if current else None)
    if last is not None and not (current and not _failed_here(row, last)):
        message = str(last.get("error") or "")
        reason = RESCUE_MESSAGES.get(message)
        if reason is not None:
            outcome = "failed" if last.get("terminal") else "rescued"
        else:
            outcome = "failed" if last.get("terminal") else "retried"
        return AttemptEntry(
            n,
            outcome,
            started,
            worker,
            ended_at=last.get("at"),
            error=message or None,
            rescue_reason=str(reason) if reason else None,
        )
    return AttemptEntry(
        n,
        str(row.state),
        started,
        worker,
        ended_at=_iso(row.finalized_at) if row.state.is_terminal else None,
    )


def _failed_here(row: JobRow, entry: dict[str, Any]) -> bool:
    """True when the current attempt's error entry is what ended it: the job is retryable or
    failed now (a completed, cancelled or running job's current attempt has not failed)."""
    return row.state in (JobState.RETRYABLE, JobState.FAILED)


def _iso(value: datetime | None) -> str | None:
    return value.isoformat() if value is not None else None


def show_json(
    history: JobTimeline, status: dict[str, Any], relations: JobRelations | None = None
) -> dict[str, Any]:
    """``awa job show --json`` and ``GET /api/jobs/{id}``: the row, its place under the
    limits (``concurrency_key``, ``why_not_running``, ``limit``), ``timeline`` and its place
    in the graph (``parents``, ``children``, ``parent_count``, ``child_count``, ``workflow``,
    ``batch``: only for a job that has parents, children, a workflow or a batch, so a plain
    job's output is what it was before dependencies existed), from
    :meth:`AsyncClient.job_history`, :meth:`AsyncClient.limit_status` and
    :meth:`AsyncClient.job_relations`."""
    limit = None
    if status.get("limit_name") is not None:
        limit = {
            "name": status["limit_name"],
            "key": status["key"],
            "running": status["running"],
            "max_running": status["max_running"],
        }
    shown = {
        **history.job.to_json(),
        "concurrency_key": status.get("concurrency_key"),
        "why_not_running": status.get("reason"),
        "limit": limit,
        "timeline": history.to_json(),
    }
    if relations is not None and not relations.empty:
        shown.update(relations.to_json())
    return shown


def percent_of(progress: dict[str, Any] | None) -> float | None:
    """The progress's percent clamped to 0..100 (None: no number reported)."""
    value = (progress or {}).get("percent")
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(min(max(value, 0), 100))
