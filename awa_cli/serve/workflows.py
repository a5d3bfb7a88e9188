"""Workflows in ``awa serve`` (architecture §16): the admin API's ``/api/workflows`` and
``/api/workflows/{id}``, and the cancel and retry actions (``POST /api/workflows/{id}/cancel``,
``/retry``; audited by the core in the action's transaction, as ``serve:<token name>``).
Auth, CSRF and read-only mode are the guard's, as for every other route."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from awa_cli.errors import ValidationError
from awa_cli.serve.common import client_of, error_line, json_error, status_for
from awa_cli.serve.controls import Action, Target, api_handler
from awa_cli.workflows import WORKFLOW_STATES

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


def _target(workflow_id: str) -> str:
    return f"workflow:{workflow_id}"


ACTIONS = [
    Action(
        "/workflows/{workflow_id:int}/cancel",
        "workflow_id",
        "workflow.cancel",
        _target,
        _cancel,
        lambda i, _: f"/api/workflows/{i}",
    ),
    Action(
        "/workflows/{workflow_id:int}/retry",
        "workflow_id",
        "workflow.retry",
        _target,
        _retry,
        lambda i, _: f"/api/workflows/{i}",
    ),
]


def routes() -> list[BaseRoute]:
    from starlette.routing import Route

    found: list[BaseRoute] = [
        Route("/api/workflows", api_workflows, methods=["GET"]),
        Route("/api/workflows/{workflow_id:int}", api_workflow, methods=["GET"]),
    ]
    for action in ACTIONS:
        found.append(Route("/api" + action.path, api_handler(action), methods=["POST"]))
    return found
