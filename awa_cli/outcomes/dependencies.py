"""Children of a job that just became terminal, and of a job retried (architecture §16).

Both run inside the transaction of the parent's transition, called from the one hook of
``outcomes/settle.py``; nothing here commits.

* :func:`settle` — a parent completed, failed or was cancelled: each blocked child loses one
  pending parent (``dep_settle``), becomes available (or scheduled) when none is left, or is
  cancelled with reason ``parent <id> <state>`` (policy ``cancel``), and so, level by level,
  is everything below it. Only rows the guarded statement changed reach here, so a stale
  attempt never settles a child, and a child is only ever changed while it is blocked.
* :func:`reopen` — a failed or cancelled job was retried: the descendants its failure
  cancelled are blocked again, their pending parents counted afresh (a wide child's on its
  shard rows, ``sql/0015_dependency_shards.sql``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import psycopg
from psycopg.rows import dict_row

from awa_cli.attempts import Finalized
from awa_cli.db.statements import SQL
from awa_cli.events import JobEvent
from awa_cli.jobs import JobRow

if TYPE_CHECKING:
    from awa_cli.outcomes.transaction import CoreState

_TERMINAL = ("completed", "failed", "cancelled")


def _terminal_parents(records: Sequence[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    return [r for r in records if r.get("has_dependents") and str(r["state"]) in _TERMINAL]


async def settle(
    core: CoreState, conn: psycopg.AsyncConnection[Any], records: Sequence[Mapping[str, Any]]
) -> tuple[list[Finalized], list[Mapping[str, Any]]]:
    """Settle the children of the terminal ``records`` (committed rows: ``id``, ``state``,
    ``has_dependents``). Returns the cancelled children's transitions (their ``Cancelled``
    events, dispatched after commit) and every child row changed (``id``, ``state``,
    ``queue``, ``has_dependents``, ``workflow_id``: a 10,000-wide fan-out returns 10,000 of
    them, so not the whole rows)."""
    frontier = _terminal_parents(records)
    items: list[Finalized] = []
    changed: list[Mapping[str, Any]] = []
    woken: set[str] = set()
    async with conn.cursor(row_factory=dict_row) as cur:
        while frontier:
            await cur.execute(
                SQL["dep_settle"],
                {"ids": [r["id"] for r in frontier], "states": [str(r["state"]) for r in frontier]},
            )
            rows = await cur.fetchall()  # id, state, queue, has_dependents, workflow_id
            changed.extend(rows)
            cancelled = [r["id"] for r in rows if str(r["state"]) == "cancelled"]
            if cancelled:  # rare (a failed parent): their whole rows, for the events
                await cur.execute(SQL["dep_jobs_by_id"], {"ids": cancelled})
                for record in await cur.fetchall():
                    items.append(await _cancelled(core, conn, record))
            woken.update(r["queue"] for r in rows if str(r["state"]) == "available")
            frontier = _terminal_parents(rows)
        if woken and core.defer_notify and items:
            items[0].queues |= woken
        elif woken:
            await cur.execute(SQL["notify_queues"], {"queues": sorted(woken)})
    return items, changed


async def _cancelled(
    core: CoreState, conn: psycopg.AsyncConnection[Any], record: Mapping[str, Any]
) -> Finalized:
    """A child cancelled because a parent failed: an ordinary Cancelled transition (the
    app's on_cancelled specs run in this transaction, the event after commit)."""
    row = JobRow.from_record(record)
    reason = row.errors[-1]["error"] if row.errors else "parent failed"
    event = JobEvent.Cancelled(row, row.args, reason)
    item = Finalized(row.id, row, events=[event])
    await core.run_specs(conn, event, item)
    return item


async def reopen(conn: psycopg.AsyncConnection[Any], ids: Sequence[int]) -> list[Mapping[str, Any]]:
    """After the retry of ``ids`` (in this transaction): block again the descendants their
    failure cancelled, and the retried jobs themselves while a parent is unfinished. Wakes
    the queues of rows made available."""
    if not ids:
        return []
    async with conn.cursor(row_factory=dict_row) as cur:
        await cur.execute(SQL["dep_reopen"], {"ids": list(ids)})
        rows: list[Mapping[str, Any]] = list(await cur.fetchall())
        # a wide child counts its parents on shard rows: count them afresh too
        await cur.execute(SQL["dep_count_wide"], {"ids": sorted({*ids, *(r["id"] for r in rows)})})
        woken = sorted({r["queue"] for r in rows if r["state"] == "available"})
        if woken:
            await cur.execute(SQL["notify_queues"], {"queues": woken})
    return rows
