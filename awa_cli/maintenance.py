"""Maintenance: leader election, rescue sweeps, rescue follow-ups, retention and firing the
periodic schedules (``awa_cli/outcomes/periodic.py``; between its sweeps the leader sleeps
until the next fire time or a NOTIFY on ``awa_periodic``).

Every worker runs a :class:`Maintenance` loop; only the one holding the PostgreSQL advisory
lock (on a dedicated connection, so it dies with the process or the connection) sweeps.
``awa rescue run`` calls :func:`sweep_once` directly: the same code, one pass.

The grace after an outage (architecture §18): the leader judges heartbeats (the
stale-heartbeat rescue) only once it has been connected without a
database error for ``heartbeat_staleness`` plus one ``heartbeat_interval``. A live worker
beats on its first statement after a reconnect, so within that window every live attempt
has a fresh heartbeat again; an attempt still silent at its end belongs to a dead worker and
is rescued by the next sweep. The clock is this process's own: a worker that becomes leader
after (or during) an outage starts its own grace from its own reconnect, whatever the
previous leader had seen.
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import psycopg

from awa_cli import defaults
from awa_cli.db.channels import PERIODIC_CHANNEL
from awa_cli.db.retry import Backoff, first_line, reconnect_later, sleep_unless
from awa_cli.db import channels, leader
from awa_cli.depth import QueueDepth, queue_depth
from awa_cli.db.limits import waiting as limit_waiting
from awa_cli.events import RescueReason
from awa_cli.jobs import JobRow

if TYPE_CHECKING:
    from psycopg_pool import AsyncConnectionPool

    from awa_cli.config import MaintenanceConfig
    from awa_cli.outcomes import OutcomeCore

OnRescued = Callable[[list[JobRow]], None]
OnDepth = Callable[[list[QueueDepth]], Awaitable[None]]
OnLimits = Callable[[dict[str, int]], Awaitable[None]]  # limit name -> jobs waiting on it
"""Told of every committed rescue batch (a worker fences the attempts it still runs)."""


log = logging.getLogger("awa.maintenance")

LEADER_LOCK_KEY = 0x6177615F6C6472  # "awa_ldr"
# The SQLSTATE of VACUUM (SKIP_LOCKED)'s "skipping vacuum of ... --- lock not available" warning.
LOCK_NOT_AVAILABLE = "55P03"
# The leader sweeps the periodic schedules this long after the next fire time (so that the
# database's clock has surely reached it), and no more often than every PERIODIC_MIN_GAP.
PERIODIC_LATENESS = 0.005
PERIODIC_MIN_GAP = 0.05


@dataclass
class SweepReport:
    rescued: dict[str, list[JobRow]] = field(default_factory=dict)
    follow_ups_done: int = 0
    follow_ups_failed: int = 0
    pruned: int = 0
    dead_letters_pruned: int = 0
    audit_pruned: int = 0
    audit_refused: bool = False  # this role may not DELETE from awa.audit_log
    dry_run: bool = False

    def to_json(self) -> dict[str, Any]:
        return {
            "dry_run": self.dry_run,
            "rescued": {reason: [r.id for r in rows] for reason, rows in self.rescued.items()},
            "rescue_follow_ups": {"done": self.follow_ups_done, "failed": self.follow_ups_failed},
            "pruned": self.pruned,
            "dead_letters_pruned": self.dead_letters_pruned,
            "audit_pruned": self.audit_pruned,
        }


async def sweep_once(
    core: OutcomeCore,
    *,
    heartbeat_staleness: float,
    completed_retention: float,
    failed_retention: float,
    dry_run: bool = False,
    on_rescued: OnRescued | None = None,
    dead_letter_retention: float | None = None,
    audit_retention: float | None = None,
    judge_heartbeats: bool = True,
) -> SweepReport:
    """One pass: the three rescue sweeps, pending rescue follow-ups, then retention (and the
    dead letters' and audit log's retention when ``dead_letter_retention`` and
    ``audit_retention`` are given). ``judge_heartbeats=False`` (a leader inside its grace
    after an outage) skips the stale-heartbeat rescue."""
    report = SweepReport(dry_run=dry_run)
    for reason in RescueReason:
        if reason is RescueReason.STALE_HEARTBEAT and not judge_heartbeats:
            continue
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
    if dead_letter_retention is not None:  # bounded batches until one comes back short
        report.dead_letters_pruned = await core.prune_dlq(dead_letter_retention)
    if audit_retention is not None:
        try:
            report.audit_pruned = await core.prune_audit(audit_retention)
        except psycopg.errors.InsufficientPrivilege:
            # keep every entry (and say so) rather than fail the whole sweep; the leader says
            # it once and stops trying (Maintenance.sweep)
            report.audit_refused = True
            log.warning(
                "audit retention skipped: this role may not DELETE from awa.audit_log",
                extra={"action": "audit_prune_refused"},
            )
    return report


class Maintenance:
    """The leader-elected maintenance loop inside a worker; ``on_rescued`` is told of every
    rescue batch it commits (the worker fences the rescued attempts it still runs)."""

    def __init__(
        self,
        dsn: str,
        pool: AsyncConnectionPool,
        core: OutcomeCore,
        timings: MaintenanceConfig,  # the [maintenance] timings (a worker's Timings has them)
        on_rescued: OnRescued | None = None,
        on_depth: OnDepth | None = None,
        on_limits: OnLimits | None = None,
    ) -> None:
        self.dsn = dsn
        self.on_depth = on_depth
        self.on_limits = on_limits  # given only by a worker with [limits.NAME]
        self.pool = pool
        self.core = core
        self.timings = timings
        self.on_rescued = on_rescued
        self.is_leader = False
        self._periodic_due_at: float | None = None  # loop time the next schedule is due
        self._periodic_pruned_at = float("-inf")
        self._worked = False  # a lock query succeeded on the current connection
        # Loop time since which the maintenance connection has worked without a database
        # error (None: not connected); heartbeats are judged only after the grace from it.
        # run() sets it at each connect; a sweep() called on its own judges at once.
        self._clean_since: float | None = float("-inf")
        self._in_grace_logged = False
        self._marked = False  # this leadership is written in the worker's awa.workers row
        self._mark_task: asyncio.Task[None] | None = None
        self._vacuum_task: asyncio.Task[None] | None = None
        # dead row versions the last vacuum left (a snapshot held open keeps them): the next
        # vacuum waits for vacuum_dead_tuples more, not for a count it cannot lower
        self._vacuum_floor = 0
        self._vacuums = 0  # this process's vacuums (the first one is logged at INFO)
        self._vacuum_refused = False  # said once: this role may not vacuum awa.jobs
        self._audit_refused = False  # said once: this role may not prune awa.audit_log
        if timings.heartbeat_staleness < 3 * timings.heartbeat_interval:
            log.warning(
                "heartbeat_staleness (%ss) is below 3x heartbeat_interval (%ss): live jobs may be rescued",
                timings.heartbeat_staleness,
                timings.heartbeat_interval,
                extra={"action": "config_warning"},
            )

    async def run(self, stopping: asyncio.Event) -> None:
        """Elect, sweep, repeat until ``stopping``. Any database error is logged at ERROR
        and retried with backoff (architecture §18), capped at ``leader_election_interval``."""
        backoff = Backoff(cap=max(defaults.LOOP_BACKOFF_MIN, self.timings.leader_election_interval))
        while not stopping.is_set():
            try:
                # a session of its own (the advisory lock, LISTEN): prepared statements off,
                # in case it goes through a pooler anyway (architecture §18)
                async with await psycopg.AsyncConnection.connect(
                    self.dsn, autocommit=True, prepare_threshold=None
                ) as conn:
                    self._clean_since = asyncio.get_running_loop().time()
                    await self._lead_or_wait(conn, stopping)
            except asyncio.CancelledError:
                raise
            except (psycopg.Error, OSError) as exc:
                self.is_leader = False
                self._database_error()
                if self._worked:  # the connection did work before it failed: start over
                    backoff.reset()
                    self._worked = False
                await reconnect_later(log, "maintenance", exc, backoff, stopping)

    @property
    def grace(self) -> float:
        """Seconds a leader waits after a database error before it judges heartbeats."""
        return self.timings.heartbeat_staleness + self.timings.heartbeat_interval

    def _database_error(self) -> None:
        """A database error: the grace starts again (from the next connection)."""
        self._clean_since = None

    def judges_heartbeats(self) -> bool:
        """Whether the connection has worked without a database error for the grace."""
        if self._clean_since is None:
            return False
        waited = asyncio.get_running_loop().time() - self._clean_since
        judging = waited >= self.grace
        if not judging and not self._in_grace_logged:
            self._in_grace_logged = True
            log.info(
                "heartbeats are judged %.1fs from now (grace after connecting: "
                "heartbeat_staleness + heartbeat_interval)",
                self.grace - waited,
                extra={"action": "rescue_grace", "grace": self.grace},
            )
        elif judging and self._in_grace_logged:
            self._in_grace_logged = False
            log.info("grace over: judging heartbeats", extra={"action": "rescue_grace_over"})
        return judging

    async def _lead_or_wait(
        self, conn: psycopg.AsyncConnection[Any], stopping: asyncio.Event
    ) -> None:
        try:
            while not stopping.is_set():
                if not self.is_leader:
                    self.is_leader = await leader.try_lock(conn, LEADER_LOCK_KEY)
                    self._worked = True
                    if self.is_leader:
                        log.info("became maintenance leader", extra={"action": "leader_elected"})
                        await channels.listen(conn, [PERIODIC_CHANNEL])
                if self.is_leader:
                    await leader.keepalive(conn)
                    self._worked = True
                    await self._mark_worker(conn)
                    await self.sweep()
                    await self._report_depth(conn)
                    await self._vacuum_if_due(conn)
                    # not under the grace: a live worker re-announces itself at its next beat
                    await self._prune_workers(conn)
                    await self._periodic_until_next_sweep(conn, stopping)
                else:
                    await sleep_unless(stopping, self.timings.leader_election_interval)
        finally:
            if self.is_leader and not conn.closed:
                try:
                    await leader.unlock(conn, LEADER_LOCK_KEY)
                except psycopg.Error:
                    pass
            self.is_leader = False
            self._marked = False
            if self._mark_task is not None:
                self._mark_task.cancel()
                self._mark_task = None
            if self._vacuum_task is not None:  # a VACUUM under way finishes on the server
                self._vacuum_task.cancel()
                self._vacuum_task = None

    async def _mark_worker(self, conn: psycopg.AsyncConnection[Any]) -> None:
        """Name this worker as the leader in its awa.workers row (``awa doctor`` shows its
        host:pid), once per leadership, in the background: the row may not be registered
        yet at the moment the lock is won."""
        if self._marked:
            return
        self._marked = True
        backend = conn.info.backend_pid
        self._mark_task = asyncio.get_running_loop().create_task(
            self._mark_soon(backend), name="awa-leader-mark"
        )

    async def _mark_soon(self, backend: int, tries: int = 40, pause: float = 0.25) -> None:
        """Best-effort: a schema without the column (before migration 0013) or a database
        that is away leaves the row unmarked (the doctor then names the backend pid)."""
        params = {"host": socket.gethostname(), "pid": os.getpid(), "backend_pid": backend}
        for _ in range(tries):
            try:
                async with self.pool.connection(timeout=5) as conn:
                    marked = await leader.mark_worker(conn, params)
                if marked > 0:
                    return
            except psycopg.errors.UndefinedColumn:
                return
            except (psycopg.Error, OSError):
                pass
            await asyncio.sleep(pause)

    async def _periodic_until_next_sweep(
        self, conn: psycopg.AsyncConnection[Any], stopping: asyncio.Event
    ) -> None:
        """Wait out the rescue interval, firing periodic schedules as they fall due: wake at
        the earliest ``next_fire_at`` (as the last periodic sweep said) or when a worker's
        upsert or a resume NOTIFYs ``awa_periodic``; nothing touches the database between."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.timings.rescue_interval
        while not stopping.is_set() and (left := deadline - loop.time()) > 0:
            due_at = self._periodic_due_at
            wait = left if due_at is None else min(left, max(due_at - loop.time(), 0.0))
            notified = False
            if wait > 0:
                async for _ in conn.notifies(timeout=wait, stop_after=1):
                    notified = True
            if notified or (due_at is not None and loop.time() >= due_at):
                await self.sweep_periodic()
                if not notified and self._periodic_due_at is not None:
                    # still due (a row another sweep holds, a catch-up cut short): not a hot loop
                    self._periodic_due_at = max(
                        self._periodic_due_at, loop.time() + PERIODIC_MIN_GAP
                    )

    async def sweep_periodic(self) -> None:
        """Fire the due periodic schedules (errors of the database are logged, not raised);
        remember when the next one is due, a moment after its fire time. Old recorded fires
        are pruned first, at most every PERIODIC_PRUNE_INTERVAL."""
        loop = asyncio.get_running_loop()
        self._periodic_due_at = None
        try:
            await self._prune_periodic_fires()
            swept = await self.core.fire_periodic()
        except (psycopg.OperationalError, psycopg.InterfaceError, OSError) as exc:
            log.warning("periodic sweep failed: %s", exc, extra={"action": "sweep_failed"})
            return
        except psycopg.Error as exc:
            log.error("periodic sweep failed: %s", exc, extra={"action": "periodic_failed"})
            return
        if swept.due_in is not None:
            self._periodic_due_at = loop.time() + max(swept.due_in, 0.0) + PERIODIC_LATENESS

    async def _report_depth(self, conn: psycopg.AsyncConnection[Any]) -> None:
        """Queue depth and the oldest available job's age, once per interval, for the metrics
        plugins (computed here by the leader, not per scrape)."""
        try:
            if self.on_limits is not None:
                await leader.prune_limit_starts(conn)
                await self.on_limits(await limit_waiting(conn))
            if self.on_depth is None:
                return
            await self.on_depth(await queue_depth(conn))
        except (psycopg.OperationalError, psycopg.InterfaceError, OSError):
            raise  # the connection is gone: run() reconnects
        except psycopg.Error as exc:
            log.warning("queue depth failed: %s", exc, extra={"action": "depth_failed"})

    async def _vacuum_if_due(self, conn: psycopg.AsyncConnection[Any]) -> None:
        """Start a VACUUM of awa.jobs in the background once the table has
        ``vacuum_dead_tuples`` dead row versions more than the last vacuum left: one at a
        time, on a session of its own, so the sweeps and the periodic schedules go on
        meanwhile. A role that may not vacuum the table (it does not own it) is told once,
        at INFO; autovacuum still does its work."""
        threshold = self.timings.vacuum_dead_tuples
        if threshold <= 0 or self._vacuum_refused:
            return
        if self._vacuum_task is not None and not self._vacuum_task.done():
            return
        try:
            dead, may_vacuum = await leader.jobs_dead_tuples(conn)
        except (psycopg.OperationalError, psycopg.InterfaceError, OSError):
            raise  # the connection is gone: run() reconnects
        except psycopg.Error as exc:
            log.warning("vacuum check failed: %s", exc, extra={"action": "vacuum_failed"})
            return
        # the floor follows the count down (autovacuum's own vacuum, a stats reset)
        self._vacuum_floor = min(self._vacuum_floor, dead)
        if dead < self._vacuum_floor + threshold:
            return
        if not may_vacuum:
            self._vacuum_refused = True
            log.info(
                "awa.jobs has %d dead row versions, but this role does not own the table: "
                "the leader leaves vacuuming it to autovacuum ([maintenance] vacuum_dead_tuples)",
                dead,
                extra={"action": "vacuum_refused", "dead_tuples": dead},
            )
            return
        self._vacuum_task = asyncio.get_running_loop().create_task(
            self._vacuum(dead), name="awa-vacuum"
        )

    async def _vacuum(self, dead: int) -> None:
        """``VACUUM awa.jobs``, then remember what it could not remove."""
        loop = asyncio.get_running_loop()
        started = loop.time()
        skipped: list[str] = []  # SKIP_LOCKED: someone (autovacuum) is vacuuming it already
        try:
            async with await psycopg.AsyncConnection.connect(
                self.dsn, autocommit=True, prepare_threshold=None
            ) as conn:
                conn.add_notice_handler(
                    lambda d: (
                        skipped.append(d.message_primary or "")
                        if d.sqlstate == LOCK_NOT_AVAILABLE
                        else None
                    )
                )
                await leader.vacuum_jobs(conn)
                if not skipped:
                    self._vacuum_floor, _ = await leader.jobs_dead_tuples(conn)
        except (psycopg.Error, OSError) as exc:
            log.warning(
                "vacuum of awa.jobs failed: %s", first_line(exc), extra={"action": "vacuum_failed"}
            )
            return
        if skipped:
            log.debug("awa.jobs not vacuumed: %s", skipped[0], extra={"action": "vacuum_skipped"})
            return
        self._vacuums += 1
        log.log(
            logging.INFO if self._vacuums == 1 else logging.DEBUG,
            "vacuumed awa.jobs: %d dead row versions, %d left, in %.2fs "
            "(the leader does so at [maintenance] vacuum_dead_tuples = %d more)",
            dead,
            self._vacuum_floor,
            loop.time() - started,
            self.timings.vacuum_dead_tuples,
            extra={
                "action": "vacuumed",
                "dead_tuples": dead,
                "left": self._vacuum_floor,
                "seconds": round(loop.time() - started, 3),
            },
        )

    async def _prune_workers(self, conn: psycopg.AsyncConnection[Any]) -> None:
        """Delete the ``awa.workers`` rows of processes that stopped heartbeating."""
        try:
            await leader.prune_workers(conn, defaults.WORKER_STALENESS)
        except (psycopg.OperationalError, psycopg.InterfaceError, OSError):
            raise  # the connection is gone: run() reconnects
        except psycopg.Error as exc:  # e.g. migration 0005 not applied yet
            log.warning("worker prune failed: %s", exc, extra={"action": "prune_failed"})

    async def sweep(self) -> None:
        """One sweep as the leader runs it (errors of the database are logged, not raised):
        rescue and retention, then the periodic schedules."""
        try:
            report = await sweep_once(
                self.core,
                heartbeat_staleness=self.timings.heartbeat_staleness,
                completed_retention=self.timings.completed_retention,
                failed_retention=self.timings.failed_retention,
                on_rescued=self.on_rescued,
                dead_letter_retention=self.timings.dead_letter_retention,
                audit_retention=None if self._audit_refused else self.timings.audit_retention,
                judge_heartbeats=self.judges_heartbeats(),
            )
            self._audit_refused = self._audit_refused or report.audit_refused
        except (psycopg.Error, OSError) as exc:  # any database error; the next sweep retries
            # still connected, but the pool failed: the grace starts again from now
            self._clean_since = asyncio.get_running_loop().time()
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
        await self.sweep_periodic()

    async def _prune_periodic_fires(self) -> None:
        """Forget recorded fires a day behind their schedule's last fire (never due again)."""
        now = asyncio.get_running_loop().time()
        if now < self._periodic_pruned_at + defaults.PERIODIC_PRUNE_INTERVAL:
            return
        self._periodic_pruned_at = now
        await self.core.prune_periodic_fires()
