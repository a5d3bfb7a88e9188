"""Producers and operators: enqueue, inspect, admin and callback resolution.

``AsyncClient`` is the implementation; ``Client`` (:mod:`awa_cli.sync_client`) is its
synchronous twin, running the same code on a private event-loop thread so both behave
identically. ``insert`` / ``insert_async`` enqueue on the application's own connection,
inside its transaction.
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from datetime import timedelta
from typing import TYPE_CHECKING, Any, Literal

import psycopg
from psycopg_pool import AsyncConnectionPool

from awa_cli.app import prepare_job
from awa_cli import client_batches, client_ops, reads, workflow_ops
from awa_cli.batches import Batch, BatchRow
from awa_cli.db import dependencies
from awa_cli.db.copy import copy_encoder
from awa_cli.db.history import read_timeline
from awa_cli.db import dead_letters, jobs
from awa_cli.db import periodic as periodic_rows
from awa_cli.db.pools import client_pool
from awa_cli.db.migrations import Migration, migrate_dsn
from awa_cli.db.waiting import JobWaiters
from awa_cli.dispatch import Dispatcher, EventHook
from awa_cli.history import JobTimeline
from awa_cli.enqueue import InsertOpts, UniqueOpts, positive_limit, prepare_many
from awa_cli.jobs import JobRow, JobState, PreparedJob
from awa_cli.jsonvalues import to_json
from awa_cli.outcomes import OutcomeCore
from awa_cli.periodic import PeriodicJob
from awa_cli.reads import JobCount
from awa_cli.results import JobNotFound, UniqueConflict, ValidationError, seconds
from awa_cli.workflows import Workflow, WorkflowRun, split_after

if TYPE_CHECKING:
    from awa_cli.app import App
    from awa_cli.sync_client import Client

DefaultAction = Literal["complete", "fail", "ignore"]


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
    return JobRow.inserted(prepared, record)


def insert(
    conn: psycopg.Connection[Any], args: Any, *, app: App | None = None, **insert_options: Any
) -> JobRow:
    """Enqueue inside the caller's transaction: visible on commit, gone on rollback.

    With ``app=``, an unset kind is the one the args type is registered with and an unset
    queue the one the kind is registered with (architecture §3); without it, the derived kind and
    the queue ``default``.
    """
    parents, policy = split_after(insert_options)
    prepared = prepare_insert(args, insert_options, app)
    if parents:  # a child: blocked until its parents complete (architecture §16)
        plan = dependencies.insert_after([prepared], parents, policy)
        return dependencies.run_sync(conn, plan)[0]
    record, holder = jobs.insert_one_sync(conn, prepared)
    return _row_or_conflict(record, prepared, holder)


async def insert_async(
    conn: psycopg.AsyncConnection[Any],
    args: Any,
    *,
    app: App | None = None,
    **insert_options: Any,
) -> JobRow:
    """``insert`` for an async psycopg connection (``app=`` and ``after=`` as there)."""
    parents, policy = split_after(insert_options)
    prepared = prepare_insert(args, insert_options, app)
    if parents:
        plan = dependencies.insert_after([prepared], parents, policy)
        return (await dependencies.run_async(conn, plan))[0]
    return await insert_prepared(conn, prepared)


async def insert_prepared(conn: psycopg.AsyncConnection[Any], prepared: PreparedJob) -> JobRow:
    """Insert one validated job on ``conn``; UniqueConflict when its unique key is held."""
    record, holder = await jobs.insert_one(conn, prepared)
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
    in each transition's transaction and dispatches its hooks after commit.

    The whole surface is this class's body: what the client does itself is written here; the
    reads, the operator actions, the workflows and the batches are functions of
    :mod:`awa_cli.reads`, :mod:`awa_cli.client_ops`, :mod:`awa_cli.workflow_ops` and
    :mod:`awa_cli.client_batches` taking the client first, bound here as methods."""

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
        self._pool = client_pool(dsn, max_connections)
        self._opened = False
        self._open_lock = asyncio.Lock()  # concurrent first uses open the pool once
        self.dispatcher = Dispatcher(app, list(plugin_hooks)) if (app or plugin_hooks) else None
        self.core = OutcomeCore(self._pool, app, self.dispatcher)
        # wait_for_job: one LISTEN connection for all of this client's waiters, opened on
        # first use; its backstop poll interval may be changed before the first wait.
        self._waiters = JobWaiters(dsn, self._pool)

    @property
    def pool(self) -> AsyncConnectionPool:
        """The client's connection pool (opened by :meth:`ensure_open`); for the test harness
        and other package-internal callers that run transitions on the client's database."""
        return self._pool

    async def ensure_open(self) -> AsyncConnectionPool:
        """Open the pool on first use (an unreachable database fails at once) and return it."""
        if self._opened:
            return self._pool
        async with self._open_lock:  # awa serve's first requests arrive together
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
        await self._waiters.close()
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
        """Insert one job. ``after=`` (ids or JobRows, up to 10,000) makes it a child: blocked
        until every parent completed; ``on_parent_failure`` is ``"cancel"`` (default: a
        failed or cancelled parent cancels it and what depends on it) or ``"run"``."""
        pool = await self.ensure_open()
        async with pool.connection() as conn:
            return await insert_async(conn, args, app=self.app, **insert_options)

    async def insert_many(self, args_list: Iterable[Any], **insert_options: Any) -> int:
        """Insert many jobs in one statement; the options apply to every row.

        Rows whose unique key is already held are skipped; returns the number inserted.
        With ``after=`` every row is a child of the same parents (then a held unique key
        raises ``UniqueConflict`` and nothing is inserted).
        """
        parents, policy = split_after(insert_options)
        opts = InsertOpts.from_kwargs(insert_options)
        app = self.app

        def prepare(args: Iterable[Any]) -> list[PreparedJob]:
            return prepare_many(
                args,
                opts,
                queue_for_kind=app.queue_for if app is not None else None,
                kind_for_type=app.kind_of_type if app is not None else None,
            )

        if parents:
            children = prepare(args_list)
            if not children:
                return 0
            pool = await self.ensure_open()
            async with pool.connection() as conn:
                plan = dependencies.insert_after(children, parents, policy)
                return len(await dependencies.run_async(conn, plan))
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
            return await jobs.insert_many(conn, prepared)

    async def get_job(self, job_id: int) -> JobRow:
        pool = await self.ensure_open()
        async with pool.connection() as conn:
            record = await jobs.get(conn, job_id)
        if record is None:
            if await dead_letters.get(pool, job_id) is not None:  # architecture §15.2
                raise JobNotFound(
                    f"job {job_id} not found: it is in the dead-letter queue "
                    f"(awa dlq show {job_id})"
                )
            raise JobNotFound(f"job {job_id} not found")
        return JobRow.from_record(record)

    async def limit_status(self, job_id: int) -> dict[str, Any]:
        """The job's place under the limits (architecture §13): ``concurrency_key`` (explicit),
        ``limit_name`` and ``key`` (the limit that selects it, as ``awa.limits`` announces
        it), ``running`` / ``max_running``, ``starts`` / ``rate_count`` in the rate window,
        ``paused``, and ``reason`` (:meth:`why_not_running`). ``JobNotFound`` if none."""
        from awa_cli.db.limits import explain

        pool = await self.ensure_open()
        async with pool.connection() as conn:
            status = await explain(conn, job_id)
        if status is None:
            raise JobNotFound(f"job {job_id} not found")
        return status

    async def why_not_running(self, job_id: int) -> str | None:
        """Why a runnable job is not running: "scheduled for T", "queue paused", "key 'k' of
        limit L at max_running (2/2 running)", "key 'k' of limit L rate-limited until T";
        for a blocked job "blocked on parents 12 (running), 13 (available)" (the parents not
        yet completed); None when nothing holds it back (or it is not runnable).
        ``JobNotFound`` if none."""
        reason: str | None = (await self.limit_status(job_id))["reason"]
        return reason

    async def wait_for_job(self, job_id: int, timeout: float | timedelta | None = None) -> JobRow:
        """The job once it is completed, failed or cancelled (with ``.output``).

        Woken by a notification from the finishing transaction, from any process or host;
        polling only as a backstop. Raises ``TimeoutError`` after ``timeout`` (None: wait
        forever) and ``JobNotFound`` for an unknown id. A dead-lettered job counts as failed.
        Never call it inside a handler to wait for another job: it holds the worker's slot and
        can deadlock the queue."""
        limit = None if timeout is None else seconds(timeout, "timeout")
        await self.ensure_open()
        return await self._waiters.wait(int(job_id), limit)

    async def job_history(self, job_id: int) -> JobTimeline:
        """The job's timeline: attempts (start, worker, outcome, error, rescue reason), its
        callback, output and progress, the follow-ups it produced and the job that produced
        it (``JobNotFound`` if there is no such job)."""
        row = await self.get_job(job_id)
        async with self._pool.connection() as conn:
            return await read_timeline(conn, row)

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
        positive_limit(limit)
        filters = {"state": None if state is None else str(state), "kind": kind, "queue": queue}
        pool = await self.ensure_open()
        async with pool.connection() as conn:
            return [JobRow.from_record(r) for r in await jobs.newest(conn, filters, limit)]

    async def queue_stats(self, queue: str | None = None) -> list[dict[str, Any]]:
        """Per queue holding jobs (or just ``queue``): ``{"queue", "counts": {state: n},
        "completed_per_second" (last minute), "oldest_available_age_seconds"}``, by name."""
        pool = await self.ensure_open()
        async with pool.connection() as conn:
            rows = [r for r in await jobs.counts(conn) if queue is None or r.queue == queue]
            recent = await jobs.completed_last_minute(conn, queue)
        stats: dict[str, dict[str, Any]] = {}
        for row in rows:
            entry = stats.setdefault(
                row.queue,
                {
                    "queue": row.queue,
                    "counts": {s.value: 0 for s in JobState},
                    "completed_per_second": round(recent.get(row.queue, 0) / 60.0, 3),
                    "oldest_available_age_seconds": None,
                },
            )
            entry["counts"][row.state] = row.count
            if row.oldest_available_seconds is not None:
                entry["oldest_available_age_seconds"] = round(row.oldest_available_seconds, 3)
        return [stats[name] for name in sorted(stats)]

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
        default_action: DefaultAction = "ignore",
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

    # -- periodic jobs (architecture §9) ---------------------------------------------------------
    # ``actor`` (e.g. ``cli:alice``): record the action in awa.audit_log, in its transaction.
    async def list_periodic(self) -> list[PeriodicJob]:
        """Every stored schedule by name, with its fire state and its last job's state."""
        async with (await self.ensure_open()).connection() as conn:
            return await periodic_rows.list_all(conn)

    async def pause_periodic(self, name: str, *, actor: str | None = None) -> PeriodicJob:
        """Stop firing ``name`` (survives restarts and redeploys); PeriodicNotFound if none."""
        await self.ensure_open()
        return await self.core.pause_periodic(name, actor)

    async def resume_periodic(self, name: str, *, actor: str | None = None) -> PeriodicJob:
        """Fire ``name`` again from its next fire time (the ones while paused are skipped)."""
        await self.ensure_open()
        return await self.core.resume_periodic(name, actor)

    async def trigger_periodic(self, name: str, *, actor: str | None = None) -> JobRow:
        """Enqueue ``name``'s job now (``awa.fire_at`` = now); the schedule is unchanged."""
        await self.ensure_open()
        return await self.core.trigger_periodic(name, actor)

    async def delete_periodic(self, name: str, *, actor: str | None = None) -> PeriodicJob:
        """Drop ``name`` (a worker whose app still defines it re-creates it at its start)."""
        await self.ensure_open()
        return await self.core.delete_periodic(name, actor)

    # -- reads: jobs, workers, kinds, the audit log (awa_cli/reads.py) ---------------------
    pending_migrations = reads.pending_migrations
    check_ready = reads.check_ready
    job_counts = reads.job_counts
    throughput = reads.throughput
    running_by_worker = reads.running_by_worker
    list_jobs_page = reads.list_jobs_page
    list_workers = reads.list_workers
    list_kinds = reads.list_kinds
    record_audit = reads.record_audit
    list_audit = reads.list_audit

    # -- operator actions: queues, bulk, dead letters (awa_cli/client_ops.py) --------------
    pause_queue = client_ops.pause_queue
    resume_queue = client_ops.resume_queue
    list_queues = client_ops.list_queues
    paused_queues = client_ops.paused_queues
    audit_log = reads.audit_log
    retry_jobs = client_ops.retry_jobs
    cancel_jobs = client_ops.cancel_jobs
    purge_jobs = client_ops.purge_jobs
    cancel_by_unique_key = client_ops.cancel_by_unique_key
    list_dlq = client_ops.list_dlq
    get_dlq_job = client_ops.get_dlq_job
    dlq_depth = client_ops.dlq_depth
    retry_from_dlq = client_ops.retry_from_dlq
    bulk_retry_from_dlq = client_ops.bulk_retry_from_dlq
    move_failed_to_dlq = client_ops.move_failed_to_dlq
    purge_dlq = client_ops.purge_dlq

    # -- workflows and job relations (awa_cli/workflow_ops.py) -----------------------------
    async def insert_workflow(self, wf: Workflow) -> WorkflowRun:
        """Insert every step of ``wf`` and their edges in one transaction (validated first:
        one ``ValidationError`` naming the step); the steps without parents are available at
        once, the others blocked until their parents complete."""
        return await workflow_ops.insert_on_pool(self, wf)

    get_workflow = workflow_ops.get_workflow
    list_workflows = workflow_ops.list_workflows
    workflow_edges = workflow_ops.workflow_edges
    cancel_workflow = workflow_ops.cancel_workflow
    retry_workflow = workflow_ops.retry_workflow
    job_parents = workflow_ops.job_parents
    job_children = workflow_ops.job_children
    job_relations = workflow_ops.job_relations

    # -- batches (awa_cli/client_batches.py) -----------------------------------------------
    batch = client_batches.batch
    seal_batch = client_batches.seal_batch

    async def insert_batch(
        self,
        jobs: Iterable[Any],
        *,
        on_success: Any = None,
        on_complete: Any = None,
        on_death: Any = None,
        metadata: Mapping[str, Any] | None = None,
        shards: int = 16,
        **insert_options: Any,
    ) -> BatchRow:
        """Open, fill and seal a batch in one transaction: ``jobs`` are args (the options
        apply to each) or ``EnqueueRequest``s; the callbacks are args or ``EnqueueRequest``s."""
        batch = Batch(on_success, on_complete, on_death, dict(metadata or {}), shards)
        return await client_batches.insert_on_pool(self, jobs, batch, insert_options)

    get_batch = client_batches.get_batch
    list_batches = client_batches.list_batches
    batch_members = client_batches.batch_members


def __getattr__(name: str) -> Any:
    """``Client`` lives in :mod:`awa_cli.sync_client` (which imports this module), and is
    still importable from here."""
    if name == "Client":
        from awa_cli.sync_client import Client

        return Client
    raise AttributeError(f"module 'awa_cli.client' has no attribute {name!r}")


__all__ = [
    "AsyncClient",
    "Client",
    "DefaultAction",
    "JobCount",
    "ResolveResult",
    "insert",
    "insert_async",
    "prepare_insert",
]
