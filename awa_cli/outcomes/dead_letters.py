"""Dead letters' writes (architecture §10, §15.2): the move into ``awa.dead_letters`` inside the
transitions that fail a job, and the operator's actions on dead letters.

A queue with dead-lettering on moves an exhausted job out of ``awa.jobs`` into
``awa.dead_letters`` in the SAME transaction as the transition that failed it: a worker's
failing attempt (``dead_letter_finalize``: the guarded transition and the move in one
statement), a callback ``fail`` and a rescue on the last attempt (``dead_letter_move`` after
the transition and its specs, so a raising spec rolls the move back too). The event and the
specs see the failed job as it was; there is never a moment where the job is in neither
table.

Which queues dead-letter: a worker knows its own queues' flags from its config
(``CoreState.dead_letter_flags``, announced to ``awa.queues`` at start); for any other queue
(a client's core, the leader rescuing another deployment's job) the flag a worker announced
in ``awa.queues.dead_letter`` decides.

The operator's actions: retry (one or by filter), move failed jobs in, purge, and the
leader's retention prune (listing, one dead letter and the depth are reads:
``db/dead_letters.py``). Filtered actions run in bounded batches (``bulk.DEFAULT_BATCH``),
one short transaction per batch (see ``outcomes/bulk.py``), and are recorded in the audit log
with their count.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import datetime
from typing import Any

import psycopg
from psycopg.rows import dict_row

from awa_cli.attempts import AttemptResult, Finalized
from awa_cli.bulk import DEFAULT_BATCH
from awa_cli.db.queues import dead_letter_names
from awa_cli.db.statements import SQL
from awa_cli.dead_letters import DeadLetterFilter, DeadReason
from awa_cli.errors import JobNotFound, UniqueConflict
from awa_cli.events import AnyEvent
from awa_cli.jobs import JobRow, JobState
from awa_cli.outcomes import audit, settle
from awa_cli.outcomes.bulk import (
    BulkAction,
    BulkRun,
    by_id_batches,
    no_progress,
    repeat_batches,
)
from awa_cli.outcomes.transaction import CoreState, Cursor

# The columns of a dead letter that finalisation changed (what committed_row needs).
_CHANGED = (
    "id",
    "state",
    "run_at",
    "attempt",
    "finalized_at",
    "callback_id",
    "callback_timeout_at",
    "has_dependents",  # for the settling of its children and its workflow (outcomes/settle.py)
    "workflow_id",
)


def attempt_reason(result: AttemptResult) -> DeadReason:
    """Why a failing attempt dead-letters: a TerminalError (or args that do not rebuild, or
    awa's refusal of what the handler did) is ``terminal_error``; the last attempt's error is
    ``exhausted``."""
    return DeadReason.TERMINAL_ERROR if result.terminal else DeadReason.EXHAUSTED


async def bound_for_dlq(
    core: CoreState, conn: psycopg.AsyncConnection[Any], results: Sequence[AttemptResult]
) -> dict[int, DeadReason]:
    """The failing attempts of ``results`` whose queue dead-letters, with their reasons.

    Reads ``awa.queues`` only when a failing attempt's queue is not one of the core's own."""
    failing = [r for r in results if r.state is JobState.FAILED]
    if not failing:
        return {}
    flags = core.dead_letter_flags
    announced: set[str] = set()
    if any(r.job.queue not in flags for r in failing):
        announced = await dead_letter_names(conn)
    return {
        r.job.id: attempt_reason(r)
        for r in failing
        if flags.get(r.job.queue, r.job.queue in announced)
    }


async def finalize_into_dlq(
    conn: psycopg.AsyncConnection[Any],
    results: Sequence[AttemptResult],
    reasons: dict[int, DeadReason],
) -> dict[int, dict[str, Any]]:
    """Fail and move these attempts in one statement; the changed columns by job id (a
    stale attempt is missing, as from ``finalize_changed``)."""
    params = {
        "ids": [r.job.id for r in results],
        "leases": [r.job.run_lease for r in results],
        "errors": [None if r.error_entry is None else json.dumps(r.error_entry) for r in results],
        "reasons": [str(reasons[r.job.id]) for r in results],
        "progress": [r.progress for r in results],  # the attempt's latest, as finalize_changed
    }
    async with conn.cursor(row_factory=dict_row) as cur:
        await cur.execute(SQL["dead_letter_finalize"], params)
        records = await cur.fetchall()
    return {r["id"]: {k: r[k] for k in _CHANGED} for r in records}


async def move_failed(
    core: CoreState, cur: Cursor, rows: Sequence[JobRow], reason: DeadReason
) -> set[int]:
    """Move these just-failed jobs of dead-lettering queues into the DLQ, inside the caller's
    transaction (after the transition and its specs). Returns the ids moved.

    A row whose rescue follow-ups are still pending stays (the follow-up transaction moves
    it once they ran)."""
    flags = core.dead_letter_flags
    failed = [r for r in rows if r.state is JobState.FAILED]
    decided = [r.id for r in failed if flags.get(r.queue) is True]
    ask = [r.id for r in failed if r.queue not in flags]
    moved: set[int] = set()
    for ids, only_flagged in ((decided, False), (ask, True)):
        if not ids:
            continue
        await cur.execute(
            SQL["dead_letter_move"],
            {"ids": ids, "reasons": [str(reason)] * len(ids), "only_flagged": only_flagged},
        )
        moved |= {int(r["id"]) for r in await cur.fetchall()}
    return moved


def then_move(core: CoreState, reason: DeadReason) -> Any:
    """A ``Transition.then`` that dead-letters the committed row if it failed."""

    async def then(cur: Cursor, row: JobRow, event: AnyEvent | None) -> None:
        await move_failed(core, cur, [row], reason)

    return then


async def retry_one(
    core: CoreState,
    job_id: int,
    *,
    queue: str | None = None,
    priority: int | None = None,
    run_at: datetime | None = None,
    actor: str | None = None,
) -> JobRow:
    """Put one dead letter back into awa.jobs under its id (attempt 0, errors kept plus
    ``retried from the dead-letter queue``). JobNotFound when there is no such dead letter;
    UniqueConflict when its unique key is held again (it stays in the DLQ)."""
    params = {"ids": [job_id], "queue": queue, "priority": priority, "run_at": run_at}
    async with core.pool.connection() as conn, conn.transaction():
        async with conn.cursor(row_factory=dict_row) as cur:
            await cur.execute(SQL["dead_letter_retry"], params)
            record = await cur.fetchone()
            if record is None:
                await cur.execute(SQL["dead_letter_get"], {"id": job_id})
                dead = await cur.fetchone()
        if record is not None:
            await settle.reopen(conn, [record])  # re-block what its failure cancelled
            await audit.record(conn, actor, "dlq.retry", str(job_id), detail={"count": 1})
    if record is not None:
        return JobRow.from_record(record)
    if dead is None:
        await audit.record_alone(core, actor, "dlq.retry", str(job_id), "failed")
        raise JobNotFound(f"dead letter {job_id} not found")
    await audit.record_alone(core, actor, "dlq.retry", str(job_id), "failed")
    raise UniqueConflict(str(dead["kind"]))


async def retry_many(core: CoreState, where: DeadLetterFilter, run: BulkRun) -> int:
    """Put every matching dead letter back (as :func:`retry_one`), in bounded batches; those
    whose unique key is held again stay in the DLQ."""
    queue, kind = where.queue, where.kind
    act = BulkAction(core, run, "dlq.retry", "dlq retry", {"queue": queue, "kind": kind}, where.all)
    params: dict[str, Any] = {"ids": None, "queue": queue, "kind": kind, "older_than": None}
    total = await act.total("dead_letter_count", params)
    if run.dry_run:
        return total

    async def apply(
        conn: psycopg.AsyncConnection[Any], ids: list[int]
    ) -> tuple[int, list[Finalized]]:
        cur = await conn.execute(
            SQL["dead_letter_retry"], {"ids": ids, "queue": None, "priority": None, "run_at": None}
        )
        return max(cur.rowcount, 0), []

    done = await by_id_batches(core, "dead_letter_select", params, apply, total, act.progress)
    return await act.record(done)


async def move_many(
    core: CoreState, where: DeadLetterFilter, run: BulkRun, reason: str | None = None
) -> int:
    """Move failed jobs into the DLQ (reason ``manual``, an error entry saying so)."""
    queue, kind = where.queue, where.kind
    act = BulkAction(core, run, "dlq.move", "dlq move", {"queue": queue, "kind": kind}, where.all)
    counted = {"states": ["failed"], "queue": queue, "kind": kind, "older_than": None}
    counted |= {"tag": None, "ids": None}
    total = await act.total("bulk_count_jobs", counted)
    if run.dry_run:
        return total
    params = {"queue": queue, "kind": kind, "note": reason}
    done = await repeat_batches(core, "dead_letter_move_failed", params, total, act.progress)
    return await act.record(done, detail={"reason": reason} if reason else None)


async def purge(core: CoreState, where: DeadLetterFilter, run: BulkRun) -> int:
    """Delete matching dead letters, in bounded batches."""
    filters = {
        "id": where.id,
        "queue": where.queue,
        "kind": where.kind,
        "older_than": where.older_than,
    }
    act = BulkAction(core, run, "dlq.purge", "dlq purge", filters, where.all)
    ids = None if where.id is None else [where.id]
    params = {"ids": ids, "queue": where.queue, "kind": where.kind, "older_than": where.older_than}
    total = await act.total("dead_letter_count", params)
    if run.dry_run:
        return total
    done = await repeat_batches(core, "dead_letter_purge", params, total, act.progress)
    return await act.record(done)


async def prune(core: CoreState, retention: float, batch: int = DEFAULT_BATCH) -> int:
    """Retention: delete dead letters older than ``retention`` seconds, batch by batch until
    one comes back short (the leader's sweep)."""
    return await repeat_batches(
        core, "dead_letter_prune", {"retention": retention}, 0, no_progress, batch
    )
