"""Test harness for code that uses awa (DESIGN §3 "Test harness").

* :class:`AwaTestClient` (sync) and :class:`AsyncAwaTestClient` (``await``): ``work_one``
  claims one job of a kind with the worker's claim semantics, runs the app's handler (or the
  one given) exactly as the worker does, and applies the attempt's result through the real
  outcome core — follow-up specs, staged follow-ups on completion, output, hooks.
* :class:`HandlerJob`: a :class:`awa_cli.Job` with a synthesised row for unit tests without
  a database. Staged follow-ups go through the same validation and limits as in a worker and
  are recorded in ``job.staged``; ``job.set_output`` lands in ``job.output``.
* ``awa_cli.testing_plugin``: opt-in pytest fixtures (``awa_dsn``, ``awa_test_client``).
"""

from __future__ import annotations

import asyncio
import functools
import dataclasses
import inspect
import itertools
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, UTC
from typing import Any

from psycopg.rows import dict_row

from awa_cli.app import App, Task, prepare_job
from awa_cli.client import AsyncClient, Client
from awa_cli.events import JobEvent
from awa_cli.jobs import (
    DEFAULT_MAX_ATTEMPTS,
    DEFAULT_PRIORITY,
    DEFAULT_QUEUE,
    InsertOpts,
    JobRow,
    JobState,
    PreparedJob,
    args_to_dict,
    kind_for,
)
from awa_cli.outcomes import AttemptResult, OutcomeCore, decide
from awa_cli.results import ValidationError
from awa_cli.worker.executor import execute
from awa_cli.worker.job import Job, StagedFollowUps
from awa_cli.worker.queues import claim_sql
from awa_cli.worker.runtime import WorkerServices

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

# The worker's claim, for one job of one kind in any queue (or the given one).
CLAIM_ONE_OF_KIND = claim_sql(
    "kind = %(kind)s AND (%(queue)s::text IS NULL OR queue = %(queue)s::text)"
)

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
            from awa_cli.dispatch import Dispatcher

            self.core = OutcomeCore(self.client._pool, app, Dispatcher(app))
        self.services = WorkerServices(pool=self.client._pool, core=self.core)

    async def __aenter__(self) -> AsyncAwaTestClient:
        await self.client._ready()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def close(self) -> None:
        if self._owns_client:
            await self.client.close()

    async def insert(self, args: Any, **insert_options: Any) -> JobRow:
        """Enqueue a job (an unset kind or queue is resolved from this client's app)."""
        from awa_cli.client import _insert_on, prepare_insert

        prepared = prepare_insert(args, dict(insert_options), self.app)
        pool = await self.client._ready()
        async with pool.connection() as conn:
            return await _insert_on(conn, prepared)

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

    async def _woken(self, resolution: Any) -> JobRow:
        await self.client._ready()
        try:
            row: JobRow = await resolution
            return row
        finally:
            self.services.wake_all_waiters()

    async def claim(self, kind: str, queue: str | None = None) -> JobRow | None:
        """Claim one job of ``kind`` the way a worker does; None when none is claimable."""
        pool = await self.client._ready()
        async with pool.connection() as conn, conn.cursor(row_factory=dict_row) as cur:
            await cur.execute(
                CLAIM_ONE_OF_KIND, {"kind": kind, "queue": queue, "limit": 1, "deadline": 0}
            )
            record = await cur.fetchone()
        return None if record is None else JobRow.from_record(record)

    async def work_one(
        self,
        args_type_or_kind: type | str,
        handler: Callable[..., Any] | None = None,
        *,
        queue: str | None = None,
    ) -> WorkResult:
        """Claim one job of that kind, run its handler and apply the result through the core.

        A follow-up spec that raises rolls the transition back (the job stays ``running``,
        as in a worker, where rescue takes it later); here the error is raised to the test.
        """
        kind = _kind_of(self.app, args_type_or_kind)
        row = await self.claim(kind, queue)
        if row is None:
            return WorkResult("no_job", None)
        self.core.dispatch(JobEvent.Started(row, row.args))
        app = (
            self.app
            if handler is None
            else _app_with_handler(self.app, kind, args_type_or_kind, handler)
        )
        result = await execute(app, row, self.services, None)
        [done] = await self.core.finalize_attempts([result])
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
        self._runner = self.client._runner
        self.aio = AsyncAwaTestClient(self.client._async, app)

    def __enter__(self) -> AwaTestClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        if self._owns_client:
            self.client.close()

    def insert(self, args: Any, **insert_options: Any) -> JobRow:
        """Enqueue a job (an unset kind or queue is resolved from this client's app)."""
        return self._runner.run(self.aio.insert(args, **insert_options))

    def get_job(self, job_id: int) -> JobRow:
        return self._runner.run(self.aio.get_job(job_id))

    def complete_external(
        self, callback_id: Any, payload: Any = None, run_lease: int | None = None
    ) -> JobRow:
        return self._runner.run(self.aio.complete_external(callback_id, payload, run_lease))

    def fail_external(self, callback_id: Any, error: str, run_lease: int | None = None) -> JobRow:
        return self._runner.run(self.aio.fail_external(callback_id, error, run_lease))

    def retry_external(self, callback_id: Any, run_lease: int | None = None) -> JobRow:
        return self._runner.run(self.aio.retry_external(callback_id, run_lease))

    def resume_external(self, callback_id: Any, payload: Any = None) -> JobRow:
        return self._runner.run(self.aio.resume_external(callback_id, payload))

    def work_one(
        self,
        args_type_or_kind: type | str,
        handler: Callable[..., Any] | None = None,
        *,
        queue: str | None = None,
    ) -> WorkResult:
        """Claim one job of that kind, run its handler and apply the result through the core."""
        return self._runner.run(self.aio.work_one(args_type_or_kind, handler, queue=queue))

    async def work_one_async(
        self,
        args_type_or_kind: type | str,
        handler: Callable[..., Any] | None = None,
        *,
        queue: str | None = None,
    ) -> WorkResult:
        """``work_one`` awaitable from another event loop (it still runs on the client's loop)."""
        future = asyncio.run_coroutine_threadsafe(
            self.aio.work_one(args_type_or_kind, handler, queue=queue), self._runner.loop
        )
        return await asyncio.wrap_future(future)


# -- DB-free unit tests -------------------------------------------------------------------


@dataclass(frozen=True)
class StagedFollowUp:
    """A follow-up a :class:`HandlerJob` staged: ``args`` as given, ``options`` the keyword
    arguments as given (``opts`` the same as :class:`InsertOpts`), and the ``kind`` and
    ``queue`` it would be inserted with."""

    args: Any
    options: dict[str, Any]
    opts: InsertOpts
    kind: str
    queue: str
    prepared: PreparedJob = field(repr=False)


class _RecordingStaged(StagedFollowUps):
    """The worker's staging (same validation, limits and sealing), recording each success."""

    def __init__(self, prepare_fn: Any, record: list[StagedFollowUp]) -> None:
        super().__init__(prepare_fn)
        self._record = record
        self._order = threading.Lock()

    def stage(self, args: Any, options: dict[str, Any]) -> None:
        with self._order:
            super().stage(args, options)
            prepared = self.items[-1]
            self._record.append(
                StagedFollowUp(
                    args,
                    dict(options),
                    InsertOpts.from_kwargs(options),
                    prepared.kind,
                    prepared.queue,
                    prepared,
                )
            )


_ids = itertools.count(1)


class HandlerJob(Job):
    """A :class:`awa_cli.Job` for calling a handler directly, without a database.

    ``HandlerJob(args, **row_fields)``: the row is synthesised (a fresh id, the kind derived
    from the args class, queue ``default``, attempt 1, state running, ...); any
    :class:`awa_cli.JobRow` field may be given. Pass ``app=`` to resolve follow-up kinds and
    queues as a worker of that app would. ``job.staged`` lists the staged follow-ups,
    ``job.output`` the recorded output, ``job.staging_error`` the first failed stage.
    Callbacks need a database (use :class:`AwaTestClient`).
    """

    def __init__(self, args: Any, *, app: App | None = None, **row_fields: Any) -> None:
        unknown = set(row_fields) - {f.name for f in dataclasses.fields(JobRow)}
        if unknown:
            raise TypeError(f"HandlerJob: unknown JobRow field {sorted(unknown)[0]!r}")
        if "kind" not in row_fields:
            if isinstance(args, Mapping):
                raise ValidationError("kind", "required when args is a dict")
            row_fields["kind"] = app.kind_of_type(type(args)) if app else kind_for(type(args))
        kind = row_fields["kind"]
        now = datetime.now(UTC)
        values: dict[str, Any] = {
            "id": next(_ids),
            "queue": (app.queue_for(kind) if app else None) or DEFAULT_QUEUE,
            "args": args_to_dict(args),
            "state": JobState.RUNNING,
            "priority": DEFAULT_PRIORITY,
            "attempt": 1,
            "max_attempts": DEFAULT_MAX_ATTEMPTS,
            "run_at": now,
            "run_lease": 1,
            "heartbeat_at": now,
            "deadline_at": None,
            "deadline_duration": None,
            "callback_id": None,
            "callback_timeout_at": None,
            "callback_result": None,
            "errors": [],
            "metadata": {},
            "tags": [],
            "unique_key": None,
            "unique_states": None,
            "output": None,
            "ordering_key": None,
            "created_at": now,
            "attempted_at": now,
            "finalized_at": None,
        }
        values.update(row_fields)
        values["state"] = JobState(values["state"])
        super().__init__(JobRow(**values), args, None)
        self.app = app
        self.staged: list[StagedFollowUp] = []
        self._staged = _RecordingStaged(functools.partial(prepare_job, app), self.staged)

    @property
    def output(self) -> Any:
        return self._output

    @property
    def has_output(self) -> bool:
        return self._has_output

    @property
    def staging_error(self) -> BaseException | None:
        return self._staged.failure

    def seal(self) -> None:
        """Close staging as the worker does when the handler returns."""
        self._seal()

    def cancel(self) -> None:
        """Make ``job.is_cancelled()`` true (as a rescue or an operator cancel would)."""
        self._cancel()


@dataclass
class HandlerResult:
    """What a handler run on a :class:`HandlerJob` would do in a worker (no database)."""

    outcome: str  # the state the job would move to
    returned: Any
    exception: BaseException | None
    attempt: AttemptResult

    @property
    def error(self) -> str:
        return self.attempt.error


_STATE_OF_ACTION = {
    "complete": "completed",
    "retry": "retryable",
    "fail": "failed",
    "cancel": "cancelled",
    "snooze": "scheduled",
    "park": "waiting_external",
}


def _decide(job: HandlerJob, returned: Any, exc: BaseException | None) -> HandlerResult:
    job.seal()
    attempt = decide(
        job.row,
        args=job.args,
        result=returned,
        exc=exc,
        duration=0.0,
        output=job._output,
        has_output=job._has_output,
        registered_callback=job._registered_callback,
        staged=job._staged.items,
        staging_failure=job._staged.failure,
    )
    return HandlerResult(_STATE_OF_ACTION[attempt.action], returned, exc, attempt)


async def run_handler_async(handler: Callable[..., Any], job: HandlerJob) -> HandlerResult:
    """Run ``handler(job)`` (sync or async), seal staging, and decide the outcome as a worker would."""
    try:
        returned = handler(job)
        if inspect.isawaitable(returned):
            returned = await returned
    except Exception as exc:
        return _decide(job, None, exc)
    return _decide(job, returned, None)


def run_handler(handler: Callable[..., Any], job: HandlerJob) -> HandlerResult:
    """``run_handler_async`` for sync tests (an async handler runs on a fresh event loop)."""
    if inspect.iscoroutinefunction(handler):
        return asyncio.run(run_handler_async(handler, job))
    try:
        returned = handler(job)
    except Exception as exc:
        return _decide(job, None, exc)
    if inspect.isawaitable(returned):

        async def finish() -> Any:
            return await returned

        try:
            returned = asyncio.run(finish())
        except Exception as exc:
            return _decide(job, None, exc)
    return _decide(job, returned, None)
