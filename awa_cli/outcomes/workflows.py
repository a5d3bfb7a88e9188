"""Workflows as a whole (architecture §16): the end of a workflow, detected in the
transaction of its last step's transition, and the operator's cancel and retry.

A running workflow's counts are derived from its steps, so a step's transition never
writes the workflow's row — except the one that ends it. Concurrent last steps are ordered
by a transaction-scoped advisory lock per workflow, taken just before commit (held for the
commit only) by the same call that then checks (``awa.workflow_finish``, with a snapshot
taken after the lock), so exactly one of them sees the workflow over.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import psycopg
from psycopg.rows import DictRow, dict_row

from awa_cli.attempts import Finalized
from awa_cli.db.channels import CANCEL_CHANNEL
from awa_cli.db.statements import SQL
from awa_cli.errors import WorkflowNotFound
from awa_cli.events import JobEvent
from awa_cli.jobs import JobRow
from awa_cli.outcomes import audit, dependencies

if TYPE_CHECKING:
    from awa_cli.outcomes.transaction import CoreState

_TERMINAL = ("completed", "failed", "cancelled")
CANCEL_REASON = "workflow cancelled"


async def settle(conn: psycopg.AsyncConnection[Any], records: Sequence[Mapping[str, Any]]) -> None:
    """End the workflows whose last steps are among the terminal ``records``."""
    ids = sorted(
        {
            int(r["workflow_id"])
            for r in records
            if r.get("workflow_id") is not None and str(r["state"]) in _TERMINAL
        }
    )
    if not ids:
        return
    async with conn.cursor() as cur:
        await cur.execute(SQL["wf_finish"], {"ids": ids})


async def reopen(conn: psycopg.AsyncConnection[Any], records: Sequence[Mapping[str, Any]]) -> None:
    """Workflows of retried steps run again."""
    ids = sorted({int(r["workflow_id"]) for r in records if r.get("workflow_id") is not None})
    async with conn.cursor() as cur:
        for wf_id in ids:
            await cur.execute(SQL["wf_mark"], {"id": wf_id, "state": "running", "counts": None})


async def _head(cur: psycopg.AsyncCursor[DictRow], workflow_id: int) -> DictRow:
    await cur.execute(SQL["wf_get"], {"id": workflow_id})
    head = await cur.fetchone()
    if head is None:
        raise WorkflowNotFound(f"workflow {workflow_id} not found")
    return head


async def _counts(cur: psycopg.AsyncCursor[DictRow], workflow_id: int) -> dict[str, int]:
    await cur.execute(SQL["wf_counts"], {"ids": [workflow_id]})
    return {r["state"]: int(r["n"]) for r in await cur.fetchall()}


async def cancel(core: CoreState, workflow_id: int, actor: str | None) -> DictRow:
    """Cancel every unfinished step (Cancelled fires for each, specs run, a running handler
    is told) and the workflow, with its audit row, in one transaction."""
    items: list[Finalized] = []
    async with core.pool.connection() as conn, conn.transaction():
        async with conn.cursor(row_factory=dict_row) as cur:
            await _head(cur, workflow_id)
            await cur.execute(SQL["wf_cancel_steps"], {"id": workflow_id})
            records = await cur.fetchall()
            for record in records:
                row = JobRow.from_record(record)
                event = JobEvent.Cancelled(row, row.args, CANCEL_REASON)
                item = Finalized(row.id, row, events=[event])
                await core.run_specs(conn, event, item)
                items.append(item)
                await cur.execute(
                    SQL["notify_cancel"], {"channel": CANCEL_CHANNEL, "id": str(row.id)}
                )
            more, _ = await dependencies.settle(core, conn, records)  # children outside it
            items.extend(more)
            counts = await _counts(cur, workflow_id)
            await cur.execute(
                SQL["wf_mark"],
                {"id": workflow_id, "state": "cancelled", "counts": json.dumps(counts)},
            )
            head = await cur.fetchone()
            assert head is not None
            await _record(conn, core, actor, "workflow.cancel", workflow_id, len(records))
    core.after_commit(items)
    return head


async def _record(
    conn: psycopg.AsyncConnection[Any],
    core: CoreState,
    actor: str | None,
    action: str,
    workflow_id: int,
    count: int,
) -> None:
    """The audit row of a workflow action (``actor`` None: the current one), in its
    transaction."""
    actor = audit.current_actor(core) if actor is None else actor
    await audit.record(conn, actor, action, f"workflow:{workflow_id}", detail={"count": count})


async def retry(core: CoreState, workflow_id: int, actor: str | None) -> DictRow:
    """Re-run the failed and cancelled steps (and so what depends on them: a step their old
    outcomes released that has not started waits for them again) and mark the workflow
    running, with its audit row, in one transaction."""
    async with core.pool.connection() as conn, conn.transaction():
        async with conn.cursor(row_factory=dict_row) as cur:
            await _head(cur, workflow_id)
            await cur.execute(SQL["wf_retry_steps"], {"id": workflow_id})
            rows = await cur.fetchall()
            woken = sorted({r["queue"] for r in rows if r["state"] == "available"})
            if woken:
                await cur.execute(SQL["notify_queues"], {"queues": woken})
            # as a job's retry does: a "run" child the old outcomes released that has not
            # started is blocked again, to wait for its parent's new attempt
            await dependencies.reopen(conn, [r["id"] for r in rows])
            await cur.execute(
                SQL["wf_mark"], {"id": workflow_id, "state": "running", "counts": None}
            )
            head = await cur.fetchone()
            assert head is not None
            if not rows:  # nothing to re-run: the workflow stays as it was
                await cur.execute(SQL["wf_finish"], {"ids": [workflow_id]})
                head = await _head(cur, workflow_id)
            await _record(conn, core, actor, "workflow.retry", workflow_id, len(rows))
    return head
