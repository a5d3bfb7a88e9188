"""Batched finalisation: attempt results are queued and committed many per statement.

A result stays queued until the outcome core has applied it; database errors are retried
with backoff, so a connection drop or a server restart loses no completion. Which results
are finalised together is the core's decision (``OutcomeCore.finalize_plan``); this module
only batches and retries.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

import psycopg

from awa_cli import defaults
from awa_cli.attempts import AttemptResult, Finalized
from awa_cli.db.retry import first_line
from awa_cli.db.pools import recheck
from awa_cli.outcomes import FinalizeGroup, OutcomeCore

log = logging.getLogger("awa.worker")

MAX_BATCH = 512
# consecutive ids per counter shard, of a batch's members (awa.batch_shard) and of a wide
# child's parents (awa.dependency_shard)
SHARD_RUN = 16
# what a result counts on: a batch member on its batch's shards, a workflow step on the
# shards of a wide step after it
_SHARDED_BY = ("awa.batch_id", "awa.workflow_id")

__all__ = ["MAX_BATCH", "Finalizer", "recheck"]


class Finalizer:
    def __init__(
        self,
        core: OutcomeCore,
        on_done: Callable[[AttemptResult, Finalized], None],
        max_batch: int = MAX_BATCH,
        parallel: int = 2,
    ) -> None:
        self.core = core
        self.on_done = on_done
        self.max_batch = max_batch
        # Two flushes in flight on separate connections: while one waits for its durable
        # commit, the results that arrive meanwhile are already on their way.
        self.parallel = parallel
        # One queue per flush loop. A batch member or a workflow step goes to the loop of its
        # counter shard (sql/0012_batches.sql, sql/0015_dependency_shards.sql: runs of 16 ids
        # per shard), so the two loops never update the same shard row and neither waits for
        # the other's commit; any other result goes to the shorter queue.
        self._queues: list[asyncio.Queue[AttemptResult | None]] = [
            asyncio.Queue() for _ in range(parallel)
        ]
        self._tasks: list[asyncio.Task[None]] = []
        self.in_flight = 0

    def start(self) -> None:
        loop = asyncio.get_running_loop()
        self._tasks = [
            loop.create_task(self._run(queue), name=f"awa-finalizer-{i}")
            for i, queue in enumerate(self._queues)
        ]

    @property
    def tasks(self) -> list[asyncio.Task[None]]:
        """The flush loops (the worker supervises them)."""
        return list(self._tasks)

    def submit(self, result: AttemptResult) -> None:
        self.in_flight += 1
        self._queue_for(result).put_nowait(result)

    def _queue_for(self, result: AttemptResult) -> asyncio.Queue[AttemptResult | None]:
        metadata = result.job.metadata or {}
        if any(key in metadata for key in _SHARDED_BY):
            return self._queues[(result.job.id // SHARD_RUN) % len(self._queues)]
        return min(self._queues, key=lambda q: q.qsize())

    async def stop(self) -> None:
        """Flush everything submitted so far, then stop."""
        for queue in self._queues[: len(self._tasks)]:
            queue.put_nowait(None)
        if self._tasks:
            await asyncio.gather(*self._tasks)

    async def _run(self, queue: asyncio.Queue[AttemptResult | None]) -> None:
        stopping = False
        while not stopping:
            first = await queue.get()
            if first is None:
                break
            batch = [first]
            while len(batch) < self.max_batch and not queue.empty():
                item = queue.get_nowait()
                if item is None:
                    stopping = True  # this flusher's sentinel: flush what it holds, then stop
                    break
                batch.append(item)
            # Each group is retried on its own: once a group committed it is never re-applied.
            for group in self.core.finalize_plan(batch):
                await self._apply_group(group)

    async def _apply_group(self, group: FinalizeGroup) -> None:
        delay = defaults.LOOP_BACKOFF_MIN
        while True:
            try:
                done = await self.core.finalize_group(group)
                break
            except (psycopg.Error, OSError) as exc:
                # Any database error (architecture §15.7): a lost connection, a read-only server, a
                # revoked grant. The results stay queued and are retried, never dropped.
                log.error(
                    "finalising %d jobs failed, retrying in %.1fs: %s",
                    len(group.results),
                    delay,
                    first_line(exc),
                    extra={
                        "action": "finalize_retry",
                        "jobs": len(group.results),
                        "retry_in": delay,
                    },
                )
                # The server may have dropped every idle connection (a restart, terminated
                # backends): weed them out, or each retry would draw another dead one.
                try:
                    await recheck(self.core.pool)
                except Exception:  # best-effort
                    pass
                await asyncio.sleep(delay)
                delay = min(delay * 2, defaults.LOOP_BACKOFF_MAX)
        by_id = {item.job_id: item for item in done}
        for result in group.results:
            self.in_flight -= 1
            self.on_done(result, by_id[result.job.id])
