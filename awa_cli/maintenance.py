"""Maintenance: leader election, rescue sweeps, rescue follow-ups and retention.

Every worker runs a :class:`Maintenance` loop; only the one holding the PostgreSQL advisory
lock (on a dedicated connection, so it dies with the process or the connection) sweeps.
``awa rescue run`` calls :func:`sweep_once` directly: the same code, one pass.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

import psycopg

from awa_cli import defaults
from awa_cli.db.retry import Backoff, first_line
from awa_cli.db.statements import SQL
from awa_cli.depth import QueueDepth, queue_depth
from awa_cli.events import RescueReason
from awa_cli.jobs import JobRow

if TYPE_CHECKING:
    from psycopg_pool import AsyncConnectionPool

    from awa_cli.outcomes import OutcomeCore

OnRescued = Callable[[list[JobRow]], None]
OnDepth = Callable[[list[QueueDepth]], Awaitable[None]]
"""Told of every committed rescue batch (a worker fences the attempts it still runs)."""


class MaintenanceTimings(Protocol):
    """The timings maintenance reads (``awa_cli.worker.runtime.Timings`` has them)."""

    @property
    def heartbeat_interval(self) -> float: ...
    @property
    def heartbeat_staleness(self) -> float: ...
    @property
    def rescue_interval(self) -> float: ...
    @property
    def leader_election_interval(self) -> float: ...
    @property
    def completed_retention(self) -> float: ...
    @property
    def failed_retention(self) -> float: ...


log = logging.getLogger("awa.maintenance")

LEADER_LOCK_KEY = 0x6177615F6C6472  # "awa_ldr"


@dataclass
class SweepReport:
    rescued: dict[str, list[JobRow]] = field(default_factory=dict)
    follow_ups_done: int = 0
    follow_ups_failed: int = 0
    pruned: int = 0
    dry_run: bool = False

    def to_json(self) -> dict[str, Any]:
        return {
            "dry_run": self.dry_run,
            "rescued": {reason: [r.id for r in rows] for reason, rows in self.rescued.items()},
            "rescue_follow_ups": {"done": self.follow_ups_done, "failed": self.follow_ups_failed},
            "pruned": self.pruned,
        }


async def sweep_once(
    core: OutcomeCore,
    *,
    heartbeat_staleness: float,
    completed_retention: float,
    failed_retention: float,
    dry_run: bool = False,
    on_rescued: OnRescued | None = None,
) -> SweepReport:
    """One pass: the three rescue sweeps, pending rescue follow-ups, then retention."""
    report = SweepReport(dry_run=dry_run)
    for reason in RescueReason:
        rows = await core.rescue(reason, staleness=heartbeat_staleness, dry_run=dry_run)
        report.rescued[str(reason)] = rows
        if rows and not dry_run:
            log.warning(
                "rescued %d jobs: %s",
                len(rows),
                reason,
                extra={"action": "rescued", "reason": str(reason), "jobs": [r.id for r in rows]},
            )
            if on_rescued is not None:
                on_rescued(rows)
    if dry_run:
        return report
    report.follow_ups_done, report.follow_ups_failed = await core.rescue_follow_ups()
    await core.flush_notifications()
    report.pruned = await core.prune(completed_retention, failed_retention)
    return report


class Maintenance:
    """The leader-elected maintenance loop inside a worker; ``on_rescued`` is told of every
    rescue batch it commits (the worker fences the rescued attempts it still runs)."""

    def __init__(
        self,
        dsn: str,
        pool: AsyncConnectionPool,
        core: OutcomeCore,
        timings: MaintenanceTimings,
        on_rescued: OnRescued | None = None,
        on_depth: OnDepth | None = None,
    ) -> None:
        self.dsn = dsn
        self.on_depth = on_depth
        self.pool = pool
        self.core = core
        self.timings = timings
        self.on_rescued = on_rescued
        self.is_leader = False
        self._worked = False  # a lock query succeeded on the current connection
        if timings.heartbeat_staleness < 3 * timings.heartbeat_interval:
            log.warning(
                "heartbeat_staleness (%ss) is below 3x heartbeat_interval (%ss): live jobs may be rescued",
                timings.heartbeat_staleness,
                timings.heartbeat_interval,
                extra={"action": "config_warning"},
            )

    async def run(self, stopping: asyncio.Event) -> None:
        """Elect, sweep, repeat until ``stopping``. Any database error is logged at ERROR
        and retried with backoff (DESIGN §15.7), capped at ``leader_election_interval``."""
        backoff = Backoff(cap=max(defaults.LOOP_BACKOFF_MIN, self.timings.leader_election_interval))
        while not stopping.is_set():
            try:
                async with await psycopg.AsyncConnection.connect(self.dsn, autocommit=True) as conn:
                    await self._lead_or_wait(conn, stopping)
            except asyncio.CancelledError:
                raise
            except (psycopg.Error, OSError) as exc:
                self.is_leader = False
                if self._worked:  # the connection did work before it failed: start over
                    backoff.reset()
                    self._worked = False
                delay = backoff.next()
                log.error(
                    "maintenance failed, reconnecting in %.1fs: %s",
                    delay,
                    first_line(exc),
                    extra={"action": "maintenance_reconnect", "retry_in": delay},
                )
                await _sleep_unless(stopping, delay)

    async def _lead_or_wait(
        self, conn: psycopg.AsyncConnection[Any], stopping: asyncio.Event
    ) -> None:
        try:
            while not stopping.is_set():
                if not self.is_leader:
                    cur = await conn.execute(SQL["leader_try_lock"], {"key": LEADER_LOCK_KEY})
                    row = await cur.fetchone()
                    self.is_leader = bool(row and row[0])
                    self._worked = True
                    if self.is_leader:
                        log.info("became maintenance leader", extra={"action": "leader_elected"})
                if self.is_leader:
                    await conn.execute(SQL["leader_keepalive"])
                    self._worked = True
                    await self.sweep()
                    await self._report_depth(conn)
                    await _sleep_unless(stopping, self.timings.rescue_interval)
                else:
                    await _sleep_unless(stopping, self.timings.leader_election_interval)
        finally:
            if self.is_leader and not conn.closed:
                try:
                    await conn.execute(SQL["leader_unlock"], {"key": LEADER_LOCK_KEY})
                except psycopg.Error:
                    pass
            self.is_leader = False

    async def _report_depth(self, conn: psycopg.AsyncConnection[Any]) -> None:
        """Queue depth and the oldest available job's age, once per interval, for the metrics
        plugins (computed here by the leader, not per scrape)."""
        if self.on_depth is None:
            return
        try:
            await self.on_depth(await queue_depth(conn))
        except (psycopg.OperationalError, psycopg.InterfaceError, OSError):
            raise  # the connection is gone: run() reconnects
        except psycopg.Error as exc:
            log.warning("queue depth failed: %s", exc, extra={"action": "depth_failed"})

    async def sweep(self) -> None:
        """One sweep as the leader runs it (errors of the database are logged, not raised)."""
        try:
            await sweep_once(
                self.core,
                heartbeat_staleness=self.timings.heartbeat_staleness,
                completed_retention=self.timings.completed_retention,
                failed_retention=self.timings.failed_retention,
                on_rescued=self.on_rescued,
            )
        except (psycopg.Error, OSError) as exc:  # any database error; the next sweep retries
            log.error(
                "maintenance sweep failed, retrying in %.1fs: %s",
                self.timings.rescue_interval,
                first_line(exc),
                extra={"action": "sweep_failed", "retry_in": self.timings.rescue_interval},
            )
            try:
                await self.pool.check()  # drop connections the server closed while idle
            except Exception:
                pass


async def _sleep_unless(stopping: asyncio.Event, seconds: float) -> None:
    try:
        await asyncio.wait_for(stopping.wait(), timeout=seconds)
    except TimeoutError:
        pass
