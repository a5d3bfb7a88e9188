"""Bulk operator actions on ``awa.jobs`` (architecture §10): retry, cancel and purge by filter, and
cancel by unique key.

Each is set statements in bounded batches (``awa_cli.bulk.DEFAULT_BATCH`` rows), one short
transaction per batch, so 100,000 jobs never hold one long lock or transaction. Retry and
cancel select a batch of ids (``bulk_select_jobs``, SKIP LOCKED, an id cursor) and change
them in the same transaction; purge is one DELETE per batch. A bulk cancel runs each
cancelled job's ``on_cancelled`` specs in its batch's transaction and dispatches
``Cancelled`` after commit; if a spec raises, that batch is rolled back and redone one job
per transaction, and a job whose spec still raises is left as it was and reported.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, LiteralString

import psycopg
from psycopg.rows import dict_row

from awa_cli.bulk import DEFAULT_BATCH, BulkOperation, JobFilter, bulk_states, require_filter
from awa_cli.attempts import Finalized
from awa_cli.db.statements import SQL
from awa_cli.errors import FollowUpError, ValidationError
from awa_cli.events import JobEvent
from awa_cli.jobs import JobRow
from awa_cli.outcomes import audit, settle
from awa_cli.outcomes.transaction import CoreState, Transition, transition

log = logging.getLogger("awa.outcomes")

Progress = Callable[[int, int], None]
"""Told ``(done, total)`` before the first batch and after each one (a progress bar)."""

CANCEL_REASON = "cancelled by operator"
_CONNECTION_TROUBLE = (psycopg.OperationalError, psycopg.InterfaceError)


def no_progress(done: int, total: int) -> None:
    return None


@dataclass(frozen=True)
class BulkRun:
    """How a bulk action runs: ``dry_run`` only counts the matches, ``actor`` is whom the audit
    log names, ``progress`` is told ``(done, total)`` batch by batch."""

    dry_run: bool = False
    actor: str | None = None
    progress: Progress | None = None


@dataclass(frozen=True)
class BulkAction:
    """The frame every action by filter shares: the refusal of one with no filter, the count
    (a dry run's answer, a progress bar's total) and the audit row with the number changed.
    ``action`` is the audit log's name ("job.retry"), ``operation`` the refusal's words
    ("retry", "dlq retry"), ``filters`` the filters by name as both show them."""

    core: CoreState
    run: BulkRun
    action: str
    operation: str
    filters: dict[str, Any]
    all: bool

    async def total(self, statement: LiteralString, params: Mapping[str, Any]) -> int:
        """Refuse the action with no filter and no ``all`` (recorded as refused); else the
        number of matches when a dry run or a progress bar needs it (0 when neither does)."""
        try:
            require_filter(self.operation, all_=self.all, **self.filters)
        except ValidationError as exc:
            await self.record(None, "refused", {"reason": str(exc)})
            raise
        if not (self.run.dry_run or self.run.progress):
            return 0
        return await count(self.core, statement, params)

    @property
    def progress(self) -> Progress:
        return self.run.progress or no_progress

    async def record(
        self, done: int | None, result: str = "ok", detail: Mapping[str, Any] | None = None
    ) -> int:
        """The action's audit row (``count``: ``done``, unless refused), in a statement of its
        own; returns ``done``."""
        entry = dict(detail or {}) if done is None else {"count": done, **(detail or {})}
        target = audit.describe(**self.filters)
        await audit.record_alone(self.core, self.run.actor, self.action, target, result, entry)
        return done or 0


async def count(core: CoreState, statement: LiteralString, params: Mapping[str, Any]) -> int:
    """One ``count(*)`` statement (a --dry-run, or a progress bar's total)."""
    async with core.pool.connection() as conn, conn.cursor() as cur:
        await cur.execute(SQL[statement], params)
        row = await cur.fetchone()
    return int(row[0]) if row else 0


async def repeat_batches(
    core: CoreState,
    statement: LiteralString,
    params: Mapping[str, Any],
    total: int,
    progress: Progress,
    batch: int = DEFAULT_BATCH,
) -> int:
    """Run a one-statement batch (a DELETE or a move of up to ``batch`` rows) until one comes
    back short; the rows it touched in all."""
    done = 0
    progress(0, total)
    while True:
        async with core.pool.connection() as conn:
            cur = await conn.execute(SQL[statement], {**params, "batch": batch})
            n = max(cur.rowcount, 0)
        done += n
        progress(done, max(total, done))
        if n < batch:
            return done


ApplyBatch = Callable[
    [psycopg.AsyncConnection[Any], list[int]], Awaitable[tuple[int, list[Finalized]]]
]
"""Changes a batch of locked ids in the batch's transaction: (rows changed, the items whose
events to dispatch once it commits)."""


async def by_id_batches(
    core: CoreState,
    select: LiteralString,
    params: Mapping[str, Any],
    apply: ApplyBatch,
    total: int,
    progress: Progress,
    batch: int = DEFAULT_BATCH,
) -> int:
    """Select up to ``batch`` ids after a cursor and ``apply`` them, one transaction per batch,
    until a batch comes back short. A batch whose statement trips a unique index (a key taken
    between the check and the change) is tried again; the second time it skips that job."""
    done = after = 0
    progress(0, total)
    while True:
        for tries in range(3):
            try:
                async with core.pool.connection() as conn, conn.transaction():
                    async with conn.cursor() as cur:
                        await cur.execute(SQL[select], {**params, "after": after, "batch": batch})
                        ids = [int(r[0]) for r in await cur.fetchall()]
                    changed, items = await apply(conn, ids) if ids else (0, [])
                break
            except psycopg.errors.UniqueViolation:
                if tries == 2:
                    raise
        core.after_commit(items)  # committed: now the events
        done += changed
        progress(done, max(total, done))
        if len(ids) < batch:
            return done
        after = ids[-1]


def _filters(operation: BulkOperation, where: JobFilter) -> dict[str, Any]:
    """The statement parameters of ``where`` (the states checked against the operation)."""
    return {
        "states": [str(s) for s in bulk_states(operation, where.states)],
        "queue": where.queue,
        "kind": where.kind,
        "tag": where.tag,
        "ids": None if where.ids is None else list(where.ids),
        "older_than": where.older_than if operation == "purge" else None,
    }


def _named(where: JobFilter) -> dict[str, Any]:
    """The filters as the refusal and the audit target name them (the dashboard's ``tag``
    and ``ids`` only when set, so the CLI's messages stay as they are)."""
    named: dict[str, Any] = {"state": where.state, "queue": where.queue, "kind": where.kind}
    if where.tag is not None:
        named["tag"] = where.tag
    if where.ids is not None:
        named["ids"] = where.id_list or "none"
    return named


async def retry_jobs(core: CoreState, where: JobFilter, run: BulkRun) -> int:
    """Operator retry (architecture §5.9) of every matching failed or cancelled job, in bounded
    batches; fires nothing. The number retried (with ``dry_run``: the number that would be)."""
    params = _filters("retry", where)
    act = BulkAction(core, run, "job.retry", "retry", _named(where), where.all)
    total = await act.total("bulk_count_jobs", params)
    if run.dry_run:
        return total

    async def apply(conn: psycopg.AsyncConnection[Any], ids: list[int]) -> tuple[int, list[Any]]:
        async with conn.cursor(row_factory=dict_row) as cur:
            await cur.execute(SQL["bulk_retry_jobs"], {"ids": ids})
            rows = await cur.fetchall()
            await settle.reopen(conn, rows)  # re-block descendants their failure cancelled
            queues = sorted({str(r["queue"]) for r in rows})
            if queues:  # delivered at commit
                await cur.execute(SQL["notify_queues"], {"queues": queues})
        return len(rows), []

    done = await by_id_batches(core, "bulk_select_jobs", params, apply, total, act.progress)
    return await act.record(done)


async def cancel_jobs(core: CoreState, where: JobFilter, run: BulkRun) -> int:
    """Operator cancel of every matching available, scheduled, retryable or waiting job:
    Cancelled fires and ``on_cancelled`` specs run, atomically per job (see the module)."""
    params = _filters("cancel", where)
    act = BulkAction(core, run, "job.cancel", "cancel", _named(where), where.all)
    total = await act.total("bulk_count_jobs", params)
    if run.dry_run:
        return total
    left: list[int] = []

    async def apply(
        conn: psycopg.AsyncConnection[Any], ids: list[int]
    ) -> tuple[int, list[Finalized]]:
        items = await _cancel_batch(core, conn, ids, left)
        return len(items), items

    done = await by_id_batches(core, "bulk_select_jobs", params, apply, total, act.progress)
    await act.record(done, "failed" if left else "ok", {"left": left} if left else None)
    if left:
        raise FollowUpError(
            f"{done} jobs cancelled; {len(left)} left uncancelled because an on_cancelled "
            f"spec raised (jobs {', '.join(map(str, left[:10]))}{'…' if len(left) > 10 else ''})"
        )
    return done


async def _cancel_batch(
    core: CoreState, conn: psycopg.AsyncConnection[Any], ids: list[int], left: list[int]
) -> list[Finalized]:
    """Cancel a batch with its specs in a savepoint; if user code or an insert fails, each
    job in a savepoint of its own, and the ids still failing go to ``left``."""
    try:
        async with conn.transaction():  # a savepoint: the batch's locks stay held
            return await _cancel_ids(core, conn, ids)
    except _CONNECTION_TROUBLE:
        raise
    except Exception:
        pass
    items: list[Finalized] = []
    for job_id in ids:  # each job alone: one failing spec holds back no other job
        try:
            async with conn.transaction():
                items.extend(await _cancel_ids(core, conn, [job_id]))
        except _CONNECTION_TROUBLE:
            raise
        except Exception as exc:
            left.append(job_id)
            log.error(
                "job %s left uncancelled: %s",
                job_id,
                exc,
                extra={"action": "bulk_cancel_failed", "job_id": job_id},
            )
    return items


async def _cancel_ids(
    core: CoreState, conn: psycopg.AsyncConnection[Any], ids: list[int]
) -> list[Finalized]:
    """Cancel these ids and run each cancelled job's specs, in the caller's transaction."""
    async with conn.cursor(row_factory=dict_row) as cur:
        await cur.execute(SQL["bulk_cancel_jobs"], {"ids": ids})
        records = await cur.fetchall()
        rows = [JobRow.from_record(r) for r in records]
    items = await settle.settle(core, conn, records)  # their children and workflows
    for row in rows:
        event = JobEvent.Cancelled(row, row.args, CANCEL_REASON)
        item = Finalized(row.id, row, events=[event])
        await core.run_specs(conn, event, item)
        items.append(item)
    return items


async def purge_jobs(core: CoreState, where: JobFilter, run: BulkRun) -> int:
    """Delete matching finished jobs (completed, failed, cancelled) in bounded batches."""
    params = _filters("purge", where)
    filters = _named(where) | {"older_than": where.older_than}
    act = BulkAction(core, run, "job.purge", "purge", filters, where.all)
    total = await act.total("bulk_count_jobs", params)
    if run.dry_run:
        return total
    done = await repeat_batches(core, "bulk_purge_jobs", params, total, act.progress)
    return await act.record(done)


async def cancel_by_unique_key(
    core: CoreState, unique_key: bytes, actor: str | None = None
) -> JobRow | None:
    """Cancel the unfinished job holding ``unique_key`` (Cancelled fires, specs run); None
    when no job holds it."""

    async def nothing(cur: Any) -> None:
        return None

    async def record(cur: Any, row: JobRow, event: Any) -> None:
        await audit.record(cur.connection, actor, "job.cancel", str(row.id), detail={"count": 1})

    return await transition(
        core,
        Transition(
            "cancel_by_unique_key",
            {"unique_key": unique_key},
            nothing,
            event=lambda row, _: JobEvent.Cancelled(row, row.args, CANCEL_REASON),
            then=record,
        ),
    )
