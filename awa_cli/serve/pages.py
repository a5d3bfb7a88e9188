"""The dashboard's HTML pages and form actions: one route and one template per page.

Adding a page: a function here under ``@ROUTES.get(path)`` (a read through the client under
``@page("x.html")``, returning the template's context), a template extending ``base.html``,
and a ``NavItem`` in ``common.NAV``. Auth, CSRF and the security headers are the guard's (``auth.Guard``).
"""

from __future__ import annotations

import json
import logging
from typing import TYPE_CHECKING, Any
from urllib.parse import urlencode

from awa_cli.callbacks import check_resolvable
from awa_cli.jobs import JobState
from awa_cli.errors import ValidationError
from awa_cli.serve.common import act, client_of, error_page, form_of, int_param, render
from awa_cli.serve.routing import RouteTable, page

if TYPE_CHECKING:
    from starlette.requests import Request
    from starlette.responses import Response

    from awa_cli.client import JobCount
    from awa_cli.jobs import JobRow

log = logging.getLogger("awa.serve")

STATES = [s.value for s in JobState]
PAGE_SIZE = 50
RELATIVES = 100  # parents and children the job page lists (it says how many there are)
ROUTES = RouteTable()


def overview_table(counts: list[JobCount]) -> dict[str, Any]:
    """Counts per queue and state, totals per state, each queue's oldest available age, and
    the states whose counts are estimates (terminal states of a large table)."""
    queues: dict[str, dict[str, Any]] = {}
    totals = dict.fromkeys(STATES, 0)
    estimated: set[str] = set()
    for c in counts:
        entry = queues.setdefault(
            c.queue, {"queue": c.queue, "counts": dict.fromkeys(STATES, 0), "oldest": None}
        )
        entry["counts"][c.state] = c.count
        totals[c.state] += c.count
        if c.estimated:
            estimated.add(c.state)
        if c.oldest_available_seconds is not None:
            entry["oldest"] = c.oldest_available_seconds
    oldest = [q["oldest"] for q in queues.values() if q["oldest"] is not None]
    return {
        "queues": list(queues.values()),
        "totals": totals,
        "total": sum(totals.values()),
        "estimated": sorted(estimated),
        "oldest_available_seconds": max(oldest) if oldest else None,
    }


@ROUTES.get("/")
@page("overview.html")
async def overview(request: Request) -> dict[str, Any]:
    """Totals, the DLQ's depth, the paused queues, the last hour's chart, and every known
    queue (paused ones flagged; configured and paused queues listed even with no jobs)."""
    from awa_cli.serve.chart import throughput_chart
    from awa_cli.serve.common import configured_queues
    from awa_cli.serve.queues import queue_table

    client = client_of(request)
    stats, queues = await queue_table(client, configured_queues(request))
    chart = throughput_chart(await client.throughput())
    depth = await client.dlq_depth()
    paused = [q["queue"] for q in queues if q["paused"]]
    return {
        "stats": stats,
        "queues": queues,
        "paused": paused,
        "depth": depth,
        "states": STATES,
        "chart": chart,
    }


def _filters(request: Request) -> dict[str, str | None]:
    q = request.query_params
    return {name: (q.get(name) or "").strip() or None for name in ("state", "kind", "queue", "tag")}


@ROUTES.get("/jobs")
async def jobs(request: Request) -> Response:
    from starlette.responses import RedirectResponse

    filters = _filters(request)
    try:
        found = int_param(request, "id", "a job id")
        if found is not None:
            return RedirectResponse(f"/jobs/{found}", status_code=303)
        rows = await client_of(request).list_jobs_page(
            **filters, before_id=int_param(request, "before", "a job id"), limit=PAGE_SIZE + 1
        )
    except Exception as exc:
        return error_page(request, exc)
    more = len(rows) > PAGE_SIZE
    rows = rows[:PAGE_SIZE]
    next_url = None
    if more:
        query = {k: v for k, v in filters.items() if v} | {"before": str(rows[-1].id)}
        next_url = "/jobs?" + urlencode(query)
    from awa_cli.history import percent_of

    return render(
        request,
        "jobs.html",
        jobs=rows,
        filters=filters,
        states=STATES,
        next_url=next_url,
        percent_of=percent_of,
        done=request.query_params.get("done") or None,
    )


def _job_id(request: Request) -> int:
    return int(request.path_params["job_id"])


@ROUTES.get("/jobs/{job_id:int}")
@page("job.html")
async def job(request: Request) -> dict[str, Any]:
    """The job with its progress, timeline (attempts, callback, follow-ups, the job that
    produced it), its parents and children, workflow step and batch, and, for a runnable or
    blocked job, why it is not running (architecture §11, §13, §16)."""
    from awa_cli.history import percent_of

    client = client_of(request)
    job_id = _job_id(request)
    history = await client.job_history(job_id)
    status = await client.limit_status(job_id)
    relations = await client.job_relations(job_id, limit=RELATIVES)
    row = history.job
    return {
        "job": row,
        "timeline": history,
        "relations": relations,
        "percent": percent_of(row.progress),
        "why_not_running": status["reason"],
        "done": request.query_params.get("done") or None,
        "urls": _callback_urls(request, row),
    }


def _callback_urls(request: Request, row: JobRow) -> list[tuple[str, str]]:
    """Where an external system posts to resolve this job's callback (the configured
    ``callback_base_url``, else this server's ``/callbacks``)."""
    from awa_cli.callbacks import callback_urls

    if row.callback_id is None:
        return []
    base = request.app.state.settings.callback_base_url or f"{server_origin(request)}/callbacks"
    return list(callback_urls(base, row.callback_id))


def server_origin(request: Request) -> str:
    """This server's own address as it listens (never the request's ``Host`` header)."""
    server = request.scope.get("server") or ("127.0.0.1", 8477)
    host, port = str(server[0]), int(server[1])
    shown = f"[{host}]" if ":" in host else host
    scheme = request.url.scheme
    default = (scheme == "http" and port == 80) or (scheme == "https" and port == 443)
    return f"{scheme}://{shown}" if default else f"{scheme}://{shown}:{port}"


def _back_to_job(job_id: int, done: str) -> Response:
    from starlette.responses import RedirectResponse

    return RedirectResponse(f"/jobs/{job_id}?{urlencode({'done': done})}", status_code=303)


def _payload(text: str) -> Any:
    if not text.strip():
        return None
    try:
        return json.loads(text)
    except ValueError as exc:
        raise ValidationError("payload", f"not valid JSON: {exc}") from None


@ROUTES.post("/jobs/{job_id:int}/callback")
async def resolve_callback(request: Request) -> Response:
    """The job page's callback form: complete, fail, retry or resume its current callback."""
    job_id = _job_id(request)
    client = client_of(request)
    form = await form_of(request)
    action = form.get("action", "")
    try:
        row = await client.get_job(job_id)
        if row.callback_id is None:
            raise ValidationError("callback", f"job {job_id} is not waiting on a callback")
        callback_id = row.callback_id
        calls = {
            "complete": lambda: client.complete_external(
                callback_id, _payload(form.get("payload", ""))
            ),
            "fail": lambda: client.fail_external(
                callback_id, form.get("error", "").strip() or "failed from the dashboard"
            ),
            "retry": lambda: client.retry_external(callback_id),
            "resume": lambda: client.resume_external(
                callback_id, _payload(form.get("payload", ""))
            ),
        }
        if action not in calls:
            raise ValidationError("action", "expected complete, fail, retry or resume")
        await check_resolvable(client, str(callback_id))
        await act(request, f"callback.{action}", f"job:{job_id}", calls[action])
    except Exception as exc:
        return error_page(request, exc)
    return _back_to_job(job_id, f"callback {action}")


@ROUTES.get("/login")
async def login_page(request: Request, *, status: int = 200, failed: bool = False) -> Response:
    from starlette.responses import RedirectResponse

    if request.app.state.policy.open:
        return RedirectResponse("/", status_code=303)
    return render(
        request,
        "login.html",
        status=status,
        failed=failed,
        next=_safe_next(request.query_params.get("next")),
    )


def _safe_next(target: str | None) -> str:
    """Only a path on this server (never ``//host`` or a scheme) may be redirected to."""
    if not target or not target.startswith("/") or target.startswith("//") or "\\" in target:
        return "/"
    return target


@ROUTES.post("/login")
async def login(request: Request) -> Response:
    from starlette.responses import RedirectResponse

    from awa_cli.serve.audit import audit
    from awa_cli.serve.auth import SECURE_KEY, session_cookie_header

    policy = request.app.state.policy
    if policy.open:
        return RedirectResponse("/", status_code=303)
    who = request.client.host if request.client else "unknown"
    wait = policy.throttle.wait(who)
    if wait > 0:  # 5 failures in a row: one try per 10 s (architecture §18.4)
        response = await login_page(request, status=429, failed=True)
        response.headers["retry-after"] = str(int(wait) + 1)
        return response
    form = await form_of(request)
    token = policy.match_token(form.get("token", "").strip())
    if token is None:  # counted (awa_serve_login_failures_total), not each audited
        policy.throttle.failed(who)
        log.warning("action=login_refused client=%s", who)
        return await login_page(request, status=401, failed=True)
    policy.throttle.succeeded(who)
    await audit(client_of(request), f"serve:{token.name}", "login", "session", "ok")
    response = RedirectResponse(_safe_next(form.get("next")), status_code=303)
    secure = bool(request.scope.get(SECURE_KEY))
    response.headers.append("set-cookie", session_cookie_header(policy, token, secure))
    return response


@ROUTES.post("/logout")
async def logout(request: Request) -> Response:
    """End the session on the server (its cookie is worthless from now on) and forget it."""
    from starlette.responses import RedirectResponse

    from awa_cli.serve.auth import SECURE_KEY, clear_session_header, end_session

    end_session(request.app.state.policy, request.scope)
    response = RedirectResponse("/login", status_code=303)
    response.headers.append("set-cookie", clear_session_header(bool(request.scope.get(SECURE_KEY))))
    return response
