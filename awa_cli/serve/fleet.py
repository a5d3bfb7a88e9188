"""The workers, kinds and audit pages and their API twins (``/workers``, ``/kinds``,
``/audit`` and ``/api/...``): read-only views through the client, like every page."""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING, Any

from awa_cli.errors import ValidationError
from awa_cli.serve.common import client_of, limit_param
from awa_cli.serve.routing import RouteTable, json_read, page

if TYPE_CHECKING:
    from starlette.requests import Request

AUDIT_FILTERS = ("actor", "action", "target")
AUDIT_PAGE = 100
ROUTES = RouteTable()


@ROUTES.get("/workers")
@page("workers.html")
async def workers_page(request: Request) -> dict[str, Any]:
    return {"workers": await client_of(request).list_workers()}


@ROUTES.get("/kinds")
@page("kinds.html")
async def kinds_page(request: Request) -> dict[str, Any]:
    return {"kinds": await client_of(request).list_kinds()}


def _audit_query(request: Request) -> dict[str, Any]:
    q = request.query_params
    filters: dict[str, Any] = {name: (q.get(name) or "").strip() or None for name in AUDIT_FILTERS}
    since = (q.get("since") or "").strip()
    if since:
        try:
            filters["since"] = datetime.fromisoformat(since)
        except ValueError:
            raise ValidationError(
                "since", f"expected an ISO 8601 time, got {since[:40]!r}"
            ) from None
    limit = limit_param(request, None)
    if limit is not None:
        filters["limit"] = limit
    return filters


@ROUTES.get("/audit")
@page("audit.html")
async def audit_page(request: Request) -> dict[str, Any]:
    filters = _audit_query(request)
    entries = await client_of(request).list_audit(**{"limit": AUDIT_PAGE} | filters)
    return {"entries": entries, "filters": {name: filters.get(name) for name in AUDIT_FILTERS}}


@ROUTES.get("/api/workers")
@json_read
async def api_workers(request: Request) -> dict[str, Any]:
    """``{"workers": [{"id", "host", "pid", "queues", "kinds", "started_at", "heartbeat_at",
    "heartbeat_age_seconds", "running", "version"}]}``: those heartbeated in the last 30 s."""
    workers = await client_of(request).list_workers()
    return {"workers": [w.to_json() for w in workers]}


@ROUTES.get("/api/kinds")
@json_read
async def api_kinds(request: Request) -> dict[str, Any]:
    """``{"kinds": [{"kind", "queue", "doc", "workers", "available", "unhandled"}]}``."""
    kinds = await client_of(request).list_kinds()
    return {"kinds": [k.to_json() for k in kinds]}


@ROUTES.get("/api/audit")
@json_read
async def api_audit(request: Request) -> dict[str, Any]:
    """``{"entries": [{"id", "at", "actor", "action", "target", "result", "detail"}]}``,
    newest first; ``?actor=&action=&target=&since=&limit=``."""
    entries = await client_of(request).list_audit(**_audit_query(request))
    return {"entries": [e.to_json() for e in entries]}
