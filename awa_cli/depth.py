"""Queue depth: the maintenance leader's periodic snapshot of every queue's backlog.

The leader takes one :func:`queue_depth` snapshot per interval and hands it to the plugins
(``awa_queue_depth``), so the Prometheus and OpenTelemetry gauges cost one query per
interval for the whole fleet, whatever the number of scrapes and workers. Queues that had a
backlog in an earlier snapshot and have none now are reported at zero, so a drained queue's
gauge falls to 0 instead of freezing at its last value.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import psycopg

from awa_cli.db import stats


@dataclass(frozen=True)
class QueueDepth:
    """One queue's backlog: available jobs and how long the oldest due one has waited."""

    queue: str
    available: int
    oldest_available_age: float | None  # seconds; None when none is due yet

    def to_json(self) -> dict[str, Any]:
        return {
            "queue": self.queue,
            "available": self.available,
            "oldest_available_age": self.oldest_available_age,
        }


async def queue_depth(conn: psycopg.AsyncConnection[Any]) -> list[QueueDepth]:
    """The current backlog of every queue with available jobs (one statement)."""
    rows = await stats.queue_depth(conn)
    return [QueueDepth(queue, int(available), age) for queue, available, age in rows]


async def report_depth(conn: psycopg.AsyncConnection[Any], plugins: Any) -> list[QueueDepth]:
    """The leader's step, once per maintenance interval: take the snapshot on ``conn`` and
    hand it to the plugins' ``awa_queue_depth`` (``plugins``: a PluginHost, or None)."""
    snapshot = await queue_depth(conn)
    if plugins is not None:
        await plugins.queue_depth(snapshot)
    return snapshot


@dataclass
class DepthGauges:
    """The last snapshot as gauge values, for a metrics plugin. Without a new snapshot for
    ``stale_after`` seconds (or three of the leader's intervals, if longer) it reports
    nothing: leadership moved to another process, which reports instead."""

    stale_after: float = 60.0
    values: dict[str, QueueDepth] = field(default_factory=dict)
    taken_at: float | None = None
    interval: float = 0.0  # the gap between the last two snapshots

    def update(self, snapshot: Iterable[QueueDepth]) -> None:
        fresh = {d.queue: d for d in snapshot}
        for queue in self.values.keys() - fresh.keys():  # drained since: report zero
            fresh[queue] = QueueDepth(queue, 0, None)
        now = time.monotonic()
        if self.taken_at is not None:
            self.interval = now - self.taken_at
        self.values = dict(sorted(fresh.items()))
        self.taken_at = now

    def current(self) -> list[QueueDepth]:
        if self.taken_at is None:
            return []
        if time.monotonic() - self.taken_at > max(self.stale_after, 3 * self.interval):
            return []
        return list(self.values.values())
