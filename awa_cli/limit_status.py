"""What the limits look like from outside the claim (architecture §13): the announced limits, why
an available job is not running, and the leader's count of jobs waiting on a limit.

The claim enforces each worker's own ``[limits.NAME]`` config; a worker also announces it in
``awa.limits`` at start (:func:`publish`), so a process without that config (``awa job
show``, a Client, the maintenance leader) can explain a waiting job (:func:`explain`) and
count the jobs waiting on each limit (:func:`waiting`, once per maintenance interval, for
the ``awa_limit_waiting_jobs`` gauge).
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping
from datetime import datetime
from typing import Any

import psycopg

from awa_cli.db import limits as limits_table
from awa_cli.limits import Limit

RUNNABLE = ("available", "scheduled", "retryable")


async def publish(conn: psycopg.AsyncConnection[Any], limits: Iterable[Limit]) -> None:
    """Replace ``awa.limits`` with ``limits`` (a worker joining the fleet, architecture §13)."""
    await limits_table.publish(conn, limits)


def _stamp(at: datetime) -> str:
    return at.isoformat(timespec="seconds")


def reason(record: dict[str, Any], now: datetime) -> str | None:
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


async def explain(conn: psycopg.AsyncConnection[Any], job_id: int) -> dict[str, Any] | None:
    """The ``limit_explain`` row of ``job_id`` plus its ``reason`` (None: no such job)."""
    out = await limits_table.explain(conn, job_id)
    if out is None:
        return None
    out["reason"] = reason(out, out.pop("now"))
    return out


class LimitGauges:
    """The leader's last :func:`waiting` counts, for a metrics plugin; stale (reported as
    nothing) after ``stale_after`` seconds without a new one: leadership moved elsewhere."""

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


async def waiting(conn: psycopg.AsyncConnection[Any]) -> dict[str, int]:
    """Per announced limit, the due available jobs whose key is at its limit."""
    return await limits_table.waiting(conn)
