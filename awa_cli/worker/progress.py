"""The progress flush: once a second, the progress running handlers reported since its last
write goes to the database in one statement for all of them (the heartbeat's statement, for
just those jobs), so ``job.set_progress()`` costs a handler no round trip and a job's progress
is written at most once a second. The heartbeat carries it too, and the attempt's outcome
always writes the latest value (``finalize_changed``)."""

from __future__ import annotations

import asyncio
import logging
import time

from awa_cli.progress import MIN_WRITE_INTERVAL
from awa_cli.worker.heartbeat import Beat
from awa_cli.worker.services import RunningJobs

log = logging.getLogger("awa.worker")


class ProgressFlush:
    def __init__(self, beat: Beat, running: RunningJobs, interval: float = MIN_WRITE_INTERVAL):
        self.beat = beat
        self.running = running
        self.interval = interval
        self.writes = 0  # statements run (for tests and the benchmark)

    async def run(self, stopping: asyncio.Event) -> None:
        while not stopping.is_set():
            try:
                await asyncio.wait_for(stopping.wait(), timeout=self.interval)
                return
            except TimeoutError:
                pass
            try:
                await self.once()
            except Exception as exc:  # the next tick, the heartbeat or the outcome writes it
                log.warning("writing progress failed: %s", exc, extra={"action": "progress_failed"})

    async def once(self) -> None:
        """Write the progress of every job with news, in one statement; fence lost ones."""
        now = time.monotonic()
        jobs = [j for j in self.running.beating() if j.control.progress.due(now)]
        if not jobs:
            return
        progress = [j.control.progress.take(now) for j in jobs]
        self.writes += 1
        try:
            alive = await self.beat([(j.id, j.run_lease) for j in jobs], progress)
        except Exception:
            for job in jobs:  # written by the next tick (or the outcome) instead
                job.control.progress.untake()
            raise
        for job in jobs:
            if job.id not in alive:
                self.running.fence(job.id, job.run_lease)
