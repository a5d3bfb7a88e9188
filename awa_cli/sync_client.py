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
from collections.abc import Coroutine, Iterable, Mapping
from concurrent.futures import Future
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, TypeVar

from awa_cli.client import AsyncClient, DefaultAction, ResolveResult
from awa_cli.sync_reads import SyncInspectReads

if TYPE_CHECKING:
    from psycopg_pool import AsyncConnectionPool

    from awa_cli.app import App
    from awa_cli.db.migrations import Migration
    from awa_cli.dispatch import Dispatcher, EventHook
    from awa_cli.history import JobTimeline
    from awa_cli.jobs import JobRow, JobState
    from awa_cli.periodic import PeriodicJob
    from awa_cli.admin import AuditEntry, QueueInfo
    from awa_cli.client_ops import States
    from awa_cli.deadletters import DeadLetter, DlqDepth
    from awa_cli.outcomes import OutcomeCore, Progress

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


class Client(SyncInspectReads):
    """The synchronous client: the same operations as :class:`AsyncClient`."""

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

    def ensure_open(self) -> AsyncConnectionPool:
        """Open the connection pool now instead of on first use, so an unreachable database
        fails here with libpq's own message; returns the pool (it lives on this client's
        event loop: use it only through :meth:`call`)."""
        return self._runner.run(self._async.ensure_open())

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

    def limit_status(self, job_id: int) -> dict[str, Any]:
        """The job's place under the limits (see ``AsyncClient.limit_status``)."""
        return self._runner.run(self._async.limit_status(job_id))

    def why_not_running(self, job_id: int) -> str | None:
        """Why a runnable job is not running (see ``AsyncClient.why_not_running``)."""
        return self._runner.run(self._async.why_not_running(job_id))

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

    # -- periodic jobs (DESIGN §9; ``actor`` records the action in awa.audit_log) ----------
    def list_periodic(self) -> list[PeriodicJob]:
        """Every stored schedule by name, with its fire state and its last job's state."""
        return self._runner.run(self._async.list_periodic())

    def pause_periodic(self, name: str, *, actor: str | None = None) -> PeriodicJob:
        """Stop firing ``name`` (survives restarts and redeploys); PeriodicNotFound if none."""
        return self._runner.run(self._async.pause_periodic(name, actor=actor))

    def resume_periodic(self, name: str, *, actor: str | None = None) -> PeriodicJob:
        """Fire ``name`` again from its next fire time (the ones while paused are skipped)."""
        return self._runner.run(self._async.resume_periodic(name, actor=actor))

    def trigger_periodic(self, name: str, *, actor: str | None = None) -> JobRow:
        """Enqueue ``name``'s job now (``awa.fire_at`` = now); the schedule is unchanged."""
        return self._runner.run(self._async.trigger_periodic(name, actor=actor))

    def delete_periodic(self, name: str, *, actor: str | None = None) -> PeriodicJob:
        """Drop ``name`` (a worker whose app still defines it re-creates it at its start)."""
        return self._runner.run(self._async.delete_periodic(name, actor=actor))

    # -- queue controls, bulk operations, the dead-letter queue (client_ops.py) ------------
    def pause_queue(self, queue: str) -> QueueInfo:
        """Pause ``queue``: no worker claims from it; running jobs finish; inserts work."""
        return self._runner.run(self._async.pause_queue(queue))

    def resume_queue(self, queue: str) -> QueueInfo:
        """Resume ``queue`` and wake its workers."""
        return self._runner.run(self._async.resume_queue(queue))

    def list_queues(self, configured: Iterable[str] = ()) -> list[QueueInfo]:
        """Every known queue with its pause and dead-letter flags."""
        return self._runner.run(self._async.list_queues(configured))

    def paused_queues(self) -> list[str]:
        """The names of the paused queues."""
        return self._runner.run(self._async.paused_queues())

    def audit_log(
        self,
        *,
        actor: str | None = None,
        action: str | None = None,
        target: str | None = None,
        since: datetime | None = None,
        limit: int = 100,
    ) -> list[AuditEntry]:
        """Recorded operator actions, newest first."""
        return self._runner.run(
            self._async.audit_log(
                actor=actor, action=action, target=target, since=since, limit=limit
            )
        )

    def retry_jobs(
        self,
        state: States = None,
        kind: str | None = None,
        queue: str | None = None,
        *,
        all: bool = False,
        dry_run: bool = False,
        progress: Progress | None = None,
    ) -> int:
        """Retry every matching failed or cancelled job; the number retried."""
        return self._runner.run(
            self._async.retry_jobs(state, kind, queue, all=all, dry_run=dry_run, progress=progress)
        )

    def cancel_jobs(
        self,
        state: States = None,
        kind: str | None = None,
        queue: str | None = None,
        *,
        all: bool = False,
        dry_run: bool = False,
        progress: Progress | None = None,
    ) -> int:
        """Cancel every matching pending or waiting job (Cancelled, on_cancelled specs)."""
        return self._runner.run(
            self._async.cancel_jobs(state, kind, queue, all=all, dry_run=dry_run, progress=progress)
        )

    def purge_jobs(
        self,
        state: States = None,
        kind: str | None = None,
        queue: str | None = None,
        older_than: float | timedelta | None = None,
        *,
        all: bool = False,
        dry_run: bool = False,
        progress: Progress | None = None,
    ) -> int:
        """Delete matching finished jobs; the number deleted."""
        return self._runner.run(
            self._async.purge_jobs(
                state, kind, queue, older_than, all=all, dry_run=dry_run, progress=progress
            )
        )

    def cancel_by_unique_key(
        self,
        args: Any,
        *,
        kind: str | None = None,
        queue: str | None = None,
        unique_opts: Mapping[str, Any] | None = None,
    ) -> JobRow | None:
        """Cancel the unfinished job holding this unique key; None when none holds it."""
        return self._runner.run(
            self._async.cancel_by_unique_key(args, kind=kind, queue=queue, unique_opts=unique_opts)
        )

    def list_dlq(
        self, queue: str | None = None, kind: str | None = None, limit: int = 100
    ) -> list[DeadLetter]:
        """Dead letters, newest first."""
        return self._runner.run(self._async.list_dlq(queue, kind, limit))

    def get_dlq_job(self, id: int) -> DeadLetter:
        """One dead letter (JobNotFound when there is none)."""
        return self._runner.run(self._async.get_dlq_job(id))

    def dlq_depth(self, queue: str | None = None) -> DlqDepth:
        """How many dead letters there are, in total and per queue."""
        return self._runner.run(self._async.dlq_depth(queue))

    def retry_from_dlq(
        self,
        id: int,
        *,
        queue: str | None = None,
        priority: int | None = None,
        run_at: datetime | None = None,
    ) -> JobRow:
        """Put a dead letter back under its id, attempt 0."""
        return self._runner.run(
            self._async.retry_from_dlq(id, queue=queue, priority=priority, run_at=run_at)
        )

    def bulk_retry_from_dlq(
        self,
        queue: str | None = None,
        kind: str | None = None,
        all: bool = False,
        *,
        dry_run: bool = False,
        progress: Progress | None = None,
    ) -> int:
        """Retry every matching dead letter; the number put back."""
        return self._runner.run(
            self._async.bulk_retry_from_dlq(queue, kind, all, dry_run=dry_run, progress=progress)
        )

    def move_failed_to_dlq(
        self,
        *,
        queue: str | None = None,
        kind: str | None = None,
        all: bool = False,
        reason: str | None = None,
        dry_run: bool = False,
        progress: Progress | None = None,
    ) -> int:
        """Move failed jobs into the DLQ (reason ``manual``); the number moved."""
        return self._runner.run(
            self._async.move_failed_to_dlq(
                queue=queue, kind=kind, all=all, reason=reason, dry_run=dry_run, progress=progress
            )
        )

    def purge_dlq(
        self,
        *,
        id: int | None = None,
        queue: str | None = None,
        kind: str | None = None,
        older_than: float | timedelta | None = None,
        all: bool = False,
        dry_run: bool = False,
        progress: Progress | None = None,
    ) -> int:
        """Delete dead letters (one ``id``, or by filter); the number deleted."""
        return self._runner.run(
            self._async.purge_dlq(
                id=id,
                queue=queue,
                kind=kind,
                older_than=older_than,
                all=all,
                dry_run=dry_run,
                progress=progress,
            )
        )


__all__ = ["Client"]
