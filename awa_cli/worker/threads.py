"""The threads plain ``def`` handlers run in: daemon threads, so none keeps the process alive.

``concurrent.futures.ThreadPoolExecutor`` joins its threads at interpreter exit, so one
handler that never returns would hold ``awa worker`` alive past its ``shutdown_timeout``
(architecture §15.6). Python cannot stop a thread: a handler still running when its deadline or
the drain passes is *abandoned* — the worker stops waiting for it (the attempt becomes
retryable, its late result is fenced by the lease guard) and the pool may start one more
thread in its place, so an abandoned handler does not shrink the worker's capacity.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable
from concurrent.futures import Executor, Future
from typing import Any

_Item = tuple[Future[Any], Callable[..., Any], tuple[Any, ...], dict[str, Any]]


class DaemonThreads(Executor):
    """A growing pool of up to ``max_workers`` daemon threads (plus one per abandoned task)."""

    def __init__(self, max_workers: int, thread_name_prefix: str = "awa-handler") -> None:
        self.max_workers = max_workers
        self.prefix = thread_name_prefix
        self._queue: queue.SimpleQueue[_Item | None] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._threads = 0
        self._idle = 0
        self._shutdown = False

    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Future[Any]:
        future: Future[Any] = Future()
        with self._lock:
            if self._shutdown:
                raise RuntimeError("cannot schedule new handlers after shutdown")
            self._queue.put((future, fn, args, kwargs))
            if self._idle > 0:
                self._idle -= 1  # a waiting thread takes it
            elif self._threads < self.max_workers:
                self._threads += 1
                name = f"{self.prefix}_{self._threads}"
                threading.Thread(target=self._work, name=name, daemon=True).start()
        return future

    def abandon(self) -> None:
        """A thread is stuck in a handler the worker no longer waits for: allow one more."""
        with self._lock:
            self.max_workers += 1

    def _work(self) -> None:
        while True:  # started for one item; counted idle only between items
            item = self._queue.get()
            if item is None:
                return
            future, fn, args, kwargs = item
            if future.set_running_or_notify_cancel():
                try:
                    future.set_result(fn(*args, **kwargs))
                except BaseException as exc:  # handed to the awaiting coroutine, as the pool does
                    future.set_exception(exc)
            del item, future, fn, args, kwargs
            with self._lock:
                self._idle += 1

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        """Stop taking work; queued work is cancelled. Never waits for a running handler:
        the threads are daemons, so the process may exit under them."""
        with self._lock:
            self._shutdown = True
            threads = self._threads
        if cancel_futures:
            while True:
                try:
                    item = self._queue.get_nowait()
                except queue.Empty:
                    break
                if item is not None:
                    item[0].cancel()
        for _ in range(threads):
            self._queue.put(None)
