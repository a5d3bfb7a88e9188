"""The operator pages: queues (pause, resume), the dead-letter queue (retry, purge) and
periodic schedules (pause, resume, trigger), with their API twins under ``/api/``.

Each action is one :class:`Action`: the client call it makes, the audit name and target
the outcome core records it under, and what the form and the API answer. Both twins run it
through :func:`~awa_cli.serve.common.act`, so each is audited once; auth, CSRF and read-only
are the guard's. Unknown queue, dead letter or schedule: 404 with a one-line error.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any
from urllib.parse import urlencode

from awa_cli.admin import QueueInfo
from awa_cli.errors import QueueNotFound, ValidationError
from awa_cli.serve.common import (
    act,
    client_of,
    error_line,
    error_page,
    json_error,
    principal_of,
    render,
    status_for,
)
from awa_cli.serve.pages import STATES, overview_table

if TYPE_CHECKING:
    from starlette.requests import Request
    from starlette.responses import Response
    from starlette.routing import BaseRoute

    from awa_cli.client import AsyncClient

DLQ_PAGE = 100
MAX_LIMIT = 1000


# -- reads -------------------------------------------------------------------------------
async def queue_rows(client: AsyncClient) -> list[dict[str, Any]]:
    """Every known queue: its pause state (``list_queues``) and its counts per state and
    oldest available job's age (``job_counts``), by name."""
    infos = {q.queue: q for q in await client.list_queues()}
    counted = {q["queue"]: q for q in overview_table(await client.job_counts())["queues"]}
    rows = []
    for name in sorted(set(infos) | set(counted)):
        info = infos.get(name, QueueInfo(name))
        entry = counted.get(name, {"counts": dict.fromkeys(STATES, 0), "oldest": None})
        rows.append(
            info.to_json()
            | {"counts": entry["counts"], "oldest_available_age_seconds": entry["oldest"]}
        )
    return rows


def _text_param(request: Request, name: str) -> str | None:
    return (request.query_params.get(name) or "").strip() or None


def _limit(request: Request, default: int) -> int:
    raw = (request.query_params.get("limit") or "").strip()
    if not raw:
        return default
    if not raw.isdigit() or not 1 <= int(raw) <= MAX_LIMIT:
        raise ValidationError("limit", f"must be an integer from 1 to {MAX_LIMIT}")
    return int(raw)


async def _dlq(request: Request, default_limit: int) -> dict[str, Any]:
    client = client_of(request)
    filters = {"queue": _text_param(request, "queue"), "kind": _text_param(request, "kind")}
    letters = await client.list_dlq(**filters, limit=_limit(request, default_limit))
    return {"filters": filters, "letters": letters, "depth": await client.dlq_depth()}


# -- pages -------------------------------------------------------------------------------
def _done(request: Request) -> str | None:
    return request.query_params.get("done") or None


async def queues_page(request: Request) -> Response:
    try:
        rows = await queue_rows(client_of(request))
    except Exception as exc:
        return error_page(request, exc)
    return render(request, "queues.html", queues=rows, states=STATES, done=_done(request))


async def dlq_page(request: Request) -> Response:
    try:
        found = await _dlq(request, DLQ_PAGE)
    except Exception as exc:
        return error_page(request, exc)
    return render(request, "dlq.html", **found, done=_done(request))


async def dead_letter_page(request: Request) -> Response:
    try:
        dead = await client_of(request).get_dlq_job(int(request.path_params["job_id"]))
    except Exception as exc:
        return error_page(request, exc)
    return render(request, "dead_letter.html", job=dead)


async def periodic_page(request: Request) -> Response:
    try:
        schedules = await client_of(request).list_periodic()
    except Exception as exc:
        return error_page(request, exc)
    return render(request, "periodic.html", schedules=schedules, done=_done(request))


# -- API reads ---------------------------------------------------------------------------
def _failed(exc: Exception) -> Response:
    return json_error(status_for(exc), error_line(exc))


async def api_queues(request: Request) -> Response:
    """``{"queues": [{"queue", "paused", "paused_at", "paused_by", "dead_letter",
    "updated_at", "counts": {state: n}, "oldest_available_age_seconds"}]}``."""
    from starlette.responses import JSONResponse

    try:
        rows = await queue_rows(client_of(request))
    except Exception as exc:
        return _failed(exc)
    return JSONResponse({"queues": rows})


async def api_dlq(request: Request) -> Response:
    """``{"dead_letters": [job fields + "dead_at", "dead_reason"], "depth": {"total",
    "queues": {name: n}}}``, newest first; ``?queue=&kind=&limit=`` (default 100)."""
    from starlette.responses import JSONResponse

    try:
        found = await _dlq(request, 100)
    except Exception as exc:
        return _failed(exc)
    letters = [d.to_json() for d in found["letters"]]
    return JSONResponse({"dead_letters": letters, "depth": found["depth"].to_json()})


async def api_dead_letter(request: Request) -> Response:
    from starlette.responses import JSONResponse

    try:
        dead = await client_of(request).get_dlq_job(int(request.path_params["job_id"]))
    except Exception as exc:
        return _failed(exc)
    return JSONResponse(dead.to_json())


async def api_periodic(request: Request) -> Response:
    """``{"periodic": [{"name", "cron", "timezone", "kind", "paused", "last_fire_at",
    "next_fire_at", "last_job_id", "last_job_state", ...}]}``."""
    from starlette.responses import JSONResponse

    try:
        schedules = await client_of(request).list_periodic()
    except Exception as exc:
        return _failed(exc)
    return JSONResponse({"periodic": [p.to_json() for p in schedules]})


# -- actions -----------------------------------------------------------------------------
Call = Callable[["AsyncClient", str, str], Awaitable[Any]]  # (client, actor, path value)


@dataclass(frozen=True)
class Action:
    """One operator action, its form and API twins: ``path`` below ``/`` and ``/api/``."""

    path: str  # e.g. "/queues/{queue}/pause"
    param: str  # the path parameter naming the target
    audit: str  # the audit action, as the core records it (queue.pause, dlq.retry...)
    target: Callable[[str], str]  # the audit target, as the core records it
    call: Call
    done: Callable[[str, Any], str]  # where the form redirects after it


async def _known_queue(client: AsyncClient, queue: str) -> None:
    if queue not in {q.queue for q in await client.list_queues()}:
        raise QueueNotFound(f"queue {queue!r} not found")


async def _pause_queue(client: AsyncClient, actor: str, queue: str) -> QueueInfo:
    await _known_queue(client, queue)
    return await client.pause_queue(queue)


async def _resume_queue(client: AsyncClient, actor: str, queue: str) -> QueueInfo:
    await _known_queue(client, queue)
    return await client.resume_queue(queue)


async def _retry_dead(client: AsyncClient, actor: str, job_id: str) -> Any:
    return await client.retry_from_dlq(int(job_id))


async def _purge_dead(client: AsyncClient, actor: str, job_id: str) -> dict[str, int]:
    await client.get_dlq_job(int(job_id))  # JobNotFound: 404, nothing purged
    return {"purged": await client.purge_dlq(id=int(job_id))}


async def _pause_periodic(client: AsyncClient, actor: str, name: str) -> Any:
    return await client.pause_periodic(name, actor=actor)


async def _resume_periodic(client: AsyncClient, actor: str, name: str) -> Any:
    return await client.resume_periodic(name, actor=actor)


async def _trigger_periodic(client: AsyncClient, actor: str, name: str) -> Any:
    return await client.trigger_periodic(name, actor=actor)


def _to(page: str, done: str) -> str:
    return f"{page}?{urlencode({'done': done})}"


def _periodic_target(name: str) -> str:
    return f"periodic:{name}"


ACTIONS = [
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


async def _run(request: Request, action: Action) -> tuple[str, Any]:
    value = str(request.path_params[action.param])
    client, actor = client_of(request), principal_of(request).actor
    result = await act(
        request, action.audit, action.target(value), lambda: action.call(client, actor, value)
    )
    return value, result


def form_handler(action: Action) -> Callable[[Request], Awaitable[Response]]:
    async def handle(request: Request) -> Response:
        from starlette.responses import RedirectResponse

        try:
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
            return _failed(exc)
        return JSONResponse(_json_of(result))

    return handle


def routes() -> list[BaseRoute]:
    from starlette.routing import Route

    found: list[BaseRoute] = [
        Route("/queues", queues_page, methods=["GET"]),
        Route("/dlq", dlq_page, methods=["GET"]),
        Route("/dlq/{job_id:int}", dead_letter_page, methods=["GET"]),
        Route("/periodic", periodic_page, methods=["GET"]),
        Route("/api/queues", api_queues, methods=["GET"]),
        Route("/api/dlq", api_dlq, methods=["GET"]),
        Route("/api/dlq/{job_id:int}", api_dead_letter, methods=["GET"]),
        Route("/api/periodic", api_periodic, methods=["GET"]),
    ]
    for action in ACTIONS:
        found.append(Route(action.path, form_handler(action), methods=["POST"]))
        found.append(Route("/api" + action.path, api_handler(action), methods=["POST"]))
    return found
