"""The operator pages: the dead-letter queue (retry, purge), periodic schedules (pause,
resume, trigger), the queue actions (pause, resume) and a job's cancel and retry, with their
API twins under ``/api/``.

Each action is one :class:`Action`: the client call it makes, the audit name and target
the outcome core records it under, and what the form and the API answer. Both twins run it
through :func:`~awa_cli.serve.common.act`, so each is audited once; auth, CSRF and read-only
are the guard's. Unknown queue, dead letter or schedule: 404 with a one-line error. A
destructive action (purge) answers its form with a confirmation page first, stating what it
deletes; the page's button posts again with ``confirm=yes``.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any
from urllib.parse import urlencode

from awa_cli.queues import QueueInfo
from awa_cli.errors import QueueNotFound
from awa_cli.serve.common import (
    act,
    client_of,
    configured_queues,
    error_page,
    form_of,
    format_when,
    json_failure,
    limit_param,
    principal_of,
    render,
)
from awa_cli.serve.queues import queue_rows
from awa_cli.serve.routing import RouteTable, json_read, page

if TYPE_CHECKING:
    from starlette.requests import Request
    from starlette.responses import Response

    from awa_cli.client import AsyncClient

DLQ_PAGE = 100
MAX_LIMIT = 1000
ROUTES = RouteTable()


# -- reads -------------------------------------------------------------------------------
def _text_param(request: Request, name: str) -> str | None:
    return (request.query_params.get(name) or "").strip() or None


async def _dlq(request: Request, default_limit: int) -> dict[str, Any]:
    client = client_of(request)
    filters = {"queue": _text_param(request, "queue"), "kind": _text_param(request, "kind")}
    letters = await client.list_dlq(**filters, limit=limit_param(request, default_limit, MAX_LIMIT))
    return {"filters": filters, "letters": letters, "depth": await client.dlq_depth()}


# -- pages -------------------------------------------------------------------------------
def _done(request: Request) -> str | None:
    return request.query_params.get("done") or None


@ROUTES.get("/dlq")
@page("dlq.html")
async def dlq_page(request: Request) -> dict[str, Any]:
    return await _dlq(request, DLQ_PAGE) | {"done": _done(request)}


@ROUTES.get("/dlq/{job_id:int}")
@page("dead_letter.html")
async def dead_letter_page(request: Request) -> dict[str, Any]:
    return {"job": await client_of(request).get_dlq_job(int(request.path_params["job_id"]))}


@ROUTES.get("/periodic")
@page("periodic.html")
async def periodic_page(request: Request) -> dict[str, Any]:
    return {"schedules": await client_of(request).list_periodic(), "done": _done(request)}


# -- API reads ---------------------------------------------------------------------------
@ROUTES.get("/api/dlq")
@json_read
async def api_dlq(request: Request) -> dict[str, Any]:
    """``{"dead_letters": [job fields + "dead_at", "dead_reason"], "depth": {"total",
    "queues": {name: n}}}``, newest first; ``?queue=&kind=&limit=`` (default 100)."""
    found = await _dlq(request, 100)
    letters = [d.to_json() for d in found["letters"]]
    return {"dead_letters": letters, "depth": found["depth"].to_json()}


@ROUTES.get("/api/dlq/{job_id:int}")
@json_read
async def api_dead_letter(request: Request) -> Any:
    dead = await client_of(request).get_dlq_job(int(request.path_params["job_id"]))
    return dead.to_json()


@ROUTES.get("/api/periodic")
@json_read
async def api_periodic(request: Request) -> dict[str, Any]:
    """``{"periodic": [{"name", "cron", "timezone", "kind", "paused", "last_fire_at",
    "next_fire_at", "last_job_id", "last_job_state", ...}]}``."""
    schedules = await client_of(request).list_periodic()
    return {"periodic": [p.to_json() for p in schedules]}


# -- actions -----------------------------------------------------------------------------
@dataclass(frozen=True)
class Target:
    """What an action is called with: the client, the caller's audit actor, the path value
    (queue name, dead letter id, schedule name) and the config's queues."""

    client: AsyncClient
    actor: str
    value: str
    configured: tuple[str, ...] = ()


Call = Callable[[Target], Awaitable[Any]]


@dataclass(frozen=True)
class Action:
    """One operator action, its form and API twins: ``path`` below ``/`` and ``/api/``."""

    path: str  # e.g. "/queues/{queue}/pause"
    param: str  # the path parameter naming the target
    audit: str  # the audit action, as the core records it (queue.pause, dlq.retry...)
    target: Callable[[str], str]  # the audit target, as the core records it
    call: Call
    done: Callable[[str, Any], str]  # where the form redirects after it
    # A destructive action's form asks first: what the confirmation page says (the API
    # twin, called by a program, does not ask).
    confirm: Callable[[Target], Awaitable[dict[str, Any]]] | None = None


async def _known_queue(t: Target) -> None:
    """A queue the config names, or one known to awa.queues or by its jobs (as ``awa queue
    pause`` takes it); anything else is 404 (a typo pauses nothing)."""
    if t.value in t.configured:
        return
    if t.value not in {q["queue"] for q in await queue_rows(t.client, t.configured)}:
        raise QueueNotFound(f"queue {t.value!r} not found")


async def _pause_queue(t: Target) -> QueueInfo:
    await _known_queue(t)
    return await t.client.pause_queue(t.value)


async def _resume_queue(t: Target) -> QueueInfo:
    await _known_queue(t)
    return await t.client.resume_queue(t.value)


async def _retry_dead(t: Target) -> Any:
    return await t.client.retry_from_dlq(int(t.value))


async def _purge_dead(t: Target) -> dict[str, int]:
    await t.client.get_dlq_job(int(t.value))  # JobNotFound: 404, nothing purged
    return {"purged": await t.client.purge_dlq(id=int(t.value))}


async def _confirm_purge(t: Target) -> dict[str, Any]:
    """What the confirmation of a dead letter's purge says (JobNotFound: 404)."""
    dead = await t.client.get_dlq_job(int(t.value))
    return {
        "title": f"Purge dead letter {dead.id}?",
        "lines": [
            f"This deletes 1 dead letter for good: job {dead.id}, kind {dead.kind}, queue "
            f"{dead.queue}, dead since {format_when(dead.dead_at)} ({dead.dead_reason.value}).",
            "Its args, errors and history go with it; Retry puts it back into the queue instead.",
        ],
        "button": "Purge 1 dead letter",
        "back": f"/dlq/{dead.id}",
    }


async def _pause_periodic(t: Target) -> Any:
    return await t.client.pause_periodic(t.value, actor=t.actor)


async def _resume_periodic(t: Target) -> Any:
    return await t.client.resume_periodic(t.value, actor=t.actor)


async def _trigger_periodic(t: Target) -> Any:
    return await t.client.trigger_periodic(t.value, actor=t.actor)


def _to(page: str, done: str) -> str:
    return f"{page}?{urlencode({'done': done})}"


def _periodic_target(name: str) -> str:
    return f"periodic:{name}"


async def _cancel_job(t: Target) -> Any:
    return await t.client.cancel(int(t.value))


async def _retry_job(t: Target) -> Any:
    return await t.client.retry(int(t.value))


def _job_target(job_id: str) -> str:
    return f"job:{job_id}"


ACTIONS = [
    Action(
        "/jobs/{job_id:int}/cancel",
        "job_id",
        "job.cancel",
        _job_target,
        _cancel_job,
        lambda i, _: _to(f"/jobs/{i}", "cancelled"),
    ),
    Action(
        "/jobs/{job_id:int}/retry",
        "job_id",
        "job.retry",
        _job_target,
        _retry_job,
        lambda i, _: _to(f"/jobs/{i}", "retried"),
    ),
    Action(
        "/queues/{queue}/pause",
        "queue",
        "queue.pause",
        str,
        _pause_queue,
        lambda q, _: _to("/queues", f"paused {q}"),
    ),
    Action(
        "/queues/{queue}/resume",
        "queue",
        "queue.resume",
        str,
        _resume_queue,
        lambda q, _: _to("/queues", f"resumed {q}"),
    ),
    Action(
        "/dlq/{job_id:int}/retry",
        "job_id",
        "dlq.retry",
        str,
        _retry_dead,
        lambda i, _: _to(f"/jobs/{i}", "retried from the dead-letter queue"),
    ),
    Action(
        "/dlq/{job_id:int}/purge",
        "job_id",
        "dlq.purge",
        lambda i: f"id={i}",
        _purge_dead,
        lambda i, _: _to("/dlq", f"purged dead letter {i}"),
        confirm=_confirm_purge,
    ),
    Action(
        "/periodic/{name}/pause",
        "name",
        "cron.pause",
        _periodic_target,
        _pause_periodic,
        lambda n, _: _to("/periodic", f"paused {n}"),
    ),
    Action(
        "/periodic/{name}/resume",
        "name",
        "cron.resume",
        _periodic_target,
        _resume_periodic,
        lambda n, _: _to("/periodic", f"resumed {n}"),
    ),
    Action(
        "/periodic/{name}/trigger",
        "name",
        "cron.trigger",
        _periodic_target,
        _trigger_periodic,
        lambda n, row: _to("/periodic", f"triggered {n}: job {row.id}"),
    ),
]


def _json_of(result: Any) -> Any:
    return result.to_json() if hasattr(result, "to_json") else result


def _target(request: Request, action: Action) -> Target:
    value = str(request.path_params[action.param])
    actor = principal_of(request).actor
    return Target(client_of(request), actor, value, configured_queues(request))


async def _run(request: Request, action: Action) -> tuple[str, Any]:
    target = _target(request, action)
    result = await act(
        request, action.audit, action.target(target.value), lambda: action.call(target)
    )
    return target.value, result


def form_handler(action: Action) -> Callable[[Request], Awaitable[Response]]:
    async def handle(request: Request) -> Response:
        from starlette.responses import RedirectResponse

        try:
            if action.confirm is not None and (await form_of(request)).get("confirm") != "yes":
                asked = await action.confirm(_target(request, action))
                return render(request, "confirm.html", action=request.url.path, fields=[], **asked)
            value, result = await _run(request, action)
        except Exception as exc:
            return error_page(request, exc)
        return RedirectResponse(action.done(value, result), status_code=303)

    return handle


def api_handler(action: Action) -> Callable[[Request], Awaitable[Response]]:
    async def handle(request: Request) -> Response:
        from starlette.responses import JSONResponse

        try:
            _, result = await _run(request, action)
        except Exception as exc:
            return json_failure(exc)
        return JSONResponse(_json_of(result))

    return handle


def add_actions(table: RouteTable, actions: list[Action]) -> None:
    """Each action's form route below ``/`` and its API twin below ``/api/``."""
    for action in actions:
        table.add(action.path, form_handler(action), "POST")
        table.add("/api" + action.path, api_handler(action), "POST")


add_actions(ROUTES, ACTIONS)
