"""Workflows in ``awa serve`` (architecture §16): the pages ``/workflows`` and
``/workflows/{id}`` (the graph as server-rendered SVG, see ``workflow_graph.py``), the admin
API's ``/api/workflows`` and ``/api/workflows/{id}``, and the cancel and retry actions (form
and ``POST /api/workflows/{id}/cancel``, ``/retry``; audited by the core in the action's
transaction, as ``serve:<token name>``). Auth, CSRF and read-only mode are the guard's, as for
every other route."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from awa_cli.errors import ValidationError
from awa_cli.serve.common import client_of, error_line, json_error, status_for
from urllib.parse import urlencode

from awa_cli.serve.common import error_page, render
from awa_cli.serve.controls import Action, Target, api_handler, form_handler
from awa_cli.serve.workflow_graph import MAX_NODES, svg
from awa_cli.workflows import WORKFLOW_STATES, WorkflowRun

if TYPE_CHECKING:
    from starlette.requests import Request
    from starlette.responses import Response
    from starlette.routing import BaseRoute

    from awa_cli.client import AsyncClient


def _failed(exc: Exception) -> Response:
    return json_error(status_for(exc), error_line(exc))


async def workflow_json(client: AsyncClient, workflow_id: int) -> dict[str, Any]:
    """The workflow with its steps, each with the steps it waits for (``after``)."""
    run = await client.get_workflow(workflow_id)
    edges = await client.workflow_edges(workflow_id)
    names = {row.id: name for name, row in run.steps.items()}
    data = run.to_json()
    for name, row in run.steps.items():
        data["steps"][name]["after"] = [names.get(p, p) for p, c in edges if c == row.id]
    return data


async def api_workflows(request: Request) -> Response:
    """``[{"id", "name", "state", "counts", "created_at", "finished_at", ...}]`` newest first;
    ``?state=`` (running, completed, failed, cancelled), ``?name=``, ``?limit=`` (≤ 1000)."""
    from starlette.responses import JSONResponse

    params = request.query_params
    try:
        state = params.get("state") or None
        if state is not None and state not in WORKFLOW_STATES:
            raise ValidationError("state", f"must be one of {', '.join(WORKFLOW_STATES)}")
        raw = params.get("limit") or "100"
        if not raw.isdigit() or not 1 <= int(raw) <= 1000:
            raise ValidationError("limit", "expected an integer from 1 to 1000")
        runs = await client_of(request).list_workflows(state, params.get("name"), int(raw))
    except Exception as exc:
        return _failed(exc)
    return JSONResponse([run.to_json() for run in runs])


async def api_workflow(request: Request) -> Response:
    """One workflow with its steps (404 if unknown)."""
    from starlette.responses import JSONResponse

    try:
        data = await workflow_json(client_of(request), int(request.path_params["workflow_id"]))
    except Exception as exc:
        return _failed(exc)
    return JSONResponse(data)


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


async def workflows_page(request: Request) -> Response:
    """The workflows, newest first (``?state=`` as the API's)."""
    try:
        state = request.query_params.get("state") or None
        if state is not None and state not in WORKFLOW_STATES:
            raise ValidationError("state", f"must be one of {', '.join(WORKFLOW_STATES)}")
        runs = await client_of(request).list_workflows(state, None, 200)
    except Exception as exc:
        return error_page(request, exc)
    return render(request, "workflows.html", workflows=runs, counts=_counts)


async def workflow_page(request: Request) -> Response:
    """One workflow: its state and counts, the graph, and every step with its parents."""
    import markupsafe

    workflow_id = int(request.path_params["workflow_id"])
    client = client_of(request)
    try:
        run = await client.get_workflow(workflow_id)
        edges = await client.workflow_edges(workflow_id)
    except Exception as exc:
        return error_page(request, exc)
    names = {row.id: name for name, row in run.steps.items()}
    after: dict[int, list[str]] = {}
    for parent, child in edges:
        after.setdefault(child, []).append(str(names.get(parent, parent)))
    return render(
        request,
        "workflow.html",
        run=run,
        counts=_counts,
        after=after,
        graph=markupsafe.Markup(svg(run.steps, edges)),  # built from escaped parts
        truncated=len(run.steps) > MAX_NODES,
        max_nodes=MAX_NODES,
        done=request.query_params.get("done") or None,
    )


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


def routes() -> list[BaseRoute]:
    from starlette.routing import Route

    found: list[BaseRoute] = [
        Route("/workflows", workflows_page, methods=["GET"]),
        Route("/workflows/{workflow_id:int}", workflow_page, methods=["GET"]),
        Route("/api/workflows", api_workflows, methods=["GET"]),
        Route("/api/workflows/{workflow_id:int}", api_workflow, methods=["GET"]),
    ]
    for action in ACTIONS:
        found.append(Route(action.path, form_handler(action), methods=["POST"]))
        found.append(Route("/api" + action.path, api_handler(action), methods=["POST"]))
    return found
