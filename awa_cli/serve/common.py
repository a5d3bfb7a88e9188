"""What every route of ``awa serve`` shares: the client, the caller, rendering, errors, audit.

Routes stay thin (STYLE.md "The web surface"): parse, call the same client method the CLI
calls (through :func:`act` for anything that changes a job, so it is audited), render.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from awa_cli.serve.audit import audit, log_entry, result_of
from awa_cli.serve.auth import CSRF_KEY, PRINCIPAL_KEY, Principal, form_fields

if TYPE_CHECKING:
    from datetime import datetime

    import jinja2
    from starlette.requests import Request
    from starlette.responses import Response

    from awa_cli.client import AsyncClient

T = TypeVar("T")
D = TypeVar("D", int, None)
HERE = Path(__file__).resolve().parent
TEMPLATES = HERE / "templates"
STATIC = HERE / "static"


@dataclass(frozen=True)
class NavItem:
    """One entry of the dashboard's navigation."""

    path: str
    label: str


NAV = [
    NavItem("/", "Overview"),
    NavItem("/jobs", "Jobs"),
    NavItem("/queues", "Queues"),
    NavItem("/dlq", "DLQ"),
    NavItem("/periodic", "Periodic"),
    NavItem("/workflows", "Workflows"),
    NavItem("/batches", "Batches"),
    NavItem("/workers", "Workers"),
    NavItem("/kinds", "Kinds"),
    NavItem("/audit", "Audit"),
]


def client_of(request: Request) -> AsyncClient:
    client: AsyncClient = request.app.state.client
    return client


def principal_of(request: Request) -> Principal:
    principal: Principal = request.scope[PRINCIPAL_KEY]
    return principal


async def form_of(request: Request) -> dict[str, str]:
    """A form post's fields (the guard has already checked its CSRF token)."""
    return form_fields(await request.body())


async def form_lists(request: Request) -> dict[str, list[str]]:
    """A form post's fields with every value of a repeated name (checkboxes)."""
    from urllib.parse import parse_qs

    body = (await request.body()).decode("utf-8", "replace")
    return parse_qs(body, keep_blank_values=True)


def int_param(request: Request, name: str, expected: str = "a positive integer") -> int | None:
    """A query parameter's positive integer (at most 18 digits), None when it is blank; a
    ValidationError ``expected <expected>, got '...'`` for anything else."""
    from awa_cli.errors import ValidationError

    raw = (request.query_params.get(name) or "").strip()
    if not raw:
        return None
    if not raw.isdigit() or len(raw) > 18:
        raise ValidationError(name, f"expected {expected}, got {raw[:40]!r}")
    return int(raw)


def limit_param(request: Request, default: D, most: int = 1000) -> int | D:
    """``?limit=``: an integer from 1 to ``most``; ``default`` when it is blank."""
    from awa_cli.errors import ValidationError

    raw = (request.query_params.get("limit") or "").strip()
    if not raw:
        return default
    if not raw.isdigit() or not 1 <= int(raw) <= most:
        raise ValidationError("limit", f"must be an integer from 1 to {most}")
    return int(raw)


def configured_queues(request: Request) -> tuple[str, ...]:
    """The queues the loaded config names (``[queues.NAME]``): known even with no jobs."""
    return tuple(request.app.state.settings.configured_queues)


def status_for(exc: BaseException) -> int:
    """The HTTP status of an error from the client (404, 409, 422, 500 or 503)."""
    import psycopg

    if isinstance(exc, psycopg.errors.NumericValueOutOfRange):
        return 404  # an id beyond bigint: no such row
    if isinstance(exc, psycopg.DataError):
        return 400  # a NUL byte in a filter, a value the database cannot take

    from awa_cli.callbacks import status_of
    from awa_cli.errors import (
        BatchNotFound,
        JobNotFound,
        PeriodicNotFound,
        QueueNotFound,
        UniqueConflict,
    )

    return status_of(
        exc,
        not_found=(JobNotFound, PeriodicNotFound, QueueNotFound, BatchNotFound),
        conflict=(UniqueConflict,),
    )


def error_line(exc: BaseException) -> str:
    """One line for an error, safe to show (database errors stay generic)."""
    import psycopg

    if isinstance(exc, psycopg.errors.NumericValueOutOfRange):
        return "not found: the id is out of range"
    if isinstance(exc, psycopg.DataError):
        return "bad input: the database cannot store that value (a NUL byte?)"
    if isinstance(exc, psycopg.Error):
        return (
            "database unavailable"
            if isinstance(exc, psycopg.OperationalError)
            else ("database error")
        )
    text = str(exc).strip()
    return (text.splitlines()[0] if text else type(exc).__name__)[:500]


async def act(request: Request, action: str, target: str, call: Callable[[], Awaitable[T]]) -> T:
    """Run one action through the client as the caller and audit it once, whatever its
    result: the outcome core records the actions it audits itself (queue pause, the DLQ,
    periodic schedules: in the action's transaction, actor ``serve:<token name>`` through
    ``acting_as``); for the rest, and a refusal the core did not record, the entry is
    written here, under the same ``action`` and ``target`` names as the core's."""
    from awa_cli.client_ops import acting_as

    actor = principal_of(request).actor
    client = client_of(request)
    with acting_as(actor) as trail:
        try:
            result = await call()
        except Exception as exc:
            if not trail.recorded(succeeded=False):
                status = status_for(exc)
                detail = {"status": status, "error": error_line(exc)}
                await audit(client, actor, action, target, result_of(status), detail)
            raise
    if not trail.recorded(succeeded=True):
        await audit(client, actor, action, target, "ok")
    else:  # the core wrote the row in the action's transaction; the log line is ours
        log_entry(actor, action, target, "ok")
    return result


def json_error(status: int, message: str) -> Response:
    from starlette.responses import JSONResponse

    return JSONResponse({"error": message}, status_code=status)


def json_failure(exc: BaseException) -> Response:
    """The API's answer to an error from the client: its status and one-line message."""
    return json_error(status_for(exc), error_line(exc))


def template_env() -> jinja2.Environment:
    import jinja2

    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(TEMPLATES)),
        autoescape=True,
        undefined=jinja2.StrictUndefined,
        finalize=visible_controls,
    )
    env.filters["pathseg"] = pathseg
    env.filters["pretty"] = lambda value: json.dumps(value, indent=2, sort_keys=True, default=str)
    env.filters["when"] = format_when
    env.filters["age"] = format_age
    env.filters["clip"] = clip
    env.filters["detail"] = format_detail
    env.filters["percent"] = format_percent
    return env


def pathseg(value: object) -> str:
    """One URL path segment: every reserved character encoded, ``/`` too (a queue named
    ``../periodic/nightly`` stays one segment instead of turning its Pause button into a
    schedule's)."""
    from urllib.parse import quote

    return quote(str(value), safe="")


# Bidirectional overrides and isolates, and the C0/C1 controls but tab and newline: they can
# reorder or hide what an operator reads, so pages show them as visible \uXXXX escapes.
_HIDDEN = {
    c: f"\\u{c:04x}"
    for c in (
        *range(0x00, 0x09),
        *range(0x0B, 0x20),
        *range(0x7F, 0xA0),
        0x061C,
        0x200E,
        0x200F,
        *range(0x202A, 0x202F),
        *range(0x2066, 0x206A),
    )
}


def visible_controls(value: object) -> object:
    """Every ``{{ value }}`` of a page: plain text has its bidi and control characters made
    visible (markup a filter built is left as it is)."""
    import markupsafe

    if isinstance(value, str) and not isinstance(value, markupsafe.Markup):
        return value.translate(_HIDDEN)
    return value


def format_when(value: datetime | str | None) -> str:
    """A timestamp to the second, in UTC and labelled so (``2026-12-02 14:05:09 UTC``); an
    ISO string (as a job's error and progress entries hold them) is parsed first, and shown
    as it is if it does not parse. A time without a zone is taken as UTC (awa writes UTC)."""
    from datetime import UTC, datetime

    if value is None or value == "":
        return "-"
    if isinstance(value, str):
        try:
            value = datetime.fromisoformat(value)
        except ValueError:
            return str(value)
    if not isinstance(value, datetime):
        return str(value)
    moment = value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)
    return moment.strftime("%Y-%m-%d %H:%M:%S UTC")


CLIP_CHARS = 80  # a list cell's one-line preview of args or an error
FULL_CHARS = 4096  # what a list cell expands to at most (the job page has the rest)


def clip(value: object) -> dict[str, str]:
    """A list cell's preview of a value (args, an error): ``short`` on one line (at most
    ``CLIP_CHARS``), ``full`` to expand (at most ``FULL_CHARS``, so a page of big args stays
    bounded), ``more`` when even ``full`` was cut. Text is escaped when rendered."""
    text = value if isinstance(value, str) else json.dumps(value, sort_keys=True, default=str)
    one_line = " ".join(text.split())
    short = one_line if len(one_line) <= CLIP_CHARS else one_line[: CLIP_CHARS - 1] + "…"
    full = text if len(text) <= FULL_CHARS else text[:FULL_CHARS] + "…"
    more = "" if len(text) <= FULL_CHARS else f"{len(text) - FULL_CHARS} more characters"
    return {"short": short, "full": full if full != short else "", "more": more}


def format_detail(detail: dict[str, Any] | None) -> str:
    """An audit entry's detail on one line: ``count=1500``, ``status=404 error=job 9 not
    found``; nested values as compact JSON (an empty detail: ``-``)."""
    if not detail:
        return "-"
    parts = []
    for key, value in detail.items():
        shown = value if isinstance(value, str) else json.dumps(value, default=str)
        parts.append(f"{key}={shown}")
    return " ".join(parts)


def format_percent(value: float | None) -> str:
    """A progress percent rounded to one decimal (``16.7%``, ``60%``)."""
    if value is None:
        return "-"
    return f"{round(float(value), 1):g}%"


def format_age(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    if seconds < 120:
        return f"{seconds:.0f}s"
    if seconds < 7200:
        return f"{seconds / 60:.0f}m"
    if seconds < 172800:
        return f"{seconds / 3600:.1f}h"
    return f"{seconds / 86400:.1f}d"


def render(request: Request, name: str, status: int = 200, **context: Any) -> Response:
    """A page: ``name`` extends base.html; the caller, CSRF token and navigation are added."""
    from starlette.responses import HTMLResponse

    env: jinja2.Environment = request.app.state.templates
    principal = request.scope.get(PRINCIPAL_KEY)
    page = env.get_template(name).render(
        request=request,
        principal=principal,
        csrf=request.scope.get(CSRF_KEY, ""),
        nav=NAV,
        path=request.url.path,
        read_only=request.app.state.policy.read_only,
        can_act=principal is not None
        and principal.can_act
        and not request.app.state.policy.read_only,
        sign_in=not request.app.state.policy.open,
        **context,
    )
    return HTMLResponse(page, status_code=status)


def error_page(request: Request, exc: BaseException) -> Response:
    status = status_for(exc)
    return render(request, "error.html", status=status, status_code=status, message=error_line(exc))
