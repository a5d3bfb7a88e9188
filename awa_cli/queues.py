"""A queue's control state (architecture §10): the row model of ``awa.queues``. Pure: no I/O."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any


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


__all__ = ["QueueInfo"]
