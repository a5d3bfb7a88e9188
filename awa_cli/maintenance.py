"""Maintenance: leader election, rescue sweeps, rescue follow-ups and retention.

Every worker runs a :class:`Maintenance` loop; only the one holding the PostgreSQL advisory
lock (on a dedicated connection, so it dies with the process or the connection) sweeps.
``awa rescue run`` calls :func:`sweep_once` directly: the same code, one pass.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import psycopg

from awa_cli.events import RescueReason
from awa_cli.jobs import JobRow

if TYPE_CHECKING:
    from psycopg_pool import AsyncConnectionPool

    from awa_cli.outcomes import OutcomeCore

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
    on_rescued: Any = None,
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
    """The leader-elected maintenance loop inside a worker."""

    def __init__(
        self,
        dsn: str,
        pool: AsyncConnectionPool,
        core: OutcomeCore,
        timings: Any,
        worker: Any = None,
    ) -> None:
        self.dsn = dsn
        self.pool = pool
        self.core = core
        self.timings = timings
        self.worker = worker
        self.is_leader = False
        if timings.heartbeat_staleness < 3 * timings.heartbeat_interval:
            log.warning(
                "heartbeat_staleness (%ss) is below 3x heartbeat_interval (%ss): live jobs may be rescued",
                timings.heartbeat_staleness,
                timings.heartbeat_interval,
                extra={"action": "config_warning"},
            )

    async def run(self, stopping: asyncio.Event) -> None:
        while not stopping.is_set():
            try:
                async with await psycopg.AsyncConnection.connect(self.dsn, autocommit=True) as conn:
                    await self._lead_or_wait(conn, stopping)
            except asyncio.CancelledError:
                raise
            except (psycopg.Error, OSError) as exc:
                self.is_leader = False
                log.warning(
                    "maintenance connection lost: %s",
                    exc,
                    extra={"action": "maintenance_reconnect"},
                )
                await _sleep_unless(stopping, self.timings.leader_election_interval)

    async def _lead_or_wait(
        self, conn: psycopg.AsyncConnection[Any], stopping: asyncio.Event
    ) -> None:
        try:
            while not stopping.is_set():
                if not self.is_leader:
                    cur = await conn.execute("SELECT pg_try_advisory_lock(%s)", (LEADER_LOCK_KEY,))
                    row = await cur.fetchone()
                    self.is_leader = bool(row and row[0])
                    if self.is_leader:
                        log.info("became maintenance leader", extra={"action": "leader_elected"})
                if self.is_leader:
                    await conn.execute("SELECT 1")  # the lock lives as long as this connection
                    await self._sweep()
                    await _sleep_unless(stopping, self.timings.rescue_interval)
                else:
                    await _sleep_unless(stopping, self.timings.leader_election_interval)
        finally:
            if self.is_leader and not conn.closed:
                try:
                    await conn.execute("SELECT pg_advisory_unlock(%s)", (LEADER_LOCK_KEY,))
                except psycopg.Error:
                    pass
            self.is_leader = False

    async def _sweep(self) -> None:
        try:
            await sweep_once(
                self.core,
                heartbeat_staleness=self.timings.heartbeat_staleness,
                completed_retention=self.timings.completed_retention,
                failed_retention=self.timings.failed_retention,
                on_rescued=self._flag_local,
            )
        except (psycopg.OperationalError, psycopg.InterfaceError, OSError) as exc:
            log.warning("maintenance sweep failed: %s", exc, extra={"action": "sweep_failed"})
            try:
                await self.pool.check()  # drop connections the server closed while idle
            except Exception:
                pass

    def _flag_local(self, rows: list[JobRow]) -> None:
        """A rescued attempt still running in this process sees ``job.is_cancelled()``."""
        if self.worker is None:
            return
        for row in rows:
            job = self.worker.running.get(row.id)
            if job is not None and job.run_lease == row.run_lease:
                job._cancel()


async def _sleep_unless(stopping: asyncio.Event, seconds: float) -> None:
    try:
        await asyncio.wait_for(stopping.wait(), timeout=seconds)
    except TimeoutError:
        pass
