"""The workers, kinds and audit pages and their API twins (``/workers``, ``/kinds``,
``/audit`` and ``/api/...``): read-only views through the client, like every page."""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING, Any

from awa_cli.errors import ValidationError
from awa_cli.serve.common import client_of, error_line, error_page, json_error, render, status_for

if TYPE_CHECKING:
    from starlette.requests import Request
    from starlette.responses import Response
    from starlette.routing import BaseRoute

AUDIT_FILTERS = ("actor", "action", "target")
AUDIT_PAGE = 100


async def workers_page(request: Request) -> Response:
    try:
        workers = await client_of(request).list_workers()
    except Exception as exc:
        return error_page(request, exc)
    return render(request, "workers.html", workers=workers)


async def kinds_page(request: Request) -> Response:
    try:
        kinds = await client_of(request).list_kinds()
    except Exception as exc:
        return error_page(request, exc)
    return render(request, "kinds.html", kinds=kinds)


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
    raw = (q.get("limit") or "").strip()
    if raw:
        if not raw.isdigit() or not 1 <= int(raw) <= 1000:
            raise ValidationError("limit", "must be an integer from 1 to 1000")
        filters["limit"] = int(raw)
    return filters


async def audit_page(request: Request) -> Response:
    try:
        filters = _audit_query(request)
        entries = await client_of(request).list_audit(**{"limit": AUDIT_PAGE} | filters)
    except Exception as exc:
        return error_page(request, exc)
    shown = {name: filters.get(name) for name in AUDIT_FILTERS}
    return render(request, "audit.html", entries=entries, filters=shown)


def _failed(exc: Exception) -> Response:
    return json_error(status_for(exc), error_line(exc))


async def api_workers(request: Request) -> Response:
    """``{"workers": [{"id", "host", "pid", "queues", "kinds", "started_at", "heartbeat_at",
    "heartbeat_age_seconds", "running", "version"}]}``: those heartbeated in the last 30 s."""
    from starlette.responses import JSONResponse

    try:
        workers = await client_of(request).list_workers()
    except Exception as exc:
        return _failed(exc)
    return JSONResponse({"workers": [w.to_json() for w in workers]})


async def api_kinds(request: Request) -> Response:
    """``{"kinds": [{"kind", "queue", "doc", "workers", "available", "unhandled"}]}``."""
    from starlette.responses import JSONResponse

    try:
        kinds = await client_of(request).list_kinds()
    except Exception as exc:
        return _failed(exc)
    return JSONResponse({"kinds": [k.to_json() for k in kinds]})


async def api_audit(request: Request) -> Response:
    """``{"entries": [{"id", "at", "actor", "action", "target", "result", "detail"}]}``,
    newest first; ``?actor=&action=&target=&since=&limit=``."""
    from starlette.responses import JSONResponse

    try:
        entries = await client_of(request).list_audit(**_audit_query(request))
    except Exception as exc:
        return _failed(exc)
    return JSONResponse({"entries": [e.to_json() for e in entries]})


def routes() -> list[BaseRoute]:
    from starlette.routing import Route

    return [
        Route("/workers", workers_page, methods=["GET"]),
        Route("/kinds", kinds_page, methods=["GET"]),
        Route("/audit", audit_page, methods=["GET"]),
        Route("/api/workers", api_workers, methods=["GET"]),
        Route("/api/kinds", api_kinds, methods=["GET"]),
        Route("/api/audit", api_audit, methods=["GET"]),
    ]
