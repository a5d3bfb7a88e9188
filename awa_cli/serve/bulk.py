"""Bulk actions from the jobs list: cancel, retry or delete the selected jobs, or every job
matching the list's filter (``POST /jobs/bulk``, and ``POST /api/jobs/bulk/cancel|retry|delete``).

Each goes through the client's bulk operations (``cancel_jobs``, ``retry_jobs``,
``purge_jobs``: the outcome core, in bounded batches, audited there with the count), so a
bulk cancel from the browser runs the app's ``on_cancelled`` specs exactly as ``awa job
cancel --queue ...`` does. Each operation acts only on the states it applies to (cancel:
available, scheduled, retryable, waiting_external; retry: failed, cancelled; delete:
completed, failed, cancelled); a selected job in another state is left as it is.

The form asks first: without ``confirm=yes`` it answers a confirmation page that states the
operation and how many jobs it would change (a dry run); the page's button posts the same
fields again with ``confirm=yes``. Auth, the operator role and CSRF are the guard's.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any
from urllib.parse import urlencode

from awa_cli.errors import ValidationError
from awa_cli.serve.common import act, client_of, error_line, error_page, form_lists
from awa_cli.serve.common import json_failure, render, status_for
from awa_cli.serve.routing import RouteTable

if TYPE_CHECKING:
    from starlette.requests import Request
    from starlette.responses import Response

    from awa_cli.client import AsyncClient

MAX_SELECTED = 1000  # ids one request may name
FILTERS = ("state", "kind", "queue", "tag")
ROUTES = RouteTable()


@dataclass(frozen=True)
class Operation:
    """One bulk operation: its word in the UI, the audit action the core records, the
    states it applies to, and the client method that runs it."""

    verb: str  # cancel, retry, delete
    audit: str
    past: str  # how the notice says it: "cancelled"
    applies_to: str
    run: Callable[..., Awaitable[int]]


def _operations(client: AsyncClient) -> dict[str, Operation]:
    return {
        "cancel": Operation(
            "cancel",
            "job.cancel",
            "cancelled",
            "available, scheduled, retryable or waiting_external",
            client.cancel_jobs,
        ),
        "retry": Operation(
            "retry", "job.retry", "retried", "failed or cancelled", client.retry_jobs
        ),
        "delete": Operation(
            "delete", "job.purge", "deleted", "completed, failed or cancelled", client.purge_jobs
        ),
    }


@dataclass(frozen=True)
class BulkAsk:
    """What a bulk request asks: the operation, and either the selected ids or the filter."""

    verb: str
    ids: tuple[int, ...] | None = None
    filters: dict[str, str | None] = field(default_factory=dict)
    all: bool = False  # the API's explicit "every job" (the form never sends it)

    @property
    def described(self) -> str:
        """The audit target and the confirmation's wording of which jobs."""
        if self.ids is not None:
            shown = ",".join(map(str, self.ids[:20])) + ("…" if len(self.ids) > 20 else "")
            return f"ids={shown}"
        parts = [f"{k}={v}" for k, v in self.filters.items() if v]
        return " ".join(parts) or "all"

    def kwargs(self) -> dict[str, Any]:
        if self.ids is not None:
            return {"ids": list(self.ids)}
        return {k: v for k, v in self.filters.items() if v} | {"all": self.all}


def _ids(values: list[str]) -> tuple[int, ...]:
    ids = []
    for raw in values:
        text = raw.strip()
        if not text.isdigit() or len(text) > 18:
            raise ValidationError("ids", f"expected job ids, got {text[:40]!r}")
        ids.append(int(text))
    if not ids:
        raise ValidationError("ids", "select at least one job")
    if len(ids) > MAX_SELECTED:
        raise ValidationError("ids", f"at most {MAX_SELECTED} jobs at once (use the filter)")
    return tuple(sorted(set(ids)))


def _from_form(form: dict[str, list[str]]) -> BulkAsk:
    verb, _, scope = (form.get("do") or [""])[-1].partition(":")
    if verb not in ("cancel", "retry", "delete"):
        raise ValidationError("do", "expected cancel, retry or delete")
    filters = {name: ((form.get(name) or [""])[-1].strip() or None) for name in FILTERS}
    if scope == "selected":
        return BulkAsk(verb, ids=_ids(form.get("ids") or []), filters=filters)
    if scope != "matching":
        raise ValidationError("do", "expected the selected jobs or those matching the filter")
    if not any(filters.values()):
        raise ValidationError("filter", "set a filter first (state, kind, queue or tag)")
    return BulkAsk(verb, filters=filters)


async def _count(client: AsyncClient, asked: BulkAsk) -> int:
    return await _operations(client)[asked.verb].run(**asked.kwargs(), dry_run=True)


async def _execute(request: Request, asked: BulkAsk) -> int:
    client = client_of(request)
    operation = _operations(client)[asked.verb]
    return await act(
        request, operation.audit, asked.described, lambda: operation.run(**asked.kwargs())
    )


def _list_url(asked: BulkAsk, done: str | None = None) -> str:
    query = {k: v for k, v in asked.filters.items() if v} | ({"done": done} if done else {})
    return "/jobs" + (f"?{urlencode(query)}" if query else "")


def _confirmation(asked: BulkAsk, operation: Operation, count: int) -> dict[str, Any]:
    jobs = "job" if count == 1 else "jobs"
    verb = operation.verb.capitalize()
    if asked.ids is not None:
        chosen = len(asked.ids)
        ids = asked.described[4:]
        if chosen == 1:
            which = f"the selected job ({ids})"
        elif count == chosen:
            which = f"the {chosen} selected jobs (ids {ids})"
        else:
            which = f"{count} of the {chosen} selected jobs (ids {ids})"
        lines = [f"{verb} {which}."]
        if count < chosen:
            lines.append(
                f"The other {chosen - count} are not {operation.applies_to}, so "
                f"{operation.verb} leaves them as they are."
            )
    else:
        lines = [
            f"{verb} all {count} {jobs} matching {asked.described} (those {operation.applies_to})."
        ]
    if operation.verb == "delete":
        lines.append("Deleted jobs are gone for good, with their args, errors and output.")
    if operation.verb == "cancel":
        lines.append("Running jobs are not cancelled in bulk; open a job to cancel it alone.")
    fields = [("do", f"{asked.verb}:{'selected' if asked.ids is not None else 'matching'}")]
    fields += [(k, v) for k, v in asked.filters.items() if v]
    fields += [("ids", str(i)) for i in asked.ids or ()]
    return {
        "title": f"{verb} {count} {jobs}?",
        "lines": lines,
        "button": f"{verb} {count} {jobs}" if count else "",
        "danger": operation.verb != "retry",
        "nothing": ""
        if count
        else f"Nothing to {operation.verb}: no such job is {operation.applies_to}.",
        "back": _list_url(asked),
        "fields": fields,
        "count": count,
    }


async def refused(request: Request, action: str | None, exc: Exception) -> None:
    """Record a request refused before it reached the core (bad ids, no filter, an unknown
    operation), under the audit action the operation would have had (``request`` if none)."""
    from awa_cli.serve.audit import audit
    from awa_cli.serve.common import principal_of

    detail = {"status": status_for(exc), "error": error_line(exc)}
    target = f"POST {request.url.path}"
    actor = principal_of(request).actor
    await audit(client_of(request), actor, action or "request", target, "refused", detail)


def _audit_action(verb: str) -> str | None:
    return {"cancel": "job.cancel", "retry": "job.retry", "delete": "job.purge"}.get(verb)


@ROUTES.post("/jobs/bulk")
async def bulk_form(request: Request) -> Response:
    """The jobs list's bulk form: a confirmation page first, then the action and back to
    the list with a notice of how many jobs changed."""
    from starlette.responses import RedirectResponse

    form = await form_lists(request)
    try:
        asked = _from_form(form)
    except ValidationError as exc:
        await refused(request, _audit_action((form.get("do") or [""])[-1].partition(":")[0]), exc)
        return error_page(request, exc)
    try:
        operation = _operations(client_of(request))[asked.verb]
        if (form.get("confirm") or [""])[-1] != "yes":
            count = await _count(client_of(request), asked)
            shown = _confirmation(asked, operation, count)
            return render(request, "confirm.html", action="/jobs/bulk", **shown)
        done = await _execute(request, asked)
    except Exception as exc:
        return error_page(request, exc)
    notice = f"{done} {'job' if done == 1 else 'jobs'} {operation.past}"
    return RedirectResponse(_list_url(asked, notice), status_code=303)


def _from_json(verb: str, body: bytes) -> tuple[BulkAsk, bool]:
    try:
        data = json.loads(body or b"{}")
    except ValueError as exc:
        raise ValidationError("body", f"not valid JSON: {exc}") from None
    if not isinstance(data, dict):
        raise ValidationError("body", "expected a JSON object")
    unknown = set(data) - {"ids", "all", "dry_run", *FILTERS}
    if unknown:
        raise ValidationError(sorted(unknown)[0], "unknown field")
    filters: dict[str, str | None] = {}
    for name in FILTERS:
        value = data.get(name)
        if value is not None and not isinstance(value, str):
            raise ValidationError(name, "expected a string")
        filters[name] = value or None
    dry_run = data.get("dry_run", False)
    if not isinstance(dry_run, bool) or not isinstance(data.get("all", False), bool):
        raise ValidationError(
            "dry_run" if not isinstance(dry_run, bool) else "all", "expected true or false"
        )
    if "ids" in data:
        raw = data["ids"]
        if not isinstance(raw, list) or any(
            isinstance(i, bool) or not isinstance(i, int) for i in raw
        ):
            raise ValidationError("ids", "expected a list of job ids")
        return BulkAsk(verb, ids=_ids([str(i) for i in raw]), filters=filters), dry_run
    return BulkAsk(verb, filters=filters, all=bool(data.get("all", False))), dry_run


@ROUTES.post("/api/jobs/bulk/{verb}")
async def bulk_api(request: Request) -> Response:
    """``{"count": n, "dry_run": bool}``; the body names ``ids`` or the filters (``state``,
    ``kind``, ``queue``, ``tag``; none at all needs ``"all": true``) and ``dry_run``."""
    from starlette.responses import JSONResponse

    verb = str(request.path_params["verb"])
    try:
        if verb not in ("cancel", "retry", "delete"):
            raise ValidationError("operation", "expected cancel, retry or delete")
        asked, dry_run = _from_json(verb, await request.body())
    except ValidationError as exc:
        await refused(request, _audit_action(verb), exc)
        return json_failure(exc)
    try:
        if dry_run:
            count = await _count(client_of(request), asked)
        else:
            count = await _execute(request, asked)
    except Exception as exc:
        return json_failure(exc)
    return JSONResponse({"count": count, "dry_run": dry_run})
