"""Operator actions: cancel and retry (``Client.cancel`` / ``retry``, ``awa job …``)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from awa_cli.db.channels import CANCEL_CHANNEL
from awa_cli.db.statements import SQL
from awa_cli.events import JobEvent
from awa_cli.jobs import JobRow
from awa_cli.outcomes import settle
from awa_cli.outcomes.audit import audited
from awa_cli.outcomes.transaction import (
    CoreState,
    Cursor,
    Missing,
    Transition,
    notify_queue,
    transition,
)
from awa_cli.errors import InvalidJobState, JobNotFound

if TYPE_CHECKING:
    from awa_cli.events import AnyEvent


def missing_or_state(job_id: int, verb: str) -> Missing:
    """``missing`` for operator actions: JobNotFound, or InvalidJobState naming the state."""

    async def explain(cur: Cursor) -> None:
        await cur.execute(SQL["job_state"], {"id": job_id})
        found = await cur.fetchone()
        if found is None:
            raise JobNotFound(f"job {job_id} not found")
        raise InvalidJobState(f"job {job_id} is {found['state']} and cannot be {verb}")

    return explain


async def cancel(core: CoreState, job_id: int, reason: str = "cancelled by operator") -> JobRow:
    """Cancel a pending, running or waiting job; fires Cancelled and runs on_cancelled specs.

    A handler still running the job sees ``job.is_cancelled()``; its late result is fenced.
    """
    row = await transition(
        core,
        Transition(
            "cancel",
            {"id": job_id},
            missing_or_state(job_id, "cancelled"),
            event=lambda row, _: JobEvent.Cancelled(row, row.args, reason),
            then=audited(core, "job.cancel", notify_cancel),
        ),
    )
    assert row is not None  # missing raised
    return row


async def notify_cancel(cur: Cursor, row: JobRow, event: AnyEvent | None = None) -> None:
    """``then`` of a cancel: tell the worker that may be running the job (delivered at commit)."""
    await cur.execute(SQL["notify_cancel"], {"channel": CANCEL_CHANNEL, "id": str(row.id)})


async def reblock(cur: Cursor, row: JobRow, event: AnyEvent | None = None) -> None:
    """``then`` of a retry: block the job again while a parent is unfinished, and the
    descendants its failure cancelled (outcomes/settle.py), then wake its queue."""
    await settle.reopen(cur.connection, [reopened(row)])
    await notify_queue(cur, row)


def reopened(row: JobRow) -> dict[str, Any]:
    """What ``settle.reopen`` needs of a retried row."""
    return {
        "id": row.id,
        "has_dependents": True,  # not in JobRow: dep_reopen finds out (one statement)
        "metadata": row.metadata,
        "workflow_id": row.metadata.get("awa.workflow_id"),
    }


async def retry(core: CoreState, job_id: int) -> JobRow:
    """Make a failed, cancelled, retryable or scheduled job available now; fires nothing."""
    row = await transition(
        core,
        Transition(
            "retry",
            {"id": job_id},
            missing_or_state(job_id, "retried"),
            then=audited(core, "job.retry", reblock),
        ),
    )
    assert row is not None  # missing raised
    return row
