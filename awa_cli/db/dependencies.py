"""The gateway of ``awa.job_dependencies`` (statements in ``sql/dependencies.sql`` and
``sql/workflows.sql``): inserting jobs with parents (``after=``) and whole workflows, and
reading a job's parents and children (architecture §16).

The inserts are written once, as *plans*: generators that yield ``(statement, params)`` and
receive the rows, run by :func:`run_sync` on the caller's psycopg connection
(``awa.insert(conn, ...)``) or by :func:`run_async` (the clients), always inside a
transaction (a savepoint when the caller has one open), so nothing is half written.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Generator, Mapping, Sequence
from typing import Any, LiteralString, TypeVar

import psycopg
from psycopg.rows import DictRow, dict_row

from awa_cli.db.params import insert_each_params
from awa_cli.db.statements import SQL
from awa_cli.errors import UniqueConflict, ValidationError
from awa_cli.jobs import JobRow, PreparedJob
from awa_cli.workflows import (
    AFTER_KEY,
    STEP_KEY,
    WORKFLOW_ID_KEY,
    JobRelations,
    ParentFailure,
    PlannedStep,
    Relative,
    Workflow,
    WorkflowRun,
)

T = TypeVar("T")
Request = tuple[LiteralString, Mapping[str, Any]]
Plan = Generator[Request, list[DictRow], T]

_TERMINAL = ("completed", "failed", "cancelled")


def _frame(conn: psycopg.Connection[Any] | psycopg.AsyncConnection[Any]) -> bool:
    """Whether to open a transaction (or savepoint) of our own: not when the caller's
    connection is about to start its own implicit transaction, which we must not commit."""
    idle = conn.info.transaction_status == psycopg.pq.TransactionStatus.IDLE
    return conn.autocommit or not idle


def run_sync(conn: psycopg.Connection[Any], plan: Plan[T]) -> T:
    """Run ``plan`` on a synchronous connection, in a transaction (or savepoint)."""
    frame = conn.transaction() if _frame(conn) else contextlib.nullcontext()
    with frame, conn.cursor(row_factory=dict_row) as cur:
        try:
            name, params = next(plan)
            while True:
                cur.execute(SQL[name], params)
                rows = cur.fetchall() if cur.description is not None else []
                name, params = plan.send(rows)
        except StopIteration as done:
            result: T = done.value
            return result


async def run_async(conn: psycopg.AsyncConnection[Any], plan: Plan[T]) -> T:
    """Run ``plan`` on an async connection, in a transaction (or savepoint)."""
    frame = conn.transaction() if _frame(conn) else contextlib.nullcontext()
    async with frame, conn.cursor(row_factory=dict_row) as cur:
        try:
            name, params = next(plan)
            while True:
                await cur.execute(SQL[name], params)
                rows = await cur.fetchall() if cur.description is not None else []
                name, params = plan.send(rows)
        except StopIteration as done:
            result: T = done.value
            return result


def _parent_states(ids: Sequence[int], field: str) -> Plan[dict[int, DictRow]]:
    """Lock and flag the parents; their committed states (a dead letter as failed)."""
    if not ids:
        return {}
    found = {r["id"]: r for r in (yield ("dep_lock_parents", {"ids": list(ids)}))}
    missing = [i for i in ids if i not in found]
    if missing:
        for r in (yield ("dep_dead_parents", {"ids": missing})):
            found[r["id"]] = {"id": r["id"], "state": "failed", "step": None}
        missing = [i for i in ids if i not in found]
    if missing:
        raise ValidationError(field, f"parent job {missing[0]} not found")
    return found


def _child_state(
    parents: Sequence[tuple[int, str]], policy: ParentFailure
) -> tuple[str | None, int, dict[str, Any] | None]:
    """(state, pending parents, error) of a child whose parents are ``(id, state)``; state
    None: by its run_at (available or scheduled)."""
    if policy == "cancel":
        for pid, state in parents:
            if state in ("failed", "cancelled"):
                error = {
                    "error": f"parent {pid} {state}",
                    "attempt": 0,
                    "terminal": True,
                    "parent": pid,
                }
                return "cancelled", 0, error
        pending = sum(1 for _, state in parents if state != "completed")
    else:
        pending = sum(1 for _, state in parents if state not in _TERMINAL)
    return ("blocked" if pending else None), pending, None


def _with_metadata(job: PreparedJob, extra: Mapping[str, Any]) -> str:
    data = json.loads(job.metadata_json)
    data.update(extra)
    return json.dumps(data, separators=(",", ":"))


def _insert_params(
    ids: Sequence[int],
    jobs: Sequence[PreparedJob],
    metadata: Sequence[str],
    shape: Sequence[tuple[str | None, int, dict[str, Any] | None]],
    policies: Sequence[ParentFailure | None],
    has_dependents: Sequence[bool],
    workflow_id: int | None,
) -> dict[str, Any]:
    params = insert_each_params(jobs)
    params.update(
        ids=list(ids),
        metadata=list(metadata),
        states=[s for s, _, _ in shape],
        pendings=[p for _, p, _ in shape],
        errors=[None if e is None else json.dumps(e) for _, _, e in shape],
        policies=list(policies),
        has_dependents=list(has_dependents),
        workflow_ids=[workflow_id] * len(jobs),
    )
    return params


def _unique_conflict(jobs: Sequence[PreparedJob], ids: Sequence[int], got: set[int]) -> None:
    for job, job_id in zip(jobs, ids, strict=True):
        if job_id not in got:
            raise UniqueConflict(job.kind, None)


def insert_after(
    jobs: Sequence[PreparedJob], parents: Sequence[int], policy: ParentFailure
) -> Plan[list[JobRow]]:
    """Insert ``jobs``, each a child of every one of ``parents`` (ids): blocked until they
    complete, cancelled at once when one already failed (policy ``cancel``)."""
    states = yield from _parent_states(parents, "after")
    shape = _child_state([(p, states[p]["state"]) for p in parents], policy)
    ids = [r["nextval"] for r in (yield ("dep_draw_ids", {"n": len(jobs)}))]
    extra = {AFTER_KEY: len(parents)} if parents else {}
    params = _insert_params(
        ids,
        jobs,
        [_with_metadata(j, extra) for j in jobs],
        [shape] * len(jobs),
        [policy if parents else None] * len(jobs),
        [False] * len(jobs),
        None,
    )
    got = {r["id"] for r in (yield ("dep_insert_jobs", params))}
    _unique_conflict(jobs, ids, got)
    if parents:
        yield (
            "dep_insert_edges",
            {
                "parents": [p for _ in ids for p in parents],
                "children": [c for c in ids for _ in parents],
            },
        )
    return [JobRow.from_record(r) for r in (yield ("dep_jobs_by_id", {"ids": ids}))]


def insert_workflow(
    wf: Workflow, planned: Sequence[PlannedStep], jobs: Sequence[PreparedJob]
) -> Plan[WorkflowRun | None]:
    """Insert the workflow's row, its steps and their edges; None when a workflow with the
    same periodic fire (metadata ``awa.periodic`` and ``awa.fire_at``) exists already."""
    outside = list(dict.fromkeys(p for s in planned for p in s.outside))
    states = yield from _parent_states(outside, f"workflow {wf.name!r}")
    # the steps' ids first: the workflow's row keeps their range, its reads' only path to them
    ids = [r["nextval"] for r in (yield ("dep_draw_ids", {"n": len(jobs)}))]
    created = yield (
        "wf_insert",
        {
            "name": wf.name,
            "metadata": json.dumps(wf.metadata),
            "first_step": min(ids, default=None),
            "last_step": max(ids, default=None),
        },
    )
    if not created:
        return None
    head = created[0]
    shapes = _step_shapes(planned, ids, states)
    is_parent = [False] * len(planned)
    for step in planned:
        for parent in step.parents:
            is_parent[parent] = True
    metadata = []
    for step, job in zip(planned, jobs, strict=True):
        extra: dict[str, Any] = {WORKFLOW_ID_KEY: head["id"], STEP_KEY: step.step.name}
        if step.parents or step.outside:
            extra[AFTER_KEY] = len(step.parents) + len(step.outside)
        metadata.append(_with_metadata(job, extra))
    policies: list[ParentFailure | None] = [
        s.step.on_parent_failure if (s.parents or s.outside) else None for s in planned
    ]
    params = _insert_params(ids, jobs, metadata, shapes, policies, is_parent, head["id"])
    got = {r["id"] for r in (yield ("dep_insert_jobs", params))}
    _unique_conflict(jobs, ids, got)
    edges = [(ids[p], ids[s.index]) for s in planned for p in s.parents]
    edges += [(p, ids[s.index]) for s in planned for p in s.outside]
    if edges:
        yield (
            "dep_insert_edges",
            {"parents": [p for p, _ in edges], "children": [c for _, c in edges]},
        )
    rows = [JobRow.from_record(r) for r in (yield ("dep_jobs_by_id", {"ids": ids}))]
    by_id = {r.id: r for r in rows}
    steps = {s.step.name: by_id[ids[s.index]] for s in planned}
    counts: dict[str, int] = {}
    for row in rows:
        counts[str(row.state)] = counts.get(str(row.state), 0) + 1
    state = "running"
    if all(r.state.is_terminal for r in rows):  # every step cancelled by a failed outside parent
        yield ("wf_finish", {"ids": [head["id"]]})
        state = "cancelled"
    return WorkflowRun(
        head["id"],
        head["name"],
        state,
        steps,
        head["created_at"],
        None,
        counts,
        dict(head["metadata"] or {}),
    )


def _step_shapes(
    planned: Sequence[PlannedStep], ids: Sequence[int], outside: Mapping[int, DictRow]
) -> list[tuple[str | None, int, dict[str, Any] | None]]:
    """Each step's (state, pending parents, error) at insert: an outside parent that already
    failed cancels the steps below it (policy ``cancel``), transitively."""
    cancelled: dict[int, tuple[int, str]] = {}  # step index -> (parent id, parent state)
    changed = True
    while changed:  # only loops again when an outside parent had failed (rare)
        changed = False
        for s in planned:
            if s.index in cancelled or s.step.on_parent_failure != "cancel":
                continue
            bad = [
                (p, outside[p]["state"])
                for p in s.outside
                if outside[p]["state"] in ("failed", "cancelled")
            ]
            bad += [(ids[p], "cancelled") for p in s.parents if p in cancelled]
            if bad:
                cancelled[s.index] = bad[0]
                changed = True
    shapes: list[tuple[str | None, int, dict[str, Any] | None]] = []
    for s in planned:
        if s.index in cancelled:
            pid, pstate = cancelled[s.index]
            error = {
                "error": f"parent {pid} {pstate}",
                "attempt": 0,
                "terminal": True,
                "parent": pid,
            }
            shapes.append(("cancelled", 0, error))
            continue
        done = ("completed",) if s.step.on_parent_failure == "cancel" else _TERMINAL
        pending = sum(1 for p in s.outside if outside[p]["state"] not in done)
        pending += sum(1 for p in s.parents if p not in cancelled)
        shapes.append(("blocked" if pending else None, pending, None))
    return shapes


async def parents_of(conn: psycopg.AsyncConnection[Any], job_id: int) -> list[DictRow]:
    """A job's parents: ``id``, ``state`` (a dead letter as failed), ``step``, ``output``."""
    async with conn.cursor(row_factory=dict_row) as cur:
        await cur.execute(SQL["dep_parents_of"], {"id": job_id})
        return await cur.fetchall()


async def children_of(conn: psycopg.AsyncConnection[Any], job_id: int) -> list[DictRow]:
    """A job's children: ``id``, ``state``, ``step``."""
    async with conn.cursor(row_factory=dict_row) as cur:
        await cur.execute(SQL["dep_children_of"], {"id": job_id})
        return await cur.fetchall()


def _relatives(rows: Sequence[DictRow]) -> list[Relative]:
    return [Relative(int(r["id"]), r["kind"], str(r["state"]), r["step"]) for r in rows]


async def relations(
    conn: psycopg.AsyncConnection[Any], job_id: int, limit: int
) -> JobRelations | None:
    """A job's first ``limit`` parents and children (with kind, state, step, and how many
    there are), its workflow and step, and its batch; None when there is no such job."""
    async with conn.cursor(row_factory=dict_row) as cur:
        await cur.execute(SQL["dep_job_links"], {"id": job_id})
        links = await cur.fetchone()
        if links is None:
            return None
        await cur.execute(SQL["dep_parents_page"], {"id": job_id, "limit": limit})
        parents = await cur.fetchall()
        await cur.execute(SQL["dep_children_page"], {"id": job_id, "limit": limit})
        children = await cur.fetchall()
    batch_id, callback = links["batch_id"], None
    meta_batch = links["meta_batch_id"]
    if batch_id is None and isinstance(meta_batch, int) and not isinstance(meta_batch, bool):
        batch_id, callback = meta_batch, links["batch_callback"]  # a batch's callback job
    return JobRelations(
        parents=_relatives(parents),
        children=_relatives(children),
        parent_count=int(parents[0]["total"]) if parents else 0,
        child_count=int(children[0]["total"]) if children else 0,
        workflow_id=links["workflow_id"],
        workflow_name=links["workflow_name"],
        step=links["step"] if links["workflow_id"] is not None else None,
        batch_id=batch_id,
        batch_callback=callback,
    )
