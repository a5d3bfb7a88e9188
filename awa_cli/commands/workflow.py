"""`awa workflow`: list, show, cancel and retry workflows (architecture §16).

Cancel and retry are recorded in ``awa.audit_log`` with actor ``cli:<os user>``, in the
transaction of the change. An unknown id exits 4.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from datetime import datetime
from typing import Any

import click

from awa_cli.commands.context import CliContext, json_option, pass_context, run_with_client
from awa_cli.commands.shared import limit_option, print_listing, target_command
from awa_cli.workflows import WORKFLOW_STATES, WorkflowRun

COLUMNS = ["id", "name", "state", "steps", "counts", "created_at", "finished_at"]
STEP_COLUMNS = ["step", "job", "kind", "queue", "state", "after"]


def _when(value: datetime | None) -> str:
    return "-" if value is None else value.isoformat(timespec="seconds")


def _counts(run: WorkflowRun) -> str:
    return " ".join(f"{state}={n}" for state, n in sorted(run.counts.items())) or "-"


def _summary(run: WorkflowRun) -> tuple[Any, ...]:
    return (
        run.id,
        run.name,
        run.state,
        sum(run.counts.values()),
        _counts(run),
        _when(run.created_at),
        _when(run.finished_at),
    )


@click.group(name="workflow")
def command() -> None:
    """List, inspect, cancel and retry workflows (graphs of jobs inserted together with
    insert_workflow). A workflow is running until every step is finished; then completed,
    failed (a step failed) or cancelled."""


@command.command(name="list")
@click.option(
    "--state", type=click.Choice(WORKFLOW_STATES), default=None, help="Only workflows in STATE."
)
@click.option("--name", default=None, help="Only workflows named NAME.")
@limit_option(most=10_000, default=100)
@json_option
@pass_context
def list_workflows(
    ctx: CliContext, state: str | None, name: str | None, limit: int, json_flag: bool
) -> None:
    """Workflows newest first: id, name, state, number of steps, steps per state."""
    runs = run_with_client(ctx, lambda c: c.list_workflows(state=state, name=name, limit=limit))
    print_listing(ctx, json_flag, COLUMNS, runs, _summary)


async def _with_edges(client: Any, workflow_id: int) -> tuple[WorkflowRun, list[tuple[int, int]]]:
    return await client.get_workflow(workflow_id), await client.workflow_edges(workflow_id)


def _show(ctx: CliContext, run: WorkflowRun, edges: list[tuple[int, int]], json_flag: bool) -> None:
    names = {row.id: name for name, row in run.steps.items()}
    after: dict[int, list[str]] = {}
    for parent, child in edges:
        after.setdefault(child, []).append(names.get(parent, str(parent)))
    if ctx.wants_json(json_flag):
        data = run.to_json()
        for name, row in run.steps.items():
            data["steps"][name]["after"] = after.get(row.id, [])
        ctx.terminal.json(data)
        return
    ctx.terminal.table(COLUMNS, [_summary(run)])
    rows = [
        (name, row.id, row.kind, row.queue, str(row.state), ", ".join(after.get(row.id, [])) or "-")
        for name, row in run.steps.items()
    ]
    ctx.terminal.table(STEP_COLUMNS, rows)


def workflow_command(verb: str) -> Callable[[Any], Any]:
    """`awa workflow VERB ID [--json]`."""
    return target_command(command, verb, click.argument("workflow_id", metavar="ID", type=int))


def _change(
    ctx: CliContext,
    workflow_id: int,
    json_flag: bool,
    change: Callable[[Any], Awaitable[Any]],
    verb: str,
) -> None:
    """Run ``change(client)`` on workflow ID, then show the workflow as it is now."""

    async def act(client: Any) -> tuple[WorkflowRun, list[tuple[int, int]]]:
        await change(client)
        return await _with_edges(client, workflow_id)

    run, edges = run_with_client(ctx, act)
    if not ctx.wants_json(json_flag):
        ctx.terminal.status(f"workflow {workflow_id} {verb}")
    _show(ctx, run, edges, json_flag)


@workflow_command("show")
def show(ctx: CliContext, workflow_id: int, json_flag: bool) -> None:
    """One workflow and its steps: job id, kind, queue, state and the steps each waits for."""
    run, edges = run_with_client(ctx, lambda c: _with_edges(c, workflow_id))
    _show(ctx, run, edges, json_flag)


@workflow_command("cancel")
def cancel(ctx: CliContext, workflow_id: int, json_flag: bool) -> None:
    """Cancel every unfinished step of workflow ID (running handlers are told) and the
    workflow itself."""
    _change(ctx, workflow_id, json_flag, lambda c: c.cancel_workflow(workflow_id), "cancelled")


@workflow_command("retry")
def retry(ctx: CliContext, workflow_id: int, json_flag: bool) -> None:
    """Re-run the failed and cancelled steps of workflow ID and the steps that depend on
    them; the workflow is running again."""
    _change(ctx, workflow_id, json_flag, lambda c: c.retry_workflow(workflow_id), "retried")
