"""The ``awa serve`` ASGI application: health, the callback routes, the dashboard and the API.

:func:`build_app` assembles it around one app-bound :class:`~awa_cli.client.AsyncClient`
(so follow-ups commit with each transition and hooks fire in this process) and wraps it in
the one :class:`~awa_cli.serve.auth.Guard`. ``callbacks_only`` leaves out everything but
``/healthz``, ``/readyz`` and ``/callbacks/*``.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from awa_cli.callbacks import asgi_app
from awa_cli.serve.audit import auditor
from awa_cli.serve.auth import Guard, Policy, Token
from awa_cli.serve.common import STATIC, error_line, json_error, template_env

if TYPE_CHECKING:
    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import Response

    from awa_cli.client import AsyncClient

log = logging.getLogger("awa.serve")


@dataclass(frozen=True)
class ServeSettings:
    """What ``awa serve`` resolved from ``[serve]`` and its flags (secrets already read)."""

    tokens: Sequence[Token] = ()
    callback_keys: Sequence[bytes] = ()
    read_only: bool = False
    callbacks_only: bool = False
    callback_base_url: str | None = None  # shown on the job page (default: this server's)
    close_client: bool = field(default=True)  # close the client when the server stops
    allowed_hosts: Sequence[str] = ()  # Host names answered besides loopback (architecture §18.4)
    secure_cookies: bool = False  # Secure, __Host- cookies even over plain http (a TLS proxy)
    forwarded_allow_ips: str | None = None  # proxies whose X-Forwarded-Proto/-For are trusted
    max_body: int = 1024 * 1024  # the largest request body read (callbacks, forms, JSON)
    configured_queues: Sequence[str] = ()  # [queues.NAME] of the config: known with no jobs


async def healthz(request: Request) -> Response:
    """The process is up (nothing else is checked)."""
    from starlette.responses import JSONResponse

    return JSONResponse({"status": "ok"})


async def metrics(request: Request) -> Response:
    """This process's counters in the Prometheus text format (viewer or above)."""
    from starlette.responses import PlainTextResponse

    policy: Policy = request.app.state.policy
    lines = [
        "# HELP awa_serve_login_failures_total Failed /login attempts (refused tokens).",
        "# TYPE awa_serve_login_failures_total counter",
        f"awa_serve_login_failures_total {policy.throttle.failures_total}",
        "# HELP awa_serve_login_throttled_total /login attempts refused by the throttle (429).",
        "# TYPE awa_serve_login_throttled_total counter",
        f"awa_serve_login_throttled_total {policy.throttle.throttled_total}",
        "# HELP awa_serve_sessions Login sessions this process holds.",
        "# TYPE awa_serve_sessions gauge",
        f"awa_serve_sessions {len(policy.sessions)}",
    ]
    return PlainTextResponse("\n".join(lines) + "\n", media_type="text/plain; version=0.0.4")


async def readyz(request: Request) -> Response:
    """The database answers on the pool requests use (503 while it cannot: the pool's
    broken connections are discarded on the way) and every migration this awa ships is
    applied."""
    from starlette.responses import JSONResponse

    client: AsyncClient = request.app.state.client
    try:
        pending = await client.check_ready()
    except Exception as exc:
        return JSONResponse({"status": "unavailable", "error": error_line(exc)}, status_code=503)
    if pending:
        return JSONResponse(
            {"status": "unavailable", "error": f"schema not current: {', '.join(pending)} pending"},
            status_code=503,
        )
    return JSONResponse({"status": "ok"})


async def _not_found(request: Request, exc: Exception) -> Response:
    from starlette.exceptions import HTTPException

    status = exc.status_code if isinstance(exc, HTTPException) else 500
    detail = str(exc.detail) if isinstance(exc, HTTPException) else "internal error"
    if request.url.path.startswith("/api/") or request.method != "GET":
        return json_error(status, detail)
    from awa_cli.serve.common import render

    return render(request, "error.html", status=status, status_code=status, message=detail)


def build_app(client: AsyncClient, settings: ServeSettings) -> Starlette:
    """The whole ``awa serve`` application (see the module docstring)."""
    from starlette.applications import Starlette
    from starlette.exceptions import HTTPException
    from starlette.middleware import Middleware
    from starlette.routing import BaseRoute, Mount, Route
    from starlette.staticfiles import StaticFiles

    from awa_cli.serve import api, batches, bulk, controls, dead_letters_bulk, fleet, pages, queues
    from awa_cli.serve import workflows

    policy = Policy(
        list(settings.tokens),
        read_only=settings.read_only,
        allowed_hosts=tuple(settings.allowed_hosts),
        secure_cookies=settings.secure_cookies,
        max_body=settings.max_body,
    )
    callbacks = asgi_app(
        client, list(settings.callback_keys), audit=auditor(client), max_body=settings.max_body
    )
    routes: list[BaseRoute] = [
        Route("/healthz", healthz, methods=["GET"]),
        Route("/readyz", readyz, methods=["GET"]),
        Mount("/callbacks", callbacks),
    ]
    if not settings.callbacks_only:
        routes.append(Route("/metrics", metrics, methods=["GET"]))
        for module in (pages, api, fleet, controls, queues, bulk, dead_letters_bulk, batches):
            routes += module.ROUTES.routes()
        routes += workflows.ROUTES.routes()
        routes.append(Mount("/static", StaticFiles(directory=str(STATIC)), name="static"))

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        yield
        if settings.close_client:
            await client.close()

    middleware = [Middleware(Guard, policy=policy, audit=auditor(client))]
    if settings.forwarded_allow_ips:  # outermost: the guard sees the proxy's scheme and client
        from uvicorn.middleware.proxy_headers import ProxyHeadersMiddleware

        middleware.insert(
            0, Middleware(ProxyHeadersMiddleware, trusted_hosts=settings.forwarded_allow_ips)
        )
    app = Starlette(
        routes=routes,
        middleware=middleware,
        exception_handlers={HTTPException: _not_found},
        lifespan=lifespan,
    )
    app.state.client = client
    app.state.policy = policy
    app.state.settings = settings
    app.state.templates = template_env()
    return app
