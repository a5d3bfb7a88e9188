"""The hand-written half of the synchronous ``Client`` (:mod:`awa_cli.sync_client`).

``tools/gen_sync.py`` generates ``Client(SyncClientBase)`` with one method per public
AsyncClient coroutine; what is not a plain forward (the constructor, the properties, ``close``,
the context manager, ``batch``) is here, written and checked like any other module.
"""

from __future__ import annotations

import asyncio
import atexit
import threading
import weakref
from collections.abc import Coroutine, Iterable
from concurrent.futures import Future
from typing import TYPE_CHECKING, Any, Self, TypeVar

from awa_cli.client import AsyncClient
from awa_cli.client_batches import SyncBatchWriter

if TYPE_CHECKING:
    from awa_cli.app import App
    from awa_cli.batches import Batch
    from awa_cli.dispatch import Dispatcher, EventHook
    from awa_cli.outcomes import OutcomeCore

T = TypeVar("T")


class _LoopThread:
    """A private event loop on a daemon thread, for the synchronous client."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, name="awa-client", daemon=True)
        self.thread.start()

    def run(self, coro: Coroutine[Any, Any, T]) -> T:
        future: Future[T] = asyncio.run_coroutine_threadsafe(coro, self.loop)
        return future.result()

    def stop(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(timeout=5)
        self.loop.close()


def _close_at_exit(ref: weakref.ReferenceType[SyncClientBase]) -> None:
    client = ref()
    if client is None:
        return
    try:
        client.close(hook_timeout=1.0)
    except Exception:  # at exit, best-effort: a closed or broken pool is no error
        pass


class SyncClientBase:
    """What the synchronous ``Client`` holds and does by hand: its loop thread, the
    AsyncClient it drives, the properties, the context manager, ``close`` and ``batch``; the
    generated ``Client`` (:mod:`awa_cli.sync_client`) adds one twin per AsyncClient method."""

    _runner: _LoopThread

    def __init__(
        self,
        dsn: str,
        app: App | None = None,
        *,
        plugin_hooks: Iterable[EventHook] = (),
        max_connections: int = 10,
    ) -> None:
        self._runner = _LoopThread()
        self._async = AsyncClient(
            dsn, app, plugin_hooks=plugin_hooks, max_connections=max_connections
        )
        # A client left open closes at interpreter exit, while its loop thread still runs:
        # otherwise the pool's tasks are destroyed pending ("Task was destroyed ...").
        atexit.register(_close_at_exit, weakref.ref(self))

    # -- what the async client holds -------------------------------------------------------
    @property
    def dsn(self) -> str:
        return self._async.dsn

    @property
    def app(self) -> App | None:
        return self._async.app

    @property
    def dispatcher(self) -> Dispatcher | None:
        return self._async.dispatcher

    @property
    def core(self) -> OutcomeCore:
        return self._async.core

    # -- for harnesses built on this client (awa_cli.testing.AwaTestClient) ----------------
    @property
    def async_client(self) -> AsyncClient:
        """The :class:`AsyncClient` this client runs on its own event-loop thread."""
        return self._async

    @property
    def loop(self) -> asyncio.AbstractEventLoop:
        """This client's event loop (it runs on a private thread)."""
        return self._runner.loop

    def call(self, coro: Coroutine[Any, Any, T]) -> T:
        """Run ``coro`` on this client's event-loop thread and return its result."""
        return self._runner.run(coro)

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self, hook_timeout: float = 5.0) -> None:
        """Wait up to ``hook_timeout`` for dispatched hooks, then close the pool."""
        if self._runner.thread.is_alive() and not self._runner.loop.is_closed():
            self._runner.run(self._async.close(hook_timeout))
            self._runner.stop()

    def batch(self, batch: Batch | None = None) -> SyncBatchWriter:
        """An open batch to fill: ``with client.batch(awa.Batch(on_success=...)) as b:
        b.insert(...)``; sealed when the block exits normally."""
        return SyncBatchWriter(self._runner.run, self._async.batch(batch))


__all__ = ["SyncClientBase"]
