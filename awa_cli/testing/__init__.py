"""Test harness for code that uses awa (architecture §3 "Test harness").

* :class:`AwaTestClient` (sync) and :class:`AsyncAwaTestClient` (``await``): ``work_one``
  claims one job of a kind with the worker's claim semantics, runs the app's handler (or the
  one given) exactly as the worker does, and applies the attempt's result through the real
  outcome core — follow-up specs, staged follow-ups on completion, output, hooks.
* :class:`HandlerJob` (``awa_cli/testing/handler_job.py``): a :class:`awa_cli.Job` with a
  synthesised row for unit tests without a database. Staged follow-ups go through the same
  validation and limits as in a worker and are recorded in ``job.staged``;
  ``job.set_output`` lands in ``job.output``.
* ``awa_cli.testing_plugin``: opt-in pytest fixtures (``awa_dsn``, ``awa_test_client``).
"""

from __future__ import annotations

import asyncio
import functools
import inspect
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from awa_cli.app import App, Task, prepare_job
from awa_cli.attempts import AttemptResult
from awa_cli.client import AsyncClient, Client, insert_prepared, prepare_insert
from awa_cli.dispatch import Dispatcher
from awa_cli.jobs import JobRow
from awa_cli.outcomes import OutcomeCore
from awa_cli.testing.handler_job import (
    HandlerJob,
    HandlerResult,
    StagedFollowUp,
    run_handler,
    run_handler_async,
)
from awa_cli.worker.callbacks import CallbackServices
from awa_cli.worker.executor import execute
from awa_cli.errors import ValidationError
from awa_cli.worker.services import CANCEL_REASONS, RunningJobs

__all__ = [
    "AsyncAwaTestClient",
    "AwaTestClient",
    "HandlerJob",
    "HandlerResult",
    "StagedFollowUp",
    "WorkResult",
    "run_handler",
    "run_handler_async",
]

HOOK_WAIT_SECONDS = 5.0


@dataclass
class WorkResult:
    """What ``work_one`` did.

    ``outcome`` is the job's resulting state (``completed``, ``retryable``, ``failed``,
    ``cancelled``, ``scheduled``, ``waiting_external``, ...) or ``no_job`` when nothing of
    that kind was claimable. ``follow_up_ids`` are the follow-ups inserted with the
    transition (registered specs first, then staged ones); ``duplicates`` counts those
    skipped because their unique key was held.
    """

    outcome: str
    job: JobRow | None
    follow_up_ids: list[int] = field(default_factory=list)
    duplicates: int = 0
    events: list[Any] = field(default_factory=list)
    attempt: AttemptResult | None = None

    @property
    def error(self) -> str:
        """The error this attempt recorded (``""`` if none)."""
        if self.attempt is None or self.attempt.error_entry is None:
            return ""
        return str(self.attempt.error_entry.get("error", ""))

    @property
    def output(self) -> Any:
        return None if self.job is None else self.job.output


def _kind_of(app: App, args_type_or_kind: type | str) -> str:
    if isinstance(args_type_or_kind, str):
        return args_type_or_kind
    if isinstance(args_type_or_kind, type):
        return app.kind_of_type(args_type_or_kind)
    raise TypeError(f"work_one needs an args type or a kind string, got {args_type_or_kind!r}")


def _app_with_handler(
    app: App, kind: str, args_type_or_kind: type | str, handler: Callable[..., Any]
) -> App:
    """A shallow copy of ``app`` whose handler for ``kind`` is ``handler`` (only for running it)."""
    registered = app.tasks.get(kind)
    if registered is not None:
        args_type = registered.args_type
    else:
        args_type = args_type_or_kind if isinstance(args_type_or_kind, type) else None
    copy = App()
    copy.tasks = {
        **app.tasks,
        kind: Task(
            kind,
            args_type,
            handler,
            registered.queue if registered else None,
            inspect.iscoroutinefunction(handler),
        ),
    }
    return copy


class AsyncAwaTestClient:
    """``work_one`` for async tests. Takes a DSN or an :class:`awa_cli.AsyncClient`."""

    def __init__(self, dsn_or_client: str | AsyncClient, app: App) -> None:
        if isinstance(dsn_or_client, Client):
            raise TypeError(
                "AsyncAwaTestClient takes a DSN or an AsyncClient; use AwaTestClient with a Client"
            )
        if isinstance(dsn_or_client, AsyncClient):
            self.client, self._owns_client = dsn_or_client, False
        else:
            self.client, self._owns_client = AsyncClient(str(dsn_or_client), app), True
        self.app = app
        if self.client.app is app:
            self.core = self.client.core
        else:  # the client was made for another app (or none): run this app's specs and hooks
            self.core = OutcomeCore(self.client.pool, app, Dispatcher(app))
        self.running = RunningJobs()
        self.services = CallbackServices(self.core, self.running)

    async def __aenter__(self) -> AsyncAwaTestClient:
        await self.client.ensure_open()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def close(self) -> None:
        if self._owns_client:
            await self.client.close()

    async def insert(self, args: Any, **insert_options: Any) -> JobRow:
        """Enqueue a job (an unset kind or queue is resolved from this client's app)."""
        prepared = prepare_insert(args, dict(insert_options), self.app)
        pool = await self.client.ensure_open()
        async with pool.connection() as conn:
            return await insert_prepared(conn, prepared)

    async def get_job(self, job_id: int) -> JobRow:
        return await self.client.get_job(job_id)

    # Callback resolutions through this client's core; a handler of this client waiting inside
    # ``wait_for_callback`` is woken at once (a worker's LISTEN does that; here nothing listens).
    async def complete_external(
        self, callback_id: Any, payload: Any = None, run_lease: int | None = None
    ) -> JobRow:
        return await self._woken(
            self.core.resolve_external(
                callback_id, "complete", payload=payload, run_lease=run_lease
            )
        )

    async def fail_external(
        self, callback_id: Any, error: str, run_lease: int | None = None
    ) -> JobRow:
        return await self._woken(
            self.core.resolve_external(callback_id, "fail", error=error, run_lease=run_lease)
        )

    async def retry_external(self, callback_id: Any, run_lease: int | None = None) -> JobRow:
        return await self._woken(
            self.core.resolve_external(callback_id, "retry", run_lease=run_lease)
        )

    async def resume_external(self, callback_id: Any, payload: Any = None) -> JobRow:
        return await self._woken(self.core.resume_external(callback_id, payload))

    async def _woken(self, resolution: Awaitable[JobRow]) -> JobRow:
        await self.client.ensure_open()
        try:
            return await resolution
        finally:
            self.services.wake_all_waiters()

    async def claim(self, kind: str, queue: str | None = None) -> JobRow | None:
        """Claim one job of ``kind`` the way a worker does; None when none is claimable."""
        await self.client.ensure_open()
        return await self.core.claim_kind(kind, queue)

    async def work_one(
        self,
        args_type_or_kind: type | str,
        handler: Callable[..., Any] | None = None,
        *,
        queue: str | None = None,
        cancel: str | None = None,
    ) -> WorkResult:
        """Claim one job of that kind, run its handler and apply the result through the core.

        A follow-up spec that raises rolls the transition back (the job stays ``running``,
        as in a worker, where rescue takes it later); here the error is raised to the test.
        ``cancel`` (``"shutdown"``, ``"cancelled"``, ...) runs the handler with
        ``job.is_cancelled()`` already true and that ``job.cancel_reason``: with
        ``"shutdown"`` a handler that raises ``awa.Interrupted`` hands the job back
        (``outcome == "available"``, the attempt not counted).
        """
        if cancel is not None and cancel not in CANCEL_REASONS:
            raise ValidationError("cancel", f"must be one of {', '.join(CANCEL_REASONS)}")
        kind = _kind_of(self.app, args_type_or_kind)
        await self.client.ensure_open()
        # as a worker does: the claim reads the child's parents for the handler
        row = await self.core.claim_kind(kind, queue, self.services.claimed_parents)
        if row is None:
            return WorkResult("no_job", None)
        self.core.started(row)
        app = (
            self.app
            if handler is None
            else _app_with_handler(self.app, kind, args_type_or_kind, handler)
        )
        prepare = functools.partial(prepare_job, self.app)
        self.running.cancel_new = cancel
        try:
            result = await execute(app, row, self.services, None, self.running, prepare=prepare)
        finally:
            self.running.cancel_new = None
        try:
            [done] = await self.core.finalize_attempts([result])
        finally:
            self.running.discard(row.id)
        if done.error is not None:
            raise done.error
        final = done.row if done.row is not None else await self.client.get_job(row.id)
        await self._drain_hooks()
        return WorkResult(
            str(final.state),
            final,
            list(done.follow_ups),
            done.duplicates + done.staged_duplicates,
            list(done.events),
            result,
        )

    async def _drain_hooks(self) -> None:
        dispatcher = self.core.dispatcher
        if dispatcher is not None:
            await dispatcher.drain(HOOK_WAIT_SECONDS)


class AwaTestClient:
    """``work_one`` for plain (sync) tests. Takes a DSN or an :class:`awa_cli.Client`.

    The async core runs on a private event-loop thread (the Client's own when one is given),
    exactly as :class:`awa_cli.Client` does.
    """

    def __init__(self, dsn_or_client: str | Client, app: App) -> None:
        if isinstance(dsn_or_client, Client):
            self.client, self._owns_client = dsn_or_client, False
        elif isinstance(dsn_or_client, AsyncClient):
            raise TypeError(
                "AwaTestClient takes a DSN or a Client; use AsyncAwaTestClient with an AsyncClient"
            )
        else:
            self.client, self._owns_client = Client(str(dsn_or_client), app), True
        self.app = app
        self.aio = AsyncAwaTestClient(self.client.async_client, app)

    def __enter__(self) -> AwaTestClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        if self._owns_client:
            self.client.close()

    def insert(self, args: Any, **insert_options: Any) -> JobRow:
        """Enqueue a job (an unset kind or queue is resolved from this client's app)."""
        return self.client.call(self.aio.insert(args, **insert_options))

    def get_job(self, job_id: int) -> JobRow:
        return self.client.call(self.aio.get_job(job_id))

    def complete_external(
        self, callback_id: Any, payload: Any = None, run_lease: int | None = None
    ) -> JobRow:
        return self.client.call(self.aio.complete_external(callback_id, payload, run_lease))

    def fail_external(self, callback_id: Any, error: str, run_lease: int | None = None) -> JobRow:
        return self.client.call(self.aio.fail_external(callback_id, error, run_lease))

    def retry_external(self, callback_id: Any, run_lease: int | None = None) -> JobRow:
        return self.client.call(self.aio.retry_external(callback_id, run_lease))

    def resume_external(self, callback_id: Any, payload: Any = None) -> JobRow:
        return self.client.call(self.aio.resume_external(callback_id, payload))

    def work_one(
        self,
        args_type_or_kind: type | str,
        handler: Callable[..., Any] | None = None,
        *,
        queue: str | None = None,
        cancel: str | None = None,
    ) -> WorkResult:
        """Claim one job of that kind, run its handler and apply the result through the core
        (``cancel``: see :meth:`AsyncAwaTestClient.work_one`)."""
        return self.client.call(
            self.aio.work_one(args_type_or_kind, handler, queue=queue, cancel=cancel)
        )

    async def work_one_async(
        self,
        args_type_or_kind: type | str,
        handler: Callable[..., Any] | None = None,
        *,
        queue: str | None = None,
        cancel: str | None = None,
    ) -> WorkResult:
        """``work_one`` awaitable from another event loop (it still runs on the client's loop)."""
        future = asyncio.run_coroutine_threadsafe(
            self.aio.work_one(args_type_or_kind, handler, queue=queue, cancel=cancel),
            self.client.loop,
        )
        return await asyncio.wrap_future(future)
