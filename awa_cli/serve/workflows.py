"""Workflows in ``awa serve`` (architecture §16): the pages ``/workflows`` and
``/workflows/{id}`` (the graph as server-rendered SVG, see ``workflow_graph.py``), the admin
API's ``/api/workflows`` and ``/api/workflows/{id}``, and the cancel and retry actions (form
and ``POST /api/workflows/{id}/cancel``, ``/retry``; audited by the core in the action's
transaction, as ``serve:<token name>``). Auth, CSRF and read-only mode are the guard's, as for
every other route."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any
from urllib.parse import urlencode

from awa_cli.errors import ValidationError
from awa_cli.serve.common import client_of
from awa_cli.serve.controls import Action, Target, add_actions
from awa_cli.serve.routing import RouteTable, json_read, page
from awa_cli.serve.workflow_graph import MAX_NODES, svg
from awa_cli.workflows import WORKFLOW_STATES, WorkflowRun

if TYPE_CHECKING:
    from starlette.requests import Request

    from awa_cli.client import AsyncClient


ROUTES = RouteTable()


async def workflow_json(client: AsyncClient, workflow_id: int) -> dict[str, Any]:
    """The workflow with its steps, each with the steps it waits for (``after``)."""
    run = await client.get_workflow(workflow_id)
    edges = await client.workflow_edges(workflow_id)
    names = {row.id: name for name, row in run.steps.items()}
    data = run.to_json()
    for name, row in run.steps.items():
        data["steps"][name]["after"] = [names.get(p, p) for p, c in edges if c == row.id]
    return data


async def _cancel(t: Target) -> Any:
    await t.client.cancel_workflow(int(t.value))
    return await workflow_json(t.client, int(t.value))


async def _retry(t: Target) -> Any:
    await t.client.retry_workflow(int(t.value))
    return await workflow_json(t.client, int(t.value))


def _page(workflow_id: str, done: str) -> str:
    return f"/workflows/{workflow_id}?{urlencode({'done': done})}"


def _counts(run: WorkflowRun) -> str:
    return " ".join(f"{state} {n}" for state, n in sorted(run.counts.items())) or "no steps"


def _state(request: Request) -> str | None:
    state = request.query_params.get("state") or None
    if state is not None and state not in WORKFLOW_STATES:
        raise ValidationError("state", f"must be one of {', '.join(WORKFLOW_STATES)}")
    return state


@ROUTES.get("/workflows")
@page("workflows.html")
async def workflows_page(request: Request) -> dict[str, Any]:
    """The workflows, newest first (``?state=`` as the API's)."""
    runs = await client_of(request).list_workflows(_state(request), None, 200)
    return {"workflows": runs, "counts": _counts}


@ROUTES.get("/workflows/{workflow_id:int}")
@page("workflow.html")
async def workflow_page(request: Request) -> dict[str, Any]:
    """One workflow: its state and counts, the graph, and every step with its parents."""
    import markupsafe

    workflow_id = int(request.path_params["workflow_id"])
    client = client_of(request)
    run = await client.get_workflow(workflow_id)
    edges = await client.workflow_edges(workflow_id)
    names = {row.id: name for name, row in run.steps.items()}
    after: dict[int, list[str]] = {}
    for parent, child in edges:
        after.setdefault(child, []).append(str(names.get(parent, parent)))
    return {
        "run": run,
        "counts": _counts,
        "after": after,
        "graph": markupsafe.Markup(svg(run.steps, edges)),  # built from escaped parts
        "truncated": len(run.steps) > MAX_NODES,
        "max_nodes": MAX_NODES,
        "done": request.query_params.get("done") or None,
    }


@ROUTES.get("/api/workflows")
@json_read
async def api_workflows(request: Request) -> list[dict[str, Any]]:
    """``[{"id", "name", "state", "counts", "created_at", "finished_at", ...}]`` newest first;
    ``?state=`` (running, completed, failed, cancelled), ``?name=``, ``?limit=`` (≤ 1000)."""
    params = request.query_params
    state = _state(request)
    raw = params.get("limit") or "100"
    if not raw.isdigit() or not 1 <= int(raw) <= 1000:
        raise ValidationError("limit", "expected an integer from 1 to 1000")
    runs = await client_of(request).list_workflows(state, params.get("name"), int(raw))
    return [run.to_json() for run in runs]


@ROUTES.get("/api/workflows/{workflow_id:int}")
@json_read
async def api_workflow(request: Request) -> dict[str, Any]:
    """One workflow with its steps (404 if unknown)."""
    return await workflow_json(client_of(request), int(request.path_params["workflow_id"]))


def _target(workflow_id: str) -> str:
    return f"workflow:{workflow_id}"


ACTIONS = [
    Action(
        "/workflows/{workflow_id:int}/cancel",
        "workflow_id",
        "workflow.cancel",
        _target,
        _cancel,
        lambda i, _: _page(i, "cancelled"),
    ),
    Action(
        "/workflows/{workflow_id:int}/retry",
        "workflow_id",
        "workflow.retry",
        _target,
        _retry,
        lambda i, _: _page(i, "retried"),
    ),
]


add_actions(ROUTES, ACTIONS)
