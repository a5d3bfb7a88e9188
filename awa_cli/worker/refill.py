"""Slots of limited keys refill as they free (architecture §13).

A runner whose claim came back short (every key it could take at ``max_running``, or out of
rate budget) waits: for the poll, a NOTIFY, or a wake-up. Here are the wake-ups a limit
needs. Once the finalizer has committed the result of a job under a limit (its slot is free
in the database only then), every runner of this worker whose queue the limit can select
and whose last claim was short claims again at once (the others claim as their slots free
anyway); and when there is such a runner (other workers likely wait on the same keys
too), the limit's name is notified on ``LIMIT_CHANNEL``, so the
other workers' runners under that limit claim too. The NOTIFYs are coalesced: one statement
for every limit that freed slots since the last one was sent, at most one in flight, never
inside the finalizing transaction, and none while no claim comes back short (a limit that
does not bind costs nothing).

A key out of rate budget is woken by time, not by a finish: the runner sleeps until the
window frees (``seconds_until_due`` includes it).

:class:`KeyPaths` warns about jobs whose args lack their limit's key path.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from awa_cli.limits import Limit, args_have_path, limit_for

if TYPE_CHECKING:
    from awa_cli.worker.queues import QueueRunner

log = logging.getLogger("awa.worker")


class Refill:
    def __init__(
        self,
        runners: Mapping[str, QueueRunner],
        limits: Sequence[Limit],
        notify: Callable[[list[str]], Awaitable[None]],
    ) -> None:
        self.limits = tuple(limits)
        self.notify = notify
        # limit name -> the runners of the queues it can select jobs of
        self.by_limit: dict[str, list[QueueRunner]] = {
            lim.name: [r for q, r in runners.items() if lim.kind is not None or lim.queue == q]
            for lim in self.limits
        }
        self._freed: set[str] = set()  # limits with results committed since the last flush
        self._scheduled = False
        self._to_notify: set[str] = set()
        self._sender: asyncio.Task[Any] | None = None
        self.notifies = 0  # statements sent

    def finalized(self, kind: str, queue: str) -> None:
        """The result of a job of ``kind`` in ``queue`` committed: its slot is free."""
        if not self.limits:
            return
        limit = limit_for(self.limits, kind, queue)
        if limit is None:
            return
        self._freed.add(limit.name)
        if not self._scheduled:
            # after the finalizer's loop over its batch: one flush per committed batch
            self._scheduled = True
            asyncio.get_running_loop().call_soon(self._flush)

    def freed_elsewhere(self, name: str) -> None:
        """Another worker's results of limit ``name`` committed (a NOTIFY): claim again."""
        for runner in self.by_limit.get(name, ()):
            if runner.short:  # the others claim as their slots free anyway
                runner.wake()

    def _flush(self) -> None:
        self._scheduled = False
        freed, self._freed = self._freed, set()
        for name in sorted(freed):
            # A runner whose last claim filled its request claims again by itself as its
            # slots free; only one whose claim came back short waits (for this).
            short = [r for r in self.by_limit.get(name, []) if r.short]
            if short:
                self._to_notify.add(name)
            for runner in short:
                runner.wake()
        if self._to_notify and (self._sender is None or self._sender.done()):
            self._sender = asyncio.get_running_loop().create_task(
                self._send(), name="awa-refill-notify"
            )

    async def _send(self) -> None:
        while self._to_notify:
            names, self._to_notify = sorted(self._to_notify), set()
            try:
                await self.notify(names)
                self.notifies += 1
            except Exception as exc:  # best-effort: the other workers' poll still finds them
                log.debug("notifying freed slots of %s failed: %s", names, exc)

    async def close(self) -> None:
        if self._sender is not None:
            self._sender.cancel()
            await asyncio.gather(self._sender, return_exceptions=True)


class KeyPaths:
    """A kind with dict args accepts any ``args.`` key path when the limits are checked
    (nothing says which fields its args have), so the first claimed job of each such limit
    and kind whose args lack the path is logged at WARNING: it runs under the key ``''``
    (one key for all such jobs) unless it was enqueued with a ``concurrency_key``."""

    def __init__(self, limits: Sequence[Limit]) -> None:
        self.limits = tuple(limits)
        self.watched = any(lim.key_path for lim in self.limits)
        self.warned: set[tuple[str, str]] = set()

    def check(self, kind: str, queue: str, args: Any, job_id: int) -> None:
        if not self.watched:
            return
        limit = limit_for(self.limits, kind, queue)
        if limit is None or not limit.key_path or (limit.name, kind) in self.warned:
            return
        if args_have_path(args, limit.key_path):
            return
        self.warned.add((limit.name, kind))
        log.warning(
            "job %s of kind %s has no %s in its args: unless it was enqueued with a "
            "concurrency_key it runs under the key '' of [limits.%s] (one key for every such "
            "job); logged once per limit and kind",
            job_id,
            kind,
            limit.key,
            limit.name,
            extra={"action": "limit_key_missing", "job_id": job_id, "limit": limit.name},
        )
