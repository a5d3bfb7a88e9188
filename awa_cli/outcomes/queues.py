"""Queue controls (architecture §10): pause and resume, and the queues a worker announces (the
reads of ``awa.queues`` are ``db/queues.py``'s). The pause itself is a predicate of the claim statements
(``db/sql/claim.sql``): a paused queue is claimed by no worker, running jobs finish and
inserts still work."""

from __future__ import annotations

from collections.abc import Mapping

from psycopg.rows import dict_row

from awa_cli.queues import QueueInfo
from awa_cli.db.statements import SQL
from awa_cli.enqueue import check_name
from awa_cli.outcomes import audit
from awa_cli.outcomes.transaction import CoreState


async def set_paused(
    core: CoreState, queue: str, paused: bool, actor: str | None = None
) -> QueueInfo:
    """Pause or resume ``queue`` and record it, in one transaction. Resuming wakes the
    queue's workers at commit."""
    check_name(queue, "queue")
    statement = SQL["queue_pause"] if paused else SQL["queue_resume"]
    async with core.pool.connection() as conn, conn.transaction():
        async with conn.cursor(row_factory=dict_row) as cur:
            await cur.execute(statement, {"queue": queue, "actor": actor})
            record = await cur.fetchone()
        assert record is not None  # an upsert returns its row
        await audit.record(conn, actor, "queue.pause" if paused else "queue.resume", queue)
    return QueueInfo.from_record(record)


async def register(core: CoreState, dead_letter: Mapping[str, bool]) -> None:
    """A worker announces its queues and their dead-letter flags when it starts."""
    if not dead_letter:
        return
    names = sorted(dead_letter)
    async with core.pool.connection() as conn:
        await conn.execute(
            SQL["queue_register"],
            {"names": names, "dead_letter": [bool(dead_letter[n]) for n in names]},
        )
