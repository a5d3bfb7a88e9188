"""The heartbeat: every ``heartbeat_interval`` one statement touches all running attempts of
this worker (``OutcomeCore.heartbeat``) and writes the progress they reported since; an attempt whose row is no longer ours (cancelled,
rescued, claimed again) is fenced, so its handler's ``job.is_cancelled()`` turns true."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Sequence

import psycopg

from awa_cli.db.retry import Backoff, first_line
from awa_cli.worker.services import RunningJobs

log = logging.getLogger("awa.worker")

Beat = Callable[[Sequence[tuple[int, int]], Sequence[str | None]], Awaitable[set[int]]]
"""Touch these (id, run_lease) attempts, writing their progress JSON (None: unchanged); return
the ids still ours (``OutcomeCore.heartbeat``)."""


class Heartbeat:
    def __init__(
        self,
        beat: Beat,
        running: RunningJobs,
        interval: float,
        recheck: Callable[[], Awaitable[None]],
    ) -> None:
        self.beat = beat
        self.running = running
        self.interval = interval
        self.recheck = recheck  # after a failed beat: replace the pool's broken connections

    async def run(self, stopping: asyncio.Event) -> None:
        backoff = Backoff()
        wait = self.interval
        while not stopping.is_set():
            try:
                await asyncio.wait_for(stopping.wait(), timeout=wait)
                return
            except TimeoutError:
                pass
            try:
                await self.once()
            except (psycopg.Error, OSError) as exc:
                # Any database error (architecture §15.7): retried sooner than the next beat, with
                # backoff, up to the interval (a beat later than that would risk a rescue).
                wait = min(backoff.next(), self.interval)
                log.error(
                    "heartbeat failed, retrying in %.1fs: %s",
                    wait,
                    first_line(exc),
                    extra={"action": "heartbeat_failed", "retry_in": wait},
                )
                try:
                    await self.recheck()
                except Exception:  # best-effort
                    pass
            else:
                backoff.reset()
                wait = self.interval

    async def once(self) -> None:
        """Touch every running attempt in one statement; fence those no longer ours."""
        jobs = self.running.beating()
        if not jobs:
            return
        # Progress reported since its last write rides along (at most once a second per job).
        progress = [j.control.progress.take() for j in jobs]
        alive = await self.beat([(j.id, j.run_lease) for j in jobs], progress)
        for job in jobs:
            if job.id not in alive:
                self.running.fence(job.id, job.run_lease)
