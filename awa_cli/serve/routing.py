"""How a module of ``awa serve`` declares its routes and its read handlers, once.

``ROUTES = RouteTable()`` and ``@ROUTES.get(path)`` (or ``.post``) above a handler register it
where it is written; the app takes ``ROUTES.routes()``. ``@page(template)`` and
``@json_read`` make a handler of a read: what it loads is the template's context or the JSON
body, and an error from the client is the error page or ``{"error": ...}`` with its status.
"""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, TypeVar

from awa_cli.serve.common import error_page, json_failure, render

if TYPE_CHECKING:
    from starlette.requests import Request
    from starlette.responses import Response
    from starlette.routing import BaseRoute

Handler = Callable[["Request"], Awaitable["Response"]]
H = TypeVar("H", bound=Handler)


class RouteTable:
    """A module's routes in the order they are registered (each one method)."""

    def __init__(self) -> None:
        self._entries: list[tuple[str, Handler, str]] = []

    def add(self, path: str, handler: Handler, method: str) -> None:
        self._entries.append((path, handler, method))

    def get(self, path: str) -> Callable[[H], H]:
        return self._register(path, "GET")

    def post(self, path: str) -> Callable[[H], H]:
        return self._register(path, "POST")

    def _register(self, path: str, method: str) -> Callable[[H], H]:
        def register(handler: H) -> H:
            self.add(path, handler, method)
            return handler

        return register

    def routes(self) -> list[BaseRoute]:
        from starlette.routing import Route

        return [Route(path, handler, methods=[method]) for path, handler, method in self._entries]


def page(template: str) -> Callable[[Callable[[Request], Awaitable[dict[str, Any]]]], Handler]:
    """A page handler: ``template`` rendered with what the read loads, or the error page."""

    def wrap(load: Callable[[Request], Awaitable[dict[str, Any]]]) -> Handler:
        @functools.wraps(load)
        async def handler(request: Request) -> Response:
            try:
                context = await load(request)
            except Exception as exc:
                return error_page(request, exc)
            return render(request, template, **context)

        return handler

    return wrap


def json_read(load: Callable[[Request], Awaitable[Any]]) -> Handler:
    """An API read's handler: the body the read loads as JSON, or the one-line error."""

    @functools.wraps(load)
    async def handler(request: Request) -> Response:
        from starlette.responses import JSONResponse

        try:
            body = await load(request)
        except Exception as exc:
            return json_failure(exc)
        return JSONResponse(body)

    return handler
