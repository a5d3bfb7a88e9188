"""Retry all or purge all dead letters from the DLQ page (``POST /dlq/bulk``, and ``POST
/api/dlq/bulk/retry|purge``): every dead letter matching the page's filter (queue, kind), or
every one when no filter is set, as Sidekiq's "Retry All" / "Delete All" on its Dead set.

Both go through the client's bulk dead-letter operations (``bulk_retry_from_dlq``,
``purge_dlq``: the outcome core in batches, one audit row with the count), as ``awa dlq
retry|purge --queue Q`` do. The form asks first, on a confirmation page that states the
operation and how many dead letters it changes; the API twin does not (``dry_run`` gives the
count). Auth, the operator role and CSRF are the guard's.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any
from urllib.parse import urlencode

from awa_cli.errors import ValidationError
from awa_cli.serve.bulk import refused
from awa_cli.serve.common import act, client_of, error_page, form_of, json_failure, render
from awa_cli.serve.routing import RouteTable

if TYPE_CHECKING:
    from starlette.requests import Request
    from starlette.responses import Response

    from awa_cli.client import AsyncClient

VERBS: dict[str, tuple[str, str]] = {
    "retry": ("dlq.retry", "retried"),
    "purge": ("dlq.purge", "purged"),
}
ROUTES = RouteTable()


def _filters(source: dict[str, Any]) -> dict[str, str | None]:
    found: dict[str, str | None] = {}
    for name in ("queue", "kind"):
        value = source.get(name)
        if value is not None and not isinstance(value, str):
            raise ValidationError(name, "expected a string")
        found[name] = (value or "").strip() or None
    return found


async def _apply(client: AsyncClient, verb: str, filters: dict[str, str | None], dry: bool) -> int:
    every = not any(filters.values())  # no filter: every dead letter (the page says so)
    queue, kind = filters["queue"], filters["kind"]
    if verb == "retry":
        return await client.bulk_retry_from_dlq(queue, kind, all=every, dry_run=dry)
    return await client.purge_dlq(queue=queue, kind=kind, all=every, dry_run=dry)


def _described(filters: dict[str, str | None]) -> str:
    return " ".join(f"{k}={v}" for k, v in filters.items() if v) or "all"


def _confirmation(verb: str, filters: dict[str, str | None], count: int) -> dict[str, Any]:
    letters = "dead letter" if count == 1 else "dead letters"
    which = f"matching {_described(filters)}" if any(filters.values()) else "in the queue"
    lines = [f"{verb.capitalize()} all {count} {letters} {which}."]
    lines.append(
        "Purged dead letters are gone for good, with their args and errors."
        if verb == "purge"
        else "Each goes back into its queue under its id (available, attempt 0, errors kept)."
    )
    query = {k: v for k, v in filters.items() if v}
    return {
        "title": f"{verb.capitalize()} {count} {letters}?",
        "lines": lines,
        "button": f"{verb.capitalize()} {count} {letters}" if count else "",
        "danger": verb == "purge",
        "nothing": "" if count else f"Nothing to {verb}: no dead letter matches.",
        "back": "/dlq" + (f"?{urlencode(query)}" if query else ""),
        "fields": [("do", verb), *query.items()],
    }


async def _run(request: Request, verb: str, filters: dict[str, str | None]) -> int:
    client = client_of(request)
    return await act(
        request, VERBS[verb][0], _described(filters), lambda: _apply(client, verb, filters, False)
    )


@ROUTES.post("/dlq/bulk")
async def bulk_form(request: Request) -> Response:
    """The DLQ page's Retry all / Purge all: a confirmation first, then back to the page."""
    from starlette.responses import RedirectResponse

    form = await form_of(request)
    try:
        verb = form.get("do", "")
        if verb not in VERBS:
            raise ValidationError("do", "expected retry or purge")
        filters = _filters(form)
        if form.get("confirm") != "yes":
            count = await _apply(client_of(request), verb, filters, True)
            shown = _confirmation(verb, filters, count)
            return render(request, "confirm.html", action="/dlq/bulk", **shown)
        done = await _run(request, verb, filters)
    except Exception as exc:
        return error_page(request, exc)
    query = {k: v for k, v in filters.items() if v}
    query["done"] = f"{done} {'dead letter' if done == 1 else 'dead letters'} {VERBS[verb][1]}"
    return RedirectResponse(f"/dlq?{urlencode(query)}", status_code=303)


def _parsed(verb: str, body: bytes) -> tuple[dict[str, str | None], bool]:
    if verb not in VERBS:
        raise ValidationError("operation", "expected retry or purge")
    try:
        data = json.loads(body or b"{}")
    except ValueError as exc:
        raise ValidationError("body", f"not valid JSON: {exc}") from None
    if not isinstance(data, dict) or set(data) - {"queue", "kind", "dry_run"}:
        raise ValidationError("body", "expected an object of queue, kind and dry_run")
    dry_run = data.get("dry_run", False)
    if not isinstance(dry_run, bool):
        raise ValidationError("dry_run", "expected true or false")
    return _filters(data), dry_run


@ROUTES.post("/api/dlq/bulk/{verb}")
async def bulk_api(request: Request) -> Response:
    """``{"count": n, "dry_run": bool}``; the body names ``queue`` and ``kind`` (none: every
    dead letter) and ``dry_run``."""
    from starlette.responses import JSONResponse

    verb = str(request.path_params["verb"])
    try:
        filters, dry_run = _parsed(verb, await request.body())
    except ValidationError as exc:
        await refused(request, VERBS[verb][0] if verb in VERBS else None, exc)
        return json_failure(exc)
    try:
        if dry_run:
            count = await _apply(client_of(request), verb, filters, True)
        else:
            count = await _run(request, verb, filters)
    except Exception as exc:
        return json_failure(exc)
    return JSONResponse({"count": count, "dry_run": dry_run})
