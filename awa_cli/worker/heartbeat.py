"""The heartbeat: every ``heartbeat_interval`` one statement touches all running attempts of
this worker (``OutcomeCore.heartbeat``) and writes the progress they reported since; an attempt whose row is no longer ours (cancelled,
rescued, claimed again) is fenced, so its handler's ``job.is_cancelled()`` turns true.

After a failed beat (the database is away) the next one is due as soon as the worker has a
connection again: the pools tell :meth:`Heartbeat.reconnected` of every new connection, so
the running jobs are touched by the first statement after a reconnect, well inside the
leader's grace (architecture §18: a leader judges heartbeats only after it has been
connected for ``heartbeat_staleness`` plus one ``heartbeat_interval``)."""

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
        self.failing = False  # the last beat failed: the next one goes at the next reconnect
        self._wake = asyncio.Event()

    def reconnected(self) -> None:
        """A pool opened a new connection: if the last beat failed, beat now."""
        if self.failing:
            self._wake.set()

    async def _wait(self, stopping: asyncio.Event, timeout: float) -> bool:
        """Wait ``timeout`` seconds or until woken; True when stopping."""
        waits = {asyncio.ensure_future(stopping.wait()), asyncio.ensure_future(self._wake.wait())}
        try:
            await asyncio.wait(waits, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for w in waits:
                w.cancel()
        self._wake.clear()
        return stopping.is_set()

    async def run(self, stopping: asyncio.Event) -> None:
        backoff = Backoff()
        wait = self.interval
        while not stopping.is_set():
            if await self._wait(stopping, wait):
                return
            try:
                await self.once()
            except (psycopg.Error, OSError) as exc:
                # Any database error (architecture §18): retried sooner than the next beat, with
                # backoff, up to the interval (a beat later than that would risk a rescue).
                wait = min(backoff.next(), self.interval)
                self.failing = True
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
                if self.failing:
                    log.info("heartbeat resumed", extra={"action": "heartbeat_resumed"})
                self.failing = False
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
