"""One runner per queue: claim up to the free slots, start the handlers, wait for more work.

A runner is given a :class:`~awa_cli.worker.services.RunnerContext` (the claim, the
executor, the finalizer's submit, ...), not the worker.
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass
from typing import Any

import psycopg

from awa_cli import defaults
from awa_cli.db.retry import first_line
from awa_cli.jobs import JobRow
from awa_cli.worker.services import RunnerContext

log = logging.getLogger("awa.worker")


@dataclass(frozen=True)
class QueueSpec:
    name: str
    concurrency: int = defaults.QUEUE_CONCURRENCY
    deadline: float = 0.0  # seconds; 0 = none (a job's deadline_duration overrides)
    # exhausted jobs move to the dead-letter queue; None: as a worker announced it in awa.queues
    dead_letter: bool | None = None
    priority_aging: float = 0.0  # seconds per priority level gained while waiting; 0 = none


class QueueRunner:
    def __init__(self, spec: QueueSpec, context: RunnerContext) -> None:
        self.spec = spec
        self.context = context
        self.tasks: set[asyncio.Task[Any]] = set()
        self._wake = asyncio.Event()
        self._has_work = True  # the last claim filled every free slot
        self.claimed = 0
        self.claims = 0
        self.ready = asyncio.Event()  # set after the first successful claim round
        self.failing = False  # in error backoff: the last claim round failed
        self._stop = asyncio.Event()

    @property
    def free(self) -> int:
        return self.spec.concurrency - len(self.tasks)

    def wake(self) -> None:
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
            timeout: float | None = poll
            if 0 < self.free < self.spec.concurrency and self._has_work:
                # Woken by a freed slot: yield once so handlers finishing in the same loop
                # iteration free theirs too, and one claim fills them all.
                await asyncio.sleep(0)
            if self.free > 0:
                try:
                    requested = self.free
                    rows = await self.claim(requested)
                except (psycopg.Error, OSError) as exc:
                    await self._claim_failed(exc, backoff)
                    backoff = min(backoff * 2, defaults.LOOP_BACKOFF_MAX)
                    continue
                backoff = defaults.LOOP_BACKOFF_MIN
                self._claim_ok()
                for row in rows:
                    self._start(row)
                self._has_work = len(rows) >= requested
                if self._has_work:
                    continue
                timeout = await self._until_next_due(poll)
            else:
                timeout = None  # a freed slot wakes us
            try:
                await asyncio.wait_for(self._wake.wait(), timeout=timeout)
            except TimeoutError:
                pass

    def _claim_ok(self) -> None:
        if self.failing:
            log.info(
                "claims on queue %s work again",
                self.spec.name,
                extra={"action": "claim_recovered", "queue": self.spec.name},
            )
        self.failing = False
        self.ready.set()

    async def _claim_failed(self, exc: BaseException, backoff: float) -> None:
        """Any database error (a lost connection, a missing grant, a read-only server): one
        ERROR line per backoff step, then retry (DESIGN §15.7)."""
        self.failing = True
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

    async def _until_next_due(self, poll: float) -> float:
        try:
            due = await self.context.seconds_until_due(self.spec.name)
        except (psycopg.Error, OSError):
            return poll
        if due is None:
            return poll
        return max(0.0, min(poll, due))

    def _start(self, row: JobRow) -> None:
        self.context.started(row)
        task = asyncio.get_running_loop().create_task(self._execute(row), name=f"awa-job-{row.id}")
        self.tasks.add(task)
        task.add_done_callback(self._done)

    async def _execute(self, row: JobRow) -> None:
        started = time.monotonic()
        try:
            result = await self.context.execute(row)
        except Exception:
            log.exception(
                "executing job %s failed inside awa", row.id, extra={"action": "execute_bug"}
            )
            self.context.lost(row.id)
            return
        log.debug("job %s %s in %.3fs", row.id, result.action, time.monotonic() - started)
        self.context.submit(result)

    def _done(self, task: asyncio.Task[Any]) -> None:
        self.tasks.discard(task)
        if self._has_work and not self.context.is_stopping():
            self._wake.set()
