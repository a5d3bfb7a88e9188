"""The batch pages and their API twins (``/batches``, ``/batches/{id}``, ``/api/batches``,
``/api/batches/{id}``; architecture §16): read-only views through the client's batch methods,
the same reads ``awa batch list|show`` makes."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from awa_cli.errors import ValidationError
from awa_cli.serve.common import client_of, limit_param
from awa_cli.serve.routing import RouteTable, json_read, page

if TYPE_CHECKING:
    from starlette.requests import Request

STATES = ("open", "running", "completed")
PAGE = 100
MEMBERS_SHOWN = 50
ROUTES = RouteTable()


def _query(request: Request) -> tuple[str | None, int]:
    q = request.query_params
    state = (q.get("state") or "").strip() or None
    if state is not None and state not in STATES:
        raise ValidationError("state", f"expected one of {', '.join(STATES)}")
    return state, limit_param(request, PAGE)


@ROUTES.get("/batches")
@page("batches.html")
async def batches_page(request: Request) -> dict[str, Any]:
    state, limit = _query(request)
    batches = await client_of(request).list_batches(state, limit)
    return {"batches": batches, "state": state, "states": STATES}


@ROUTES.get("/batches/{batch_id:int}")
@page("batch.html")
async def batch_page(request: Request) -> dict[str, Any]:
    batch_id = int(request.path_params["batch_id"])
    client = client_of(request)
    batch = await client.get_batch(batch_id)
    return {"batch": batch, "members": await client.batch_members(batch_id, MEMBERS_SHOWN)}


@ROUTES.get("/api/batches")
@json_read
async def api_batches(request: Request) -> dict[str, Any]:
    """``{"batches": [batch, ...]}`` newest first; ``?state=open|running|completed&limit=``;
    each batch as ``GET /api/batches/{id}`` gives it."""
    state, limit = _query(request)
    batches = await client_of(request).list_batches(state, limit)
    return {"batches": [b.to_dict() for b in batches]}


@ROUTES.get("/api/batches/{batch_id:int}")
@json_read
async def api_batch(request: Request) -> dict[str, Any]:
    """``{"id", "state", "succeeded", "counts": {pending, completed, failed, cancelled,
    total}, "percent", "by_state", "created_at", "sealed_at", "first_failed_at",
    "succeeded_at", "completed_at", "died_at", "callbacks": {name: {"kind", "job_id"}},
    "metadata", "shards"}``; 404 for an unknown id."""
    batch = await client_of(request).get_batch(int(request.path_params["batch_id"]))
    return batch.to_dict()
