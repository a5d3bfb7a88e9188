"""Queue controls (architecture §10): pause and resume, the queues a worker announces, and the
list of known queues. The pause itself is a predicate of the claim statements
(``db/sql/claim.sql``): a paused queue is claimed by no worker, running jobs finish and
inserts still work."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from psycopg.rows import dict_row

from awa_cli.admin import QueueInfo
from awa_cli.db.statements import SQL
from awa_cli.enqueue import check_name
from awa_cli.outcomes import audit
from awa_cli.outcomes.transaction import CoreState


async def set_paused(core: CoreState, queue: str, paused: bool, actor: str | None) -> QueueInfo:
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


async def get(core: CoreState, queue: str) -> QueueInfo:
    """The control state of ``queue`` (a queue without a row: not paused)."""
    async with core.pool.connection() as conn, conn.cursor(row_factory=dict_row) as cur:
        await cur.execute(SQL["queue_get"], {"queue": queue})
        record = await cur.fetchone()
    return QueueInfo(queue) if record is None else QueueInfo.from_record(record)


async def list_queues(core: CoreState, configured: Iterable[str] = ()) -> list[QueueInfo]:
    """Every known queue (rows of awa.queues, queues with runnable jobs, ``configured``); a
    row nothing keeps listed is forgotten after ``defaults.QUEUE_FORGET_AFTER`` (queue_list)."""
    async with core.pool.connection() as conn, conn.cursor(row_factory=dict_row) as cur:
        await cur.execute(SQL["queue_list"], {"configured": sorted(set(configured))})
        return [QueueInfo.from_record(r) for r in await cur.fetchall()]


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


async def dead_letter_names(conn: Any) -> set[str]:
    """The queues announced with dead-lettering on (``awa.queues.dead_letter``)."""
    async with conn.cursor() as cur:
        await cur.execute(SQL["queue_dead_letter_names"])
        return {r[0] for r in await cur.fetchall()}


async def paused_names(core: CoreState) -> list[str]:
    """The paused queues, by name."""
    async with core.pool.connection() as conn, conn.cursor() as cur:
        await cur.execute(SQL["queue_paused_names"])
        return [str(r[0]) for r in await cur.fetchall()]
