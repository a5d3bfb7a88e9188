"""LISTEN on the channels of the worker's queues (and for callback resumes and operator
cancels) on one dedicated connection, reconnecting with backoff; after a reconnect every queue is woken, since
notifications sent while disconnected are lost.

The connection needs a session of its own: behind a transaction-mode pooler give the worker
``[database] listen_url`` (a direct or session-mode URL), else notifications never arrive
and the worker polls (it says so at start; ``awa doctor`` too)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

import psycopg

from awa_cli.db.channels import (
    CALLBACK_CHANNEL,
    CANCEL_CHANNEL,
    LIMIT_CHANNEL,
    listen,
    queue_channels,
)
from awa_cli.db.retry import Backoff, reconnect_later
from awa_cli.db.roundtrip import notifications_work

if TYPE_CHECKING:
    from awa_cli.worker.callbacks import CallbackServices
    from awa_cli.worker.queues import QueueRunner

log = logging.getLogger("awa.worker")


class Listener:
    def __init__(
        self,
        dsn: str,
        runners: Mapping[str, QueueRunner],
        services: CallbackServices,
        poll_interval: float = 1.0,
        on_cancel: Callable[[int], object] | None = None,
        on_limit: Callable[[str], object] | None = None,
    ) -> None:
        self.on_limit = on_limit  # slots of this limit freed on another worker (LIMIT_CHANNEL)
        self.on_cancel = on_cancel  # an operator cancelled this job id (CANCEL_CHANNEL)
        self.dsn = dsn
        self.services = services
        self.runners = list(runners.values())
        # Filled on connect: each queue's channel comes from the schema (awa.channel_for).
        self.by_channel: dict[str, list[QueueRunner]] = {}
        self.connected = asyncio.Event()
        self.poll_interval = poll_interval
        self.checked_notify = False
        self.notify_works = True

    async def run(self, stopping: asyncio.Event) -> None:
        backoff = Backoff()
        while not stopping.is_set():
            try:
                async with await psycopg.AsyncConnection.connect(
                    self.dsn, autocommit=True, prepare_threshold=None
                ) as conn:
                    channels = await queue_channels(conn, {r.spec.name for r in self.runners})
                    self.by_channel = {}
                    for runner in self.runners:
                        channel = channels[runner.spec.name]
                        self.by_channel.setdefault(channel, []).append(runner)
                    extra = [LIMIT_CHANNEL] if self.on_limit is not None else []
                    await listen(conn, [*self.by_channel, CALLBACK_CHANNEL, CANCEL_CHANNEL, *extra])
                    if not self.checked_notify:
                        # Behind a transaction-mode pooler LISTEN/NOTIFY does not work: say
                        # so once (awa doctor says it too); pickups then wait for the poll.
                        # sent from a second connection: a transaction pooler may hand one
                        # connection's LISTEN and NOTIFY to the same server session
                        async with await psycopg.AsyncConnection.connect(
                            self.dsn, autocommit=True, prepare_threshold=None
                        ) as sender:
                            self.notify_works = await notifications_work(
                                conn, poll_interval=self.poll_interval, sender=sender
                            )
                        self.checked_notify = True
                    self.connected.set()
                    backoff.reset()
                    self._wake_all()  # anything sent while we were away
                    self.services.wake_all_waiters()
                    async for notify in conn.notifies():
                        self._on_notify(notify)
            except asyncio.CancelledError:
                raise
            except (psycopg.Error, OSError) as exc:
                self.connected.clear()
                if stopping.is_set():
                    return
                await reconnect_later(log, "listener", exc, backoff, stopping)

    def _on_notify(self, notify: Any) -> None:
        if notify.channel == CANCEL_CHANNEL:
            self.services.wake_waiter(notify.payload)  # a waiting handler sees it at once
            if self.on_cancel is not None and notify.payload.isdigit():
                self.on_cancel(int(notify.payload))
            return
        if notify.channel == LIMIT_CHANNEL:
            if self.on_limit is not None:
                self.on_limit(notify.payload)
            return
        if notify.channel == CALLBACK_CHANNEL:
            self.services.wake_waiter(notify.payload)
            return
        for runner in self.by_channel.get(notify.channel, ()):
            runner.wake()

    def _wake_all(self) -> None:
        for runner in self.runners:
            runner.wake()
