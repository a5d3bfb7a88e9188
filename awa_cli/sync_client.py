"""``Client``: the synchronous twin of :class:`~awa_cli.client.AsyncClient`.

Each method runs the AsyncClient method of the same name on a private event loop on a daemon
thread, so both clients behave identically. The methods are written out (not forwarded by
``__getattr__``) so that users' type checkers see their signatures;
``tests/unit/test_sync_client.py`` fails when a public AsyncClient method has no twin here or
the parameters differ.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Coroutine, Iterable
from concurrent.futures import Future
from datetime import timedelta
from typing import TYPE_CHECKING, Any, TypeVar

from awa_cli.client import AsyncClient, DefaultAction, ResolveResult

if TYPE_CHECKING:
    from awa_cli.app import App
    from awa_cli.db.migrations import Migration
    from awa_cli.dispatch import Dispatcher, EventHook
    from awa_cli.history import JobTimeline
    from awa_cli.jobs import JobRow, JobState
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


class Client:
    """The synchronous client: the same operations as :class:`AsyncClient`."""

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

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self, hook_timeout: float = 5.0) -> None:
        """Wait up to ``hook_timeout`` for dispatched hooks, then close the pool."""
        if self._runner.thread.is_alive():
            self._runner.run(self._async.close(hook_timeout))
            self._runner.stop()

    # -- enqueue and inspect ---------------------------------------------------------------
    def migrate(self) -> list[Migration]:
        """Apply the pending schema migrations; returns the ones applied."""
        return self._runner.run(self._async.migrate())

    def insert(self, args: Any, **insert_options: Any) -> JobRow:
        """Enqueue one job (an unset kind or queue comes from this client's app)."""
        return self._runner.run(self._async.insert(args, **insert_options))

    def insert_many(self, args_list: Iterable[Any], **insert_options: Any) -> int:
        """Insert many jobs in one statement; the options apply to every row.

        Rows whose unique key is already held are skipped; returns the number inserted.
        """
        return self._runner.run(self._async.insert_many(args_list, **insert_options))

    def get_job(self, job_id: int) -> JobRow:
        """The job with this id (``JobNotFound`` if there is none)."""
        return self._runner.run(self._async.get_job(job_id))

    def wait_for_job(self, job_id: int, timeout: float | timedelta | None = None) -> JobRow:
        """The job once it is completed, failed or cancelled (``TimeoutError``,
        ``JobNotFound``); see :meth:`AsyncClient.wait_for_job`."""
        return self._runner.run(self._async.wait_for_job(job_id, timeout))

    def job_history(self, job_id: int) -> JobTimeline:
        """The job's timeline (``JobNotFound`` if there is no such job)."""
        return self._runner.run(self._async.job_history(job_id))

    def list_jobs(
        self,
        state: JobState | str | None = None,
        kind: str | None = None,
        queue: str | None = None,
        limit: int = 100,
    ) -> list[JobRow]:
        """Jobs matching every filter given, newest first, at most ``limit``."""
        return self._runner.run(self._async.list_jobs(state, kind, queue, limit))

    def queue_stats(self, queue: str | None = None) -> list[dict[str, Any]]:
        """Per queue holding jobs (or just ``queue``): counts per state, completions per second
        over the last minute and the oldest available job's age."""
        return self._runner.run(self._async.queue_stats(queue))

    def cancel(self, job_id: int) -> JobRow:
        """Cancel a job that has not finished (Cancelled)."""
        return self._runner.run(self._async.cancel(job_id))

    def retry(self, job_id: int) -> JobRow:
        """Make a failed, cancelled, retryable or scheduled job available now, attempts reset."""
        return self._runner.run(self._async.retry(job_id))

    # -- callbacks -------------------------------------------------------------------------
    def complete_external(
        self, callback_id: Any, payload: Any = None, run_lease: int | None = None
    ) -> JobRow:
        """Complete the job waiting on ``callback_id`` (Completed, duration 0)."""
        return self._runner.run(self._async.complete_external(callback_id, payload, run_lease))

    def fail_external(self, callback_id: Any, error: str, run_lease: int | None = None) -> JobRow:
        """Fail the job waiting on ``callback_id`` (Exhausted with ``error`` verbatim)."""
        return self._runner.run(self._async.fail_external(callback_id, error, run_lease))

    def retry_external(self, callback_id: Any, run_lease: int | None = None) -> JobRow:
        """Make the waiting job available again with its attempts reset (Retried)."""
        return self._runner.run(self._async.retry_external(callback_id, run_lease))

    def resume_external(self, callback_id: Any, payload: Any = None) -> JobRow:
        """Hand ``payload`` to the job and let it continue (no event of its own)."""
        return self._runner.run(self._async.resume_external(callback_id, payload))

    def heartbeat_callback(self, callback_id: Any, timeout: float | timedelta = 3600) -> JobRow:
        """Extend the callback's timeout to now + ``timeout``."""
        return self._runner.run(self._async.heartbeat_callback(callback_id, timeout))

    def waiting_job(self, callback_id: Any, run_lease: int | None = None) -> JobRow:
        """The job waiting on ``callback_id``, unchanged (CallbackNotFound if none)."""
        return self._runner.run(self._async.waiting_job(callback_id, run_lease))

    def resolve_callback(
        self,
        callback_id: Any,
        payload: Any = None,
        default_action: DefaultAction = "ignore",
        run_lease: int | None = None,
    ) -> ResolveResult:
        """Resolve the callback by ``default_action``: ``complete`` (with the payload),
        ``fail`` or ``ignore`` (nothing changes; the job keeps waiting)."""
        return self._runner.run(
            self._async.resolve_callback(callback_id, payload, default_action, run_lease)
        )


__all__ = ["Client"]
