"""Producers and operators: enqueue, inspect, admin and callback resolution.

``AsyncClient`` is the implementation; ``Client`` is its synchronous twin, running the same
code on a private event-loop thread so both behave identically. ``insert`` /
``insert_async`` enqueue on the application's own connection, inside its transaction.
"""

from __future__ import annotations

import asyncio
import itertools
import threading
from collections.abc import Coroutine, Iterable, Iterator
from concurrent.futures import Future
from dataclasses import dataclass
from datetime import timedelta
from typing import TYPE_CHECKING, Any, TypeVar

import psycopg
from psycopg.rows import dict_row
from psycopg_pool import AsyncConnectionPool

from awa_cli.app import prepare_job
from awa_cli.db.copy import copy_encoder
from awa_cli.db.params import insert_many_params, insert_params
from awa_cli.db.statements import SQL
from awa_cli.db.migrations import Migration, migrate_dsn
from awa_cli.dispatch import Dispatcher, EventHook
from awa_cli.jobs import (
    InsertOpts,
    JobRow,
    JobState,
    PreparedJob,
    UniqueOpts,
    prepare_many,
    to_json,
)
from awa_cli.outcomes import OutcomeCore
from awa_cli.results import JobNotFound, UniqueConflict, ValidationError, seconds

if TYPE_CHECKING:
    from awa_cli.app import App

T = TypeVar("T")


@dataclass(frozen=True)
class ResolveResult:
    """What ``resolve_callback`` did: ``outcome`` is completed, failed or ignored."""

    outcome: str
    job: JobRow


def prepare_insert(args: Any, options: dict[str, Any], app: App | None = None) -> PreparedJob:
    """Validate one insert given as keyword options (see ``app.prepare_job``)."""
    return prepare_job(app, args, InsertOpts.from_kwargs(options))


def _row_or_conflict(record: Any, prepared: PreparedJob, holder: Any) -> JobRow:
    if record is None:
        raise UniqueConflict(prepared.kind, holder[0] if holder else None)
    return JobRow.from_values(record)


def insert(conn: psycopg.Connection[Any], args: Any, **insert_options: Any) -> JobRow:
    """Enqueue inside the caller's transaction: visible on commit, gone on rollback."""
    prepared = prepare_insert(args, insert_options)
    with conn.cursor() as cur:
        cur.execute(SQL["insert_one"], insert_params(prepared))
        record = cur.fetchone()
        holder = None
        if record is None:
            cur.execute(SQL["find_unique_holder"], {"unique_key": prepared.unique_key})
            holder = cur.fetchone()
    return _row_or_conflict(record, prepared, holder)


async def insert_async(
    conn: psycopg.AsyncConnection[Any], args: Any, **insert_options: Any
) -> JobRow:
    """``insert`` for an async psycopg connection."""
    prepared = prepare_insert(args, insert_options)
    return await insert_prepared(conn, prepared)


async def insert_prepared(conn: psycopg.AsyncConnection[Any], prepared: PreparedJob) -> JobRow:
    """Insert one validated job on ``conn``; UniqueConflict when its unique key is held."""
    async with conn.cursor() as cur:
        await cur.execute(SQL["insert_one"], insert_params(prepared))
        record = await cur.fetchone()
        holder = None
        if record is None:
            await cur.execute(SQL["find_unique_holder"], {"unique_key": prepared.unique_key})
            holder = await cur.fetchone()
    return _row_or_conflict(record, prepared, holder)


COPY_CHUNK = 100  # rows validated and encoded per write while the server stores the previous ones


def _chunked(items: Iterable[Any], size: int) -> Iterator[list[Any]]:
    iterator = iter(items)
    while chunk := list(itertools.islice(iterator, size)):
        yield chunk


async def _copy_jobs(
    conn: psycopg.AsyncConnection[Any], first: list[PreparedJob], rest: Iterator[list[PreparedJob]]
) -> int:
    """Bulk insert without unique keys: one COPY in text format that awa writes itself, a chunk
    at a time, so the server stores one chunk while the next is validated and encoded. A row
    that fails validation aborts the COPY: the statement is atomic, nothing is written."""
    statement, encode = copy_encoder(first[0])
    count = 0
    async with conn.cursor() as cur, cur.copy(statement) as copy:
        for chunk in itertools.chain([first], rest):
            await copy.write(encode(chunk))
            count += len(chunk)
    return count


class AsyncClient:
    """Enqueue, inspect and operate on jobs. With ``app=`` it runs that app's follow-up specs
    in each transition's transaction and dispatches its hooks after commit."""

    def __init__(
        self,
        dsn: str,
        app: App | None = None,
        *,
        plugin_hooks: Iterable[EventHook] = (),
        max_connections: int = 10,
    ) -> None:
        self.dsn = dsn
        self.app = app
        self._pool = AsyncConnectionPool(
            dsn, min_size=1, max_size=max_connections, open=False, kwargs={"autocommit": True}
        )
        self._opened = False
        self.dispatcher = Dispatcher(app, list(plugin_hooks)) if (app or plugin_hooks) else None
        self.core = OutcomeCore(self._pool, app, self.dispatcher)

    @property
    def pool(self) -> AsyncConnectionPool:
        """The client's connection pool (opened by :meth:`ensure_open`); for the test harness
        and other package-internal callers that run transitions on the client's database."""
        return self._pool

    async def ensure_open(self) -> AsyncConnectionPool:
        """Open the pool on first use (an unreachable database fails at once) and return it."""
        if not self._opened:
            # One plain connection first, so an unreachable database fails at once with
            # libpq's own message instead of a pool timeout.
            conn = await psycopg.AsyncConnection.connect(self.dsn, connect_timeout=10)
            await conn.close()
            await self._pool.open(wait=True, timeout=30)
            self._opened = True
        return self._pool

    async def close(self, hook_timeout: float = 5.0) -> None:
        """Wait up to ``hook_timeout`` for dispatched hooks, then close the pool."""
        if self.dispatcher is not None:
            await self.dispatcher.drain(hook_timeout)
        if self._opened:
            await self._pool.close()
            self._opened = False

    async def __aenter__(self) -> AsyncClient:
        await self.ensure_open()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def migrate(self) -> list[Migration]:
        return await asyncio.to_thread(migrate_dsn, self.dsn)

    async def insert(self, args: Any, **insert_options: Any) -> JobRow:
        prepared = prepare_insert(args, insert_options, self.app)
        pool = await self.ensure_open()
        async with pool.connection() as conn:
            return await insert_prepared(conn, prepared)

    async def insert_many(self, args_list: Iterable[Any], **insert_options: Any) -> int:
        """Insert many jobs in one statement; the options apply to every row.

        Rows whose unique key is already held are skipped; returns the number inserted.
        """
        opts = InsertOpts.from_kwargs(insert_options)
        app = self.app

        def prepare(args: Iterable[Any]) -> list[PreparedJob]:
            return prepare_many(
                args,
                opts,
                queue_for_kind=app.queue_for if app is not None else None,
                kind_for_type=app.kind_of_type if app is not None else None,
            )

        if UniqueOpts.coerce(opts.unique_opts) is None:
            chunks = (prepare(c) for c in _chunked(args_list, COPY_CHUNK))
            first = next(chunks, None)  # the first chunk is validated before a connection is taken
            if not first:
                return 0
            pool = await self.ensure_open()
            async with pool.connection() as conn:
                return await _copy_jobs(conn, first, chunks)
        prepared = prepare(args_list)
        if not prepared:
            return 0
        pool = await self.ensure_open()
        async with pool.connection() as conn:
            async with conn.cursor() as cur:
                await cur.execute(SQL["insert_many"], insert_many_params(prepared))
                return cur.rowcount

    async def get_job(self, job_id: int) -> JobRow:
        pool = await self.ensure_open()
        async with pool.connection() as conn, conn.cursor(row_factory=dict_row) as cur:
            await cur.execute(SQL["get_job"], {"id": job_id})
            record = await cur.fetchone()
        if record is None:
            raise JobNotFound(f"job {job_id} not found")
        return JobRow.from_record(record)

    async def list_jobs(
        self,
        state: JobState | str | None = None,
        kind: str | None = None,
        queue: str | None = None,
        limit: int = 100,
    ) -> list[JobRow]:
        if state is not None:
            try:
                state = JobState(state)
            except ValueError:
                raise ValidationError("state", f"unknown job state {state!r}") from None
        if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
            raise ValidationError("limit", "must be a positive integer")
        pool = await self.ensure_open()
        async with pool.connection() as conn, conn.cursor(row_factory=dict_row) as cur:
            await cur.execute(
                SQL["list_jobs"],
                {
                    "state": None if state is None else str(state),
                    "kind": kind,
                    "queue": queue,
                    "limit": limit,
                },
            )
            return [JobRow.from_record(r) for r in await cur.fetchall()]

    async def cancel(self, job_id: int) -> JobRow:
        await self.ensure_open()
        return await self.core.cancel(job_id)

    async def retry(self, job_id: int) -> JobRow:
        await self.ensure_open()
        return await self.core.retry(job_id)

    # -- callbacks -------------------------------------------------------------------------
    async def complete_external(
        self, callback_id: Any, payload: Any = None, run_lease: int | None = None
    ) -> JobRow:
        """Complete the job waiting on ``callback_id`` (Completed, duration 0)."""
        await self.ensure_open()
        return await self.core.resolve_external(
            callback_id, "complete", payload=payload, run_lease=run_lease
        )

    async def fail_external(
        self, callback_id: Any, error: str, run_lease: int | None = None
    ) -> JobRow:
        """Fail the job waiting on ``callback_id`` (Exhausted with ``error`` verbatim)."""
        if not isinstance(error, str):
            raise ValidationError("error", "expected a string")
        await self.ensure_open()
        return await self.core.resolve_external(
            callback_id, "fail", error=error, run_lease=run_lease
        )

    async def retry_external(self, callback_id: Any, run_lease: int | None = None) -> JobRow:
        """Make the waiting job available again with its attempts reset (Retried)."""
        await self.ensure_open()
        return await self.core.resolve_external(callback_id, "retry", run_lease=run_lease)

    async def resume_external(self, callback_id: Any, payload: Any = None) -> JobRow:
        """Hand ``payload`` to the job and let it continue (no event of its own)."""
        await self.ensure_open()
        return await self.core.resume_external(callback_id, payload)

    async def heartbeat_callback(
        self, callback_id: Any, timeout: float | timedelta = 3600
    ) -> JobRow:
        """Extend the callback's timeout to now + ``timeout``."""
        seconds_ = seconds(timeout, "timeout")
        await self.ensure_open()
        return await self.core.heartbeat_callback(callback_id, seconds_)

    async def waiting_job(self, callback_id: Any, run_lease: int | None = None) -> JobRow:
        """The job waiting on ``callback_id``, unchanged (CallbackNotFound if none)."""
        await self.ensure_open()
        return await self.core.waiting_job(callback_id, run_lease)

    async def resolve_callback(
        self,
        callback_id: Any,
        payload: Any = None,
        default_action: str = "ignore",
        run_lease: int | None = None,
    ) -> ResolveResult:
        """Resolve the callback by ``default_action``: ``complete`` (with the payload),
        ``fail`` or ``ignore`` (nothing changes; the job keeps waiting)."""
        if default_action not in ("complete", "fail", "ignore"):
            raise ValidationError("default_action", "expected complete, fail or ignore")
        await self.ensure_open()
        if default_action == "complete":
            row = await self.core.resolve_external(
                callback_id, "complete", payload=payload, run_lease=run_lease
            )
            return ResolveResult("completed", row)
        if default_action == "fail":
            error = (
                f"callback resolved as failed: {to_json(payload, 'payload')}"
                if payload is not None
                else "callback resolved as failed"
            )
            row = await self.core.resolve_external(
                callback_id, "fail", error=error, run_lease=run_lease
            )
            return ResolveResult("failed", row)
        return ResolveResult("ignored", await self.core.waiting_job(callback_id, run_lease))


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

    def __init__(self, dsn: str, app: App | None = None, **options: Any) -> None:
        self._runner = _LoopThread()
        self._async = AsyncClient(dsn, app, **options)

    @property
    def app(self) -> App | None:
        return self._async.app

    @property
    def async_client(self) -> AsyncClient:
        """The :class:`AsyncClient` this client runs on its own event-loop thread."""
        return self._async

    @property
    def loop(self) -> asyncio.AbstractEventLoop:
        """This client's event loop (it runs on a private thread)."""
        return self._runner.loop

    def call(self, coro: Coroutine[Any, Any, T]) -> T:
        """Run ``coro`` on this client's event-loop thread and return its result (for
        harnesses built on the client, such as ``awa_cli.testing.AwaTestClient``)."""
        return self._runner.run(coro)

    def close(self, hook_timeout: float = 5.0) -> None:
        if self._runner.thread.is_alive():
            self._runner.run(self._async.close(hook_timeout))
            self._runner.stop()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __getattr__(self, name: str) -> Any:
        method = getattr(self._async, name)
        if not asyncio.iscoroutinefunction(method):
            return method

        def call(*args: Any, **kwargs: Any) -> Any:
            return self._runner.run(method(*args, **kwargs))

        call.__name__ = name
        call.__doc__ = method.__doc__
        return call
