"""The gateway of ``awa.workflows`` (statements in ``sql/workflows.sql``): a workflow with its
steps and counts, the list, and the edges between steps (architecture §16). A running
workflow's counts are derived from its steps here; a finished one's were kept with its row."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import psycopg
from psycopg.rows import dict_row

from awa_cli.db.statements import SQL, head_and_rows
from awa_cli.errors import WorkflowNotFound
from awa_cli.jobs import JobRow
from awa_cli.workflows import STEP_KEY, WORKFLOW_STATES, WorkflowRun


def _run(head: Mapping[str, Any], counts: dict[str, int], steps: dict[str, JobRow]) -> WorkflowRun:
    return WorkflowRun(
        id=head["id"],
        name=head["name"],
        state=head["state"],
        steps=steps,
        created_at=head["created_at"],
        finished_at=head["finished_at"],
        counts=dict(head["counts"]) if head["counts"] is not None else counts,
        metadata=dict(head["metadata"] or {}),
    )


async def _counts(conn: psycopg.AsyncConnection[Any], ids: list[int]) -> dict[int, dict[str, int]]:
    out: dict[int, dict[str, int]] = {i: {} for i in ids}
    if not ids:
        return out
    async with conn.cursor(row_factory=dict_row) as cur:
        await cur.execute(SQL["wf_counts"], {"ids": ids})
        for r in await cur.fetchall():
            out[r["workflow_id"]][r["state"]] = int(r["n"])
    return out


async def get(conn: psycopg.AsyncConnection[Any], workflow_id: int) -> WorkflowRun:
    """The workflow with its steps (name -> job row) and counts, or WorkflowNotFound."""
    missing = WorkflowNotFound(f"workflow {workflow_id} not found")
    head, records = await head_and_rows(conn, "wf_get", "wf_steps", {"id": workflow_id}, missing)
    rows = [JobRow.from_record(r) for r in records]
    steps = {str(r.metadata.get(STEP_KEY, r.id)): r for r in rows}
    counts = (await _counts(conn, [workflow_id]))[workflow_id]
    return _run(head, counts, steps)


async def list_all(
    conn: psycopg.AsyncConnection[Any],
    state: str | None = None,
    name: str | None = None,
    limit: int = 100,
) -> list[WorkflowRun]:
    """Workflows newest first, with their counts (steps not loaded)."""
    if state is not None and state not in WORKFLOW_STATES:
        from awa_cli.errors import ValidationError

        raise ValidationError("state", f"must be one of {', '.join(WORKFLOW_STATES)}")
    async with conn.cursor(row_factory=dict_row) as cur:
        await cur.execute(SQL["wf_list"], {"state": state, "name": name, "limit": limit})
        heads = await cur.fetchall()
    counts = await _counts(conn, [h["id"] for h in heads if h["counts"] is None])
    return [_run(h, counts.get(h["id"], {}), {}) for h in heads]


async def edges(conn: psycopg.AsyncConnection[Any], workflow_id: int) -> list[tuple[int, int]]:
    """The (parent id, child id) edges between the workflow's steps."""
    async with conn.cursor() as cur:
        await cur.execute(SQL["wf_edges"], {"id": workflow_id})
        return [(int(p), int(c)) for p, c in await cur.fetchall()]
