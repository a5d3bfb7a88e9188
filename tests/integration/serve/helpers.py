"""Building the `awa serve` app in-process for the tests (Starlette's TestClient)."""

from __future__ import annotations

import contextlib
import re
from collections.abc import Iterator
from typing import Any

import psycopg
from starlette.testclient import TestClient

import awa_cli as awa
from awa_cli.serve.app import ServeSettings, build_app
from awa_cli.serve.auth import Token

VIEWER_TOKEN = "viewer-token-0123456789"
OPERATOR_TOKEN = "operator-token-0123456789"
CALLBACK_KEY = "callback-key-0123456789"
# A loopback Host with the port, as a browser on this machine sends it: `awa serve` refuses
# any other name (421; TestClient's default, "testserver", among them).
BASE_URL = "http://127.0.0.1:8477"
TOKENS = [
    Token("vera", "viewer", VIEWER_TOKEN.encode()),
    Token("otto", "operator", OPERATOR_TOKEN.encode()),
]


@contextlib.contextmanager
def serve(
    dsn: str, app: awa.App | None = None, *, tokens: bool = True, **settings: object
) -> Iterator[TestClient]:
    client = awa.AsyncClient(dsn, app=app)
    config = ServeSettings(
        tokens=TOKENS if tokens else [], callback_keys=[CALLBACK_KEY.encode()], **settings
    )
    app_ = build_app(client, config)
    with TestClient(app_, base_url=BASE_URL, follow_redirects=False) as http:
        yield http


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


AS_VIEWER = bearer(VIEWER_TOKEN)  # the headers of an API call as vera (viewer)
AS_OPERATOR = bearer(OPERATOR_TOKEN)  # the headers of an API call as otto (operator)


def csrf_of(http: TestClient) -> str:
    """The CSRF token of this browser (the client keeps the awa_csrf cookie it was given)."""
    response = http.get("/login")
    page = response.text if response.status_code == 200 else http.get("/").text
    match = re.search(r'<meta name="csrf-token" content="([0-9a-f]+)">', page)
    assert match, page[:500]
    return match.group(1)


def log_in(http: TestClient, token: str) -> None:
    response = http.post("/login", data={"token": token, "csrf": csrf_of(http), "next": "/"})
    assert response.status_code == 303, response.text
    assert "awa_session" in http.cookies


def session_csrf(http: TestClient, token: str) -> str:
    """Sign in with ``token`` (:func:`log_in`); the session's CSRF token, the one every form of
    the signed-in pages carries."""
    log_in(http, token)
    return csrf_of(http)


def audit_rows(
    dsn: str, *, detail: bool = False, logins: bool = False, like: str = "%"
) -> list[tuple[Any, ...]]:
    """The audit log, oldest first: ``(actor, action, target, result)``, and ``detail`` when
    asked; the logins left out unless ``logins``; only the actions ``LIKE`` ``like``."""
    columns = "actor, action, target, result, detail" if detail else "actor, action, target, result"
    skip = "" if logins else " AND action <> 'login'"
    with psycopg.connect(dsn) as conn:
        return conn.execute(
            f"SELECT {columns} FROM awa.audit_log WHERE action LIKE %s{skip} ORDER BY id", (like,)
        ).fetchall()
