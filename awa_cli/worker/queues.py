"""One runner per queue: claim up to the free slots, start the handlers, wait for more work.

A runner is given a :class:`~awa_cli.worker.services.RunnerContext` (the claim, the
executor, the finalizer's submit, ...), not the worker.

Claim-ahead: while the queue's attempts are short (their moving average under
:data:`CLAIM_AHEAD_BELOW`) and there is a backlog, a runner also claims up to ``concurrency``
jobs beyond its free slots and keeps them in order; a slot that frees starts the next of them
at once, without waiting for a claim's round trip, while the next claim is already under way.
Such a job is ``running`` from its claim (its deadline counts from the claim, as the row's
``deadline_at`` says); it waits for a slot about one attempt's length, and its ``Started``
fires, and its handler starts, when it gets one. An operator cancel or a rescue of a job
still waiting drops it here, so its handler never starts.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import deque
from dataclasses import dataclass
from typing import Any

import psycopg

from awa_cli import defaults
from awa_cli.db.retry import first_line
from awa_cli.jobs import JobRow
from awa_cli.worker.services import RunnerContext

log = logging.getLogger("awa.worker")

CLAIM_AHEAD_BELOW = 0.005
"""Seconds: a queue claims ahead while the moving average of its attempts' durations (handler
start to result) is below this, so a job claimed ahead waits about that long at most."""
AVERAGE_WEIGHT = 0.1  # each attempt's weight in that moving average

FINALIZE_BACKLOG = 512
"""Results waiting to be finalised (worker-wide) at which the runners stop claiming. A slot
frees when its handler returns, before its result commits: while finalising stalls (a lock, a
slow statement, a database in trouble) the runners would otherwise claim on, every claimed
job ``running`` and heartbeated until its result commits. The worker's held jobs then grew
without bound (380,000 in a 1,000,000-job drain), the heartbeat of all of them outlasted the
heartbeat staleness, and the leader rescued jobs that had already run: run twice. Normally a
few dozen results wait (a flush commits up to 512 at once)."""
BACKLOG_POLL = 0.05  # seconds between looks at the backlog while claims wait for it


@dataclass(frozen=True)
class QueueSpec:
    name: str
    concurrency: int = defaults.QUEUE_CONCURRENCY
    deadline: float = 0.0  # seconds; 0 = none (a job's deadline_duration overrides)
    # exhausted jobs move to the dead-letter queue; None: as a worker announced it in awa.queues
    dead_letter: bool | None = None
    priority_aging: float = 0.0  # seconds per priority level gained while waiting; 0 = none
    claim_ahead: bool = True  # claim beyond the free slots while attempts are short


class QueueRunner:
    def __init__(self, spec: QueueSpec, context: RunnerContext) -> None:
        self.spec = spec
        self.context = context
        self.tasks: set[asyncio.Task[Any]] = set()
        self._wake = asyncio.Event()
        self._has_work = True  # the last claim filled every free slot
        self._notified = False  # woken for new work since the last claim began
        self.short = False  # the last claim returned fewer jobs than it asked for
        # a short claim whose wait found nothing to wait for claimed once more (below)
        self._rechecked = False
        self.claimed = 0
        self.claims = 0
        self.ready = asyncio.Event()  # set after the first successful claim round
        self.failing = False  # in error backoff: the last claim round failed
        self.backlogged = False  # claims paused: too many results wait to be finalised
        # ... because the database could not be reached (a restart, a failover): the worker
        # stays healthy for the watchdog then, since a restart would only kill live handlers
        self.unreachable = False
        # While failing: since when (unix time) and the last error's first line, for the
        # worker's row in awa.workers (awa doctor's `claims` check).
        self.failing_since: float | None = None
        self.claim_error: str | None = None
        self._stop = asyncio.Event()
        # claimed ahead, not started yet: (row, monotonic time of its claim), in claim order
        self.ahead: deque[tuple[JobRow, float]] = deque()
        self.average: float | None = None  # moving average of attempt durations (s)

    @property
    def free(self) -> int:
        return self.spec.concurrency - len(self.tasks)

    @property
    def ahead_room(self) -> int:
        """How many more jobs to claim ahead: up to ``concurrency`` while attempts are short."""
        if not self.spec.claim_ahead or self.average is None:
            return 0
        if self.average >= CLAIM_AHEAD_BELOW:
            return 0
        return max(0, self.spec.concurrency - len(self.ahead))

    def drop(self, job_id: int, run_lease: int | None = None) -> bool:
        """A job claimed ahead is no longer ours (an operator cancel; a rescue, for that
        ``run_lease``): forget it, so its handler never starts."""
        for entry in self.ahead:
            row = entry[0]
            if row.id == job_id and (run_lease is None or row.run_lease == run_lease):
                self.ahead.remove(entry)
                log.info(
                    "job %s, claimed ahead, was taken away before it started: dropped",
                    job_id,
                    extra={"action": "claimed_ahead_dropped", "job_id": job_id},
                )
                return True
        return False

    def wake(self) -> None:
        """New work may be there (a NOTIFY, a reconnect): claim, ahead too if attempts are short."""
        self._has_work = True
        self._notified = True  # kept across a claim under way, which may not have seen it
        self._wake.set()

    def stop(self) -> None:
        """The worker is stopping: end a backoff wait at once."""
        self._stop.set()
        self._wake.set()

    async def run(self) -> None:
        poll = self.context.poll_interval
        backoff = defaults.LOOP_BACKOFF_MIN
        while not self.context.is_stopping():
            # Cleared before claiming, so a wake-up that arrives while we claim (a NOTIFY, a
            # freed slot) is kept and the next wait returns at once.
            self._wake.clear()
            self._notified = False
            timeout: float | None = poll
            if 0 < self.free < self.spec.concurrency and self._has_work:
                # Woken by a freed slot: yield once so handlers finishing in the same loop
                # iteration free theirs too, and one claim fills them all.
                await asyncio.sleep(0)
            room = self.free - len(self.ahead)
            if self._backlogged():
                timeout = BACKLOG_POLL  # claim again once finalising catches up
            elif room > 0 or (self._has_work and self.ahead_room > 0):
                try:
                    requested = max(0, room) + (self.ahead_room if self._has_work else 0)
                    claim_began = time.monotonic()
                    rows = await self.claim(requested)
                except (psycopg.Error, OSError) as exc:
                    await self._claim_failed(exc, backoff)
                    backoff = min(backoff * 2, defaults.LOOP_BACKOFF_MAX)
                    continue
                backoff = defaults.LOOP_BACKOFF_MIN
                self._claim_ok()
                claimed_at = time.monotonic()
                self.ahead.extend((row, claimed_at) for row in rows)
                self._start_ahead()
                self.short = len(rows) < requested
                if rows:
                    self._rechecked = False
                self._has_work = not self.short or self._notified
                if self._has_work:
                    continue
                timeout = await self._until_next_due(poll, claim_began)
            elif self._has_work:
                timeout = None  # a freed slot wakes us
            # else: slots full with jobs claimed ahead of a short claim; poll as when idle
            try:
                await asyncio.wait_for(self._wake.wait(), timeout=timeout)
            except TimeoutError:
                pass

    def _backlogged(self) -> bool:
        """Too many results wait to be finalised: claim nothing until they commit (said once
        per episode, at WARNING, and when it ends)."""
        waiting = self.context.finalizing()
        if waiting >= FINALIZE_BACKLOG:
            if not self.backlogged:
                self.backlogged = True
                log.warning(
                    "queue %s: %d results wait to be finalised; claiming paused until they commit",
                    self.spec.name,
                    waiting,
                    extra={"action": "claims_paused", "queue": self.spec.name, "waiting": waiting},
                )
            return True
        if self.backlogged:
            self.backlogged = False
            log.info(
                "queue %s: results finalised; claiming again",
                self.spec.name,
                extra={"action": "claims_resumed", "queue": self.spec.name},
            )
        return False

    def _claim_ok(self) -> None:
        if self.failing:
            log.info(
                "claims on queue %s work again",
                self.spec.name,
                extra={"action": "claim_recovered", "queue": self.spec.name},
            )
        self.failing = False
        self.unreachable = False
        self.failing_since = self.claim_error = None
        self.ready.set()

    async def _claim_failed(self, exc: BaseException, backoff: float) -> None:
        """Any database error (a lost connection, a missing grant, a read-only server): one
        ERROR line per backoff step, then retry (architecture §15.7)."""
        self.failing = True
        self.unreachable = isinstance(
            exc, (psycopg.OperationalError, psycopg.InterfaceError, OSError)
        )
        if self.failing_since is None:
            self.failing_since = time.time()
        self.claim_error = first_line(exc)[:500]
        log.error(
            "claim on queue %s failed, retrying in %.1fs: %s",
            self.spec.name,
            backoff,
            first_line(exc),
            extra={"action": "claim_failed", "queue": self.spec.name, "retry_in": backoff},
        )
        try:
            await self.context.recheck_claims()
        except Exception:  # the pool's check is best-effort
            pass
        try:
            await asyncio.wait_for(self._stop.wait(), timeout=backoff)
        except TimeoutError:
            pass

    async def claim(self, limit: int) -> list[JobRow]:
        rows = await self.context.claim(self.spec.name, limit, self.spec.deadline)
        self.claimed += len(rows)
        self.claims += 1
        return rows

    async def _until_next_due(self, poll: float, claim_began: float) -> float:
        """How long to wait after a short claim: the poll, or less when a scheduled job falls
        due or a key out of rate budget (as the claim found it) gets budget again first."""
        try:
            since = time.monotonic() - claim_began
            due = await self.context.seconds_until_due(self.spec.name, since)
        except (psycopg.Error, OSError):
            return poll
        if due is None:
            # Nothing to wait for: claim once more before sleeping a poll. Between the short
            # claim and this read a key's rate window may have freed in a way the read does
            # not see as "was out of budget" (measured: `limited_rate` lost a poll, a window
            # of 20-80 starts instead of 100, in one run of ten). An idle queue pays one
            # more claim when it goes idle, not one per poll.
            if not self._rechecked:
                self._rechecked = True
                return 0.0
            return poll
        return max(0.0, min(poll, due))

    def abandon_ahead(self) -> None:
        """The drain timed out: start nothing more. Jobs claimed ahead and never started stay
        ``running`` with no heartbeat, and are rescued as a crashed worker's jobs are."""
        if self.ahead:
            log.warning(
                "%d jobs claimed ahead on queue %s never started: the rescue will retry them",
                len(self.ahead),
                self.spec.name,
                extra={"action": "claimed_ahead_abandoned", "queue": self.spec.name},
            )
            self.ahead.clear()

    def _start_ahead(self) -> None:
        """Start the jobs claimed ahead, oldest claim first, in the free slots."""
        while self.ahead and self.free > 0:
            row, claimed_at = self.ahead.popleft()
            self._start(row, claimed_at)

    def _start(self, row: JobRow, claimed_at: float) -> None:
        self.context.started(row)
        task = asyncio.get_running_loop().create_task(
            self._execute(row, claimed_at), name=f"awa-job-{row.id}"
        )
        self.tasks.add(task)
        task.add_done_callback(self._done)

    async def _execute(self, row: JobRow, claimed_at: float) -> None:
        started = time.monotonic()
        try:
            result = await self.context.execute(row, started - claimed_at)
        except Exception:
            log.exception(
                "executing job %s failed inside awa", row.id, extra={"action": "execute_bug"}
            )
            self.context.lost(row.id)
            return
        duration = time.monotonic() - started
        average = self.average
        self.average = (
            duration if average is None else average + AVERAGE_WEIGHT * (duration - average)
        )
        log.debug("job %s %s in %.3fs", row.id, result.action, duration)
        self.context.submit(result)

    def _done(self, task: asyncio.Task[Any]) -> None:
        self.tasks.discard(task)
        # A job claimed ahead takes the slot at once (also while stopping: it is claimed, and
        # the drain waits for it as for the others).
        self._start_ahead()
        if self._has_work and not self.context.is_stopping():
            self._wake.set()
