"""The dead-letter queue's operator actions (architecture §10): retry (one or by filter), move
failed jobs in, purge, and the leader's retention prune (listing, one dead letter and the
depth are reads: ``db/dead_letters.py``).

Filtered actions run in bounded batches (``admin.DEFAULT_BATCH``), one short transaction per
batch (see ``outcomes/bulk.py``), and are recorded in the audit log with their count.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

import psycopg
from psycopg.rows import dict_row

from awa_cli.admin import DEFAULT_BATCH, DeadLetterFilter
from awa_cli.attempts import Finalized
from awa_cli.db.statements import SQL
from awa_cli.errors import JobNotFound, UniqueConflict
from awa_cli.jobs import JobRow
from awa_cli.outcomes import audit, settle
from awa_cli.outcomes.bulk import (
    Progress,
    no_progress,
    by_id_batches,
    count,
    refusing,
    repeat_batches,
)
from awa_cli.outcomes.transaction import CoreState


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


async def retry_many(
    core: CoreState,
    where: DeadLetterFilter,
    *,
    dry_run: bool = False,
    actor: str | None = None,
    progress: Progress | None = None,
) -> int:
    """Put every matching dead letter back (as :func:`retry_one`), in bounded batches; those
    whose unique key is held again stay in the DLQ."""
    queue, kind = where.queue, where.kind
    await refusing(core, actor, "dlq.retry", "dlq retry", where.all, queue=queue, kind=kind)
    params: dict[str, Any] = {"ids": None, "queue": queue, "kind": kind, "older_than": None}
    total = await count(core, "dead_letter_count", params) if dry_run or progress else 0
    if dry_run:
        return total

    async def apply(
        conn: psycopg.AsyncConnection[Any], ids: list[int]
    ) -> tuple[int, list[Finalized]]:
        cur = await conn.execute(
            SQL["dead_letter_retry"], {"ids": ids, "queue": None, "priority": None, "run_at": None}
        )
        return max(cur.rowcount, 0), []

    done = await by_id_batches(
        core, "dead_letter_select", params, apply, total, progress or no_progress
    )
    target = audit.describe(queue=queue, kind=kind)
    await audit.record_alone(core, actor, "dlq.retry", target, detail={"count": done})
    return done


async def move_failed(
    core: CoreState,
    where: DeadLetterFilter,
    *,
    reason: str | None = None,
    dry_run: bool = False,
    actor: str | None = None,
    progress: Progress | None = None,
) -> int:
    """Move failed jobs into the DLQ (reason ``manual``, an error entry saying so)."""
    queue, kind = where.queue, where.kind
    await refusing(core, actor, "dlq.move", "dlq move", where.all, queue=queue, kind=kind)
    counted = {"states": ["failed"], "queue": queue, "kind": kind, "older_than": None}
    counted |= {"tag": None, "ids": None}
    total = await count(core, "bulk_count_jobs", counted) if dry_run or progress else 0
    if dry_run:
        return total
    params = {"queue": queue, "kind": kind, "note": reason}
    done = await repeat_batches(
        core, "dead_letter_move_failed", params, total, progress or no_progress
    )
    detail: dict[str, Any] = {"count": done, **({"reason": reason} if reason else {})}
    target = audit.describe(queue=queue, kind=kind)
    await audit.record_alone(core, actor, "dlq.move", target, detail=detail)
    return done


async def purge(
    core: CoreState,
    where: DeadLetterFilter,
    *,
    dry_run: bool = False,
    actor: str | None = None,
    progress: Progress | None = None,
) -> int:
    """Delete matching dead letters, in bounded batches."""
    filters = {
        "id": where.id,
        "queue": where.queue,
        "kind": where.kind,
        "older_than": where.older_than,
    }
    await refusing(core, actor, "dlq.purge", "dlq purge", where.all, **filters)
    ids = None if where.id is None else [where.id]
    params = {"ids": ids, "queue": where.queue, "kind": where.kind, "older_than": where.older_than}
    total = await count(core, "dead_letter_count", params) if dry_run or progress else 0
    if dry_run:
        return total
    done = await repeat_batches(core, "dead_letter_purge", params, total, progress or no_progress)
    target = audit.describe(**filters)
    await audit.record_alone(core, actor, "dlq.purge", target, detail={"count": done})
    return done


async def prune(core: CoreState, retention: float, batch: int = DEFAULT_BATCH) -> int:
    """Retention: delete dead letters older than ``retention`` seconds, batch by batch until
    one comes back short (the leader's sweep)."""
    return await repeat_batches(
        core, "dead_letter_prune", {"retention": retention}, 0, no_progress, batch
    )
