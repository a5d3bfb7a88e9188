"""The dependency and workflow methods of :class:`~awa_cli.client.AsyncClient`
(architecture §16), functions taking the client first that ``client.py`` binds as its
methods: insert a workflow, read, cancel and retry one, a job's parents and children. Inserts run the plans of ``db/dependencies.py``; cancel and retry are transitions of
the outcome core (``outcomes/workflows.py``), audited when there is an actor."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import psycopg

from awa_cli.app import prepare_job
from awa_cli.db import dependencies, workflows as workflow_table
from awa_cli.enqueue import InsertOpts
from awa_cli.errors import ValidationError
from awa_cli.jobs import PreparedJob
from awa_cli.outcomes import workflows as workflow_core
from awa_cli.outcomes.audit import current_actor
from awa_cli.workflows import JobRelations, PlannedStep, Workflow, WorkflowRun, validate

if TYPE_CHECKING:
    from awa_cli.app import App
    from awa_cli.client import AsyncClient

__all__ = ["insert_on_pool", "insert_workflow", "insert_workflow_async", "prepare_workflow"]


def prepare_workflow(wf: Workflow, app: App | None) -> tuple[list[PlannedStep], list[PreparedJob]]:
    """Validate the graph and every step's insert options (the error names the step)."""
    if not isinstance(wf, Workflow):
        raise ValidationError("workflow", f"expected an awa.Workflow, not {type(wf).__name__}")
    planned = validate(wf)
    jobs = []
    for step in planned:
        try:
            jobs.append(prepare_job(app, step.step.args, InsertOpts.from_kwargs(step.step.options)))
        except ValidationError as exc:
            raise ValidationError(f"step {step.step.name!r}", str(exc)) from None
    return planned, jobs


def insert_workflow(
    conn: psycopg.Connection[Any], wf: Workflow, *, app: App | None = None
) -> WorkflowRun:
    """Insert ``wf`` inside the caller's transaction: visible on commit, gone on rollback."""
    planned, jobs = prepare_workflow(wf, app)
    run = dependencies.run_sync(conn, dependencies.insert_workflow(wf, planned, jobs))
    if run is None:
        raise ValidationError(f"workflow {wf.name!r}", "a workflow of this periodic fire exists")
    return run


async def insert_workflow_async(
    conn: psycopg.AsyncConnection[Any], wf: Workflow, *, app: App | None = None
) -> WorkflowRun:
    """``insert_workflow`` for an async psycopg connection."""
    planned, jobs = prepare_workflow(wf, app)
    return await _insert_planned(conn, wf, planned, jobs)


async def insert_on_pool(client: AsyncClient, wf: Workflow) -> WorkflowRun:
    """:meth:`AsyncClient.insert_workflow`: validated before the pool is opened, then
    inserted on a connection of the client's pool."""
    planned, jobs = prepare_workflow(wf, client.app)
    pool = await client.ensure_open()
    async with pool.connection() as conn:
        return await _insert_planned(conn, wf, planned, jobs)


async def _insert_planned(
    conn: psycopg.AsyncConnection[Any],
    wf: Workflow,
    planned: list[PlannedStep],
    jobs: list[PreparedJob],
) -> WorkflowRun:
    run = await dependencies.run_async(conn, dependencies.insert_workflow(wf, planned, jobs))
    if run is None:
        raise ValidationError(f"workflow {wf.name!r}", "a workflow of this periodic fire exists")
    return run


async def get_workflow(self: AsyncClient, workflow_id: int) -> WorkflowRun:
    """The workflow with its steps (step name -> job) and counts per state
    (``WorkflowNotFound``, a ``JobNotFound``, if none)."""
    pool = await self.ensure_open()
    async with pool.connection() as conn:
        return await workflow_table.get(conn, int(workflow_id))


async def list_workflows(
    self: AsyncClient, state: str | None = None, name: str | None = None, limit: int = 100
) -> list[WorkflowRun]:
    """Workflows newest first (``state``: running, completed, failed or cancelled), with
    their counts per state; ``steps`` is not loaded (see :meth:`get_workflow`)."""
    pool = await self.ensure_open()
    async with pool.connection() as conn:
        return await workflow_table.list_all(conn, state, name, limit)


async def workflow_edges(self: AsyncClient, workflow_id: int) -> list[tuple[int, int]]:
    """The (parent job id, child job id) edges of the workflow's steps (for its graph)."""
    pool = await self.ensure_open()
    async with pool.connection() as conn:
        return await workflow_table.edges(conn, int(workflow_id))


async def cancel_workflow(self: AsyncClient, workflow_id: int) -> WorkflowRun:
    """Cancel every unfinished step and the workflow (Cancelled fires for each step; a
    running handler sees ``job.is_cancelled()``)."""
    await self.ensure_open()
    await workflow_core.cancel(self.core, int(workflow_id), current_actor(self.core))
    return await self.get_workflow(workflow_id)


async def retry_workflow(self: AsyncClient, workflow_id: int) -> WorkflowRun:
    """Re-run the failed and cancelled steps and what depends on them; the workflow is
    running again."""
    await self.ensure_open()
    await workflow_core.retry(self.core, int(workflow_id), current_actor(self.core))
    return await self.get_workflow(workflow_id)


async def job_parents(self: AsyncClient, job_id: int) -> list[dict[str, Any]]:
    """A job's parents: ``id``, ``state`` (a dead letter as failed), ``step``, ``output``."""
    pool = await self.ensure_open()
    async with pool.connection() as conn:
        return [dict(r) for r in await dependencies.parents_of(conn, int(job_id))]


async def job_children(self: AsyncClient, job_id: int) -> list[dict[str, Any]]:
    """A job's children: ``id``, ``state``, ``step``."""
    pool = await self.ensure_open()
    async with pool.connection() as conn:
        return [dict(r) for r in await dependencies.children_of(conn, int(job_id))]


async def job_relations(self: AsyncClient, job_id: int, limit: int = 50) -> JobRelations:
    """The job's place in the graph, for ``awa job show`` and its dashboard page: its
    first ``limit`` parents and children (id, kind, state, step; ``parent_count`` and
    ``child_count`` say how many there are), the workflow and step it is part of, and
    the batch it belongs to (as member or callback). ``JobNotFound`` if there is none."""
    if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= 10_000:
        raise ValidationError("limit", "must be an integer from 1 to 10000")
    pool = await self.ensure_open()
    async with pool.connection() as conn:
        found = await dependencies.relations(conn, int(job_id), limit)
    if found is None:
        from awa_cli.errors import JobNotFound

        raise JobNotFound(f"job {job_id} not found")
    return found
