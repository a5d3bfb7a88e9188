"""One runner per queue: claim up to the free slots, start the handlers, wait for more work."""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import psycopg

from awa_cli import defaults
from awa_cli.events import JobEvent
from awa_cli.jobs import JOB_COLUMNS, JobRow
from awa_cli.worker.executor import execute
from awa_cli.worker.finalizer import recheck

if TYPE_CHECKING:
    from awa_cli.worker.runtime import Worker

log = logging.getLogger("awa.worker")


@dataclass(frozen=True)
class QueueSpec:
    name: str
    concurrency: int = defaults.QUEUE_CONCURRENCY
    deadline: float = 0.0  # seconds; 0 = none (a job's deadline_duration overrides)


def claim_sql(which: str) -> str:
    """The claim: lock up to ``%(limit)s`` runnable jobs matching ``which`` (SKIP LOCKED, in
    priority → run_at → id order) and start their next attempt. The worker claims by queue;
    the test harness (awa_cli.testing) by kind, with the very same transition."""
    return f"""
WITH next AS (
    SELECT id FROM awa.jobs
    WHERE {which} AND state IN ('available', 'scheduled', 'retryable')
      AND run_at <= now()
    ORDER BY priority, run_at, id
    LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED
)
UPDATE awa.jobs AS j SET
    state = 'running',
    attempt = j.attempt + 1,
    run_lease = j.run_lease + 1,
    attempted_at = now(),
    heartbeat_at = now(),
    deadline_at = CASE WHEN coalesce(j.deadline_duration, %(deadline)s) > 0
                       THEN now() + coalesce(j.deadline_duration, %(deadline)s) * interval '1 second' END
FROM next
WHERE j.id = next.id
RETURNING {JOB_COLUMNS}
"""


CLAIM = claim_sql("queue = %(queue)s")

NEXT_DUE = """
SELECT extract(epoch FROM min(run_at) - now()) FROM awa.jobs
WHERE queue = %(queue)s AND state IN ('scheduled', 'retryable')
"""


class QueueRunner:
    def __init__(self, worker: Worker, spec: QueueSpec) -> None:
        self.worker = worker
        self.spec = spec
        self.tasks: set[asyncio.Task[Any]] = set()
        self._wake = asyncio.Event()
        self._has_work = True  # the last claim filled every free slot
        self.claimed = 0
        self.claims = 0

    @property
    def free(self) -> int:
        return self.spec.concurrency - len(self.tasks)

    def wake(self) -> None:
        self._wake.set()

    async def run(self) -> None:
        poll = self.worker.timings.poll_interval
        backoff = 0.1
        while not self.worker.stopping:
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
                    backoff = 0.1
                except (psycopg.OperationalError, psycopg.InterfaceError, OSError) as exc:
                    log.warning(
                        "claim on queue %s failed, retrying in %.1fs: %s",
                        self.spec.name,
                        backoff,
                        exc,
                        extra={"action": "claim_failed", "queue": self.spec.name},
                    )
                    await recheck(self.worker.claim_pool)
                    await asyncio.sleep(backoff)
                    backoff = min(backoff * 2, 5.0)
                    continue
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

    async def claim(self, limit: int) -> list[JobRow]:
        async with self.worker.claim_pool.connection() as conn, conn.cursor() as cur:
            await cur.execute(
                CLAIM, {"queue": self.spec.name, "limit": limit, "deadline": self.spec.deadline}
            )
            rows = [JobRow.from_values(r) for r in await cur.fetchall()]
        rows.sort(key=lambda r: (r.priority, r.run_at, r.id))
        self.claimed += len(rows)
        self.claims += 1
        return rows

    async def _until_next_due(self, poll: float) -> float:
        try:
            async with self.worker.pool.connection() as conn:
                cur = await conn.execute(NEXT_DUE, {"queue": self.spec.name})
                row = await cur.fetchone()
        except (psycopg.OperationalError, psycopg.InterfaceError, OSError):
            return poll
        if row is None or row[0] is None:
            return poll
        return max(0.0, min(poll, float(row[0])))

    def _start(self, row: JobRow) -> None:
        worker = self.worker
        worker.dispatcher.dispatch(JobEvent.Started(row, row.args))
        task = asyncio.get_running_loop().create_task(self._execute(row), name=f"awa-job-{row.id}")
        self.tasks.add(task)
        task.add_done_callback(self._done)

    async def _execute(self, row: JobRow) -> None:
        worker = self.worker
        started = time.monotonic()
        try:
            result = await execute(
                worker.app, row, worker.services, worker._threads, worker.running
            )
        except Exception:
            log.exception(
                "executing job %s failed inside awa", row.id, extra={"action": "execute_bug"}
            )
            worker.running.pop(row.id, None)
            return
        log.debug("job %s %s in %.3fs", row.id, result.action, time.monotonic() - started)
        worker.submit(result)

    def _done(self, task: asyncio.Task[Any]) -> None:
        self.tasks.discard(task)
        if self._has_work and not self.worker.stopping:
            self._wake.set()
