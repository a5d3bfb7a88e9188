"""The dead-letter queue's row model (architecture §10, §15.2): pure, no I/O.

A dead letter is a failed job moved out of ``awa.jobs`` into ``awa.dead_letters``: the row as
it was, under the same id, plus when and why it moved. Dead-lettering is a storage move, not a
new state: ``state`` stays ``failed``, and events, specs and metrics see a failed job.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from awa_cli.jobs import JOB_ROW_FIELDS, JobRow


class DeadReason(enum.StrEnum):
    """Why a job moved to the DLQ (the ``dead_reason`` column's check constraint)."""

    EXHAUSTED = "exhausted"  # a handler's error or RetryAfter on the last attempt
    TERMINAL_ERROR = "terminal_error"  # TerminalError, StagingError, args that do not rebuild
    RESCUED = (
        "rescued"  # a rescue (stale heartbeat, deadline, callback timeout) on the last attempt
    )
    CALLBACK_FAILED = "callback_failed"  # fail_external / a resolution that failed the job
    MANUAL = "manual"  # an operator's `awa dlq move` / Client.move_failed_to_dlq


@dataclass(frozen=True)
class DeadLetter(JobRow):
    """One row of ``awa.dead_letters``: every :class:`JobRow` field, ``dead_at`` and ``dead_reason``."""

    dead_at: datetime = field(kw_only=True)
    dead_reason: DeadReason = field(kw_only=True)

    @classmethod
    def from_record(cls, record: Mapping[str, Any]) -> DeadLetter:
        """Build from a ``SELECT *`` / ``RETURNING *`` record of ``awa.dead_letters``."""
        return cls._with(JobRow.from_record(record), record["dead_at"], record["dead_reason"])

    @classmethod
    def from_values(cls, values: Sequence[Any]) -> DeadLetter:
        """Build from values in ``DEAD_LETTER_FIELDS`` order."""
        *job, dead_at, dead_reason = values
        return cls._with(JobRow.from_values(job), dead_at, dead_reason)

    @classmethod
    def _with(cls, row: JobRow, dead_at: datetime, dead_reason: str) -> DeadLetter:
        dead = object.__new__(cls)  # frozen: fill the instance dict, as JobRow.from_values does
        dead.__dict__.update(row.__dict__)
        dead.__dict__.update(dead_at=dead_at, dead_reason=DeadReason(dead_reason))
        return dead

    def job_row(self) -> JobRow:
        """The job as it was in ``awa.jobs`` (for events and specs, which see a failed job)."""
        return JobRow.from_values([getattr(self, name) for name in JOB_ROW_FIELDS])

    def to_json(self) -> dict[str, Any]:
        out = super().to_json()
        out["dead_reason"] = str(self.dead_reason)
        return out


DEAD_LETTER_FIELDS: tuple[str, ...] = (*JOB_ROW_FIELDS, "dead_at", "dead_reason")


@dataclass(frozen=True)
class DlqDepth:
    """How many dead letters there are, in total and per queue (``awa dlq depth``)."""

    total: int
    queues: dict[str, int]

    @classmethod
    def from_rows(cls, rows: Iterable[Mapping[str, Any]]) -> DlqDepth:
        """From ``dead_letter_depth`` rows (``queue, n, is_total``)."""
        total, queues = 0, {}
        for row in rows:
            if row["is_total"]:
                total = int(row["n"])
            else:
                queues[str(row["queue"])] = int(row["n"])
        return cls(total=total, queues=queues)

    def to_json(self) -> dict[str, Any]:
        """The ``awa dlq depth --json`` shape: ``{"total": n, "queues": {name: n}}``."""
        return {"total": self.total, "queues": dict(self.queues)}


@dataclass(frozen=True)
class DeadLetterFilter:
    """Which dead letters a bulk retry, move or purge acts on (``id``: purge only)."""

    id: int | None = None
    queue: str | None = None
    kind: str | None = None
    older_than: float | None = None
    all: bool = False


__all__ = ["DEAD_LETTER_FIELDS", "DeadLetter", "DeadLetterFilter", "DeadReason", "DlqDepth"]
