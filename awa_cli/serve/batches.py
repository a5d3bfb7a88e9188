"""The batch pages and their API twins (``/batches``, ``/batches/{id}``, ``/api/batches``,
``/api/batches/{id}``; architecture §16): read-only views through the client's batch methods,
the same reads ``awa batch list|show`` makes."""

from __future__ import annotations

from typing import TYPE_CHECKING

from awa_cli.errors import ValidationError
from awa_cli.serve.common import client_of, error_line, error_page, json_error, render, status_for

if TYPE_CHECKING:
    from starlette.requests import Request
    from starlette.responses import Response
    from starlette.routing import BaseRoute

STATES = ("open", "running", "completed")
PAGE = 100
MEMBERS_SHOWN = 50


def _query(request: Request) -> tuple[str | None, int]:
    q = request.query_params
    state = (q.get("state") or "").strip() or None
    if state is not None and state not in STATES:
        raise ValidationError("state", f"expected one of {', '.join(STATES)}")
    raw = (q.get("limit") or "").strip()
    limit = PAGE
    if raw:
        if not raw.isdigit() or not 1 <= int(raw) <= 1000:
            raise ValidationError("limit", "must be an integer from 1 to 1000")
        limit = int(raw)
    return state, limit


async def batches_page(request: Request) -> Response:
    try:
        state, limit = _query(request)
        batches = await client_of(request).list_batches(state, limit)
    except Exception as exc:
        return error_page(request, exc)
    return render(request, "batches.html", batches=batches, state=state, states=STATES)


async def batch_page(request: Request) -> Response:
    batch_id = int(request.path_params["batch_id"])
    try:
        client = client_of(request)
        batch = await client.get_batch(batch_id)
        members = await client.batch_members(batch_id, MEMBERS_SHOWN)
    except Exception as exc:
        return error_page(request, exc)
    return render(request, "batch.html", batch=batch, members=members)


def _failed(exc: Exception) -> Response:
    return json_error(status_for(exc), error_line(exc))


async def api_batches(request: Request) -> Response:
    """``{"batches": [batch, ...]}`` newest first; ``?state=open|running|completed&limit=``;
    each batch as ``GET /api/batches/{id}`` gives it."""
    from starlette.responses import JSONResponse

    try:
        state, limit = _query(request)
        batches = await client_of(request).list_batches(state, limit)
    except Exception as exc:
        return _failed(exc)
    return JSONResponse({"batches": [b.to_dict() for b in batches]})


async def api_batch(request: Request) -> Response:
    """``{"id", "state", "succeeded", "counts": {pending, completed, failed, cancelled,
    total}, "percent", "by_state", "created_at", "sealed_at", "first_failed_at",
    "succeeded_at", "completed_at", "died_at", "callbacks": {name: {"kind", "job_id"}},
    "metadata", "shards"}``; 404 for an unknown id."""
    from starlette.responses import JSONResponse

    try:
        batch = await client_of(request).get_batch(int(request.path_params["batch_id"]))
    except Exception as exc:
        return _failed(exc)
    return JSONResponse(batch.to_dict())


def routes() -> list[BaseRoute]:
    from starlette.routing import Route

    return [
        Route("/batches", batches_page, methods=["GET"]),
        Route("/batches/{batch_id:int}", batch_page, methods=["GET"]),
        Route("/api/batches", api_batches, methods=["GET"]),
        Route("/api/batches/{batch_id:int}", api_batch, methods=["GET"]),
    ]
