"""`awa serve` auth (architecture §12): tokens, sessions, roles, CSRF, --read-only — applied once.

The walk over ``app.routes`` finds every mutating route, so a route added later without the
guard's protection fails here.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterator

import psycopg
import pytest
from starlette.routing import Route
from starlette.testclient import TestClient

import awa_cli as awa
from awa_cli.serve.auth import NON_ACTION_POSTS
from tests.helpers import job_row
from tests.integration.serve.helpers import (
    AS_OPERATOR,
    AS_VIEWER,
    CALLBACK_KEY,
    OPERATOR_TOKEN,
    VIEWER_TOKEN,
    bearer,
    csrf_of,
    log_in,
    serve,
    session_csrf,
)

pytestmark = [pytest.mark.integration]

KNOWN_ACTIONS = {
    "/jobs/{job_id:int}/cancel",
    "/jobs/{job_id:int}/retry",
    "/jobs/{job_id:int}/callback",
    "/api/jobs/{job_id:int}/cancel",
    "/api/jobs/{job_id:int}/retry",
    "/jobs/bulk",
    "/api/jobs/bulk/{verb}",
    "/dlq/bulk",
    "/api/dlq/bulk/{verb}",
    *(
        prefix + path
        for prefix in ("", "/api")
        for path in (
            "/queues/{queue}/pause",
            "/queues/{queue}/resume",
            "/dlq/{job_id:int}/retry",
            "/dlq/{job_id:int}/purge",
            "/periodic/{name}/pause",
            "/periodic/{name}/resume",
            "/periodic/{name}/trigger",
        )
    ),
}


def insert_job(dsn: str) -> awa.JobRow:
    with psycopg.connect(dsn) as conn:
        return awa.insert(conn, {"n": 1}, kind="probe")


def mutating_routes(http: TestClient) -> list[str]:
    found = []
    for route in http.app.routes:  # type: ignore[attr-defined]
        if (
            isinstance(route, Route)
            and route.methods
            and route.methods & {"POST", "PUT", "PATCH", "DELETE"}
        ):
            if route.path not in NON_ACTION_POSTS:
                found.append(route.path)
    return found


def url_for(path: str, job_id: int) -> str:
    return re.sub(r"\{(\w+)(:\w+)?\}", lambda m: str(job_id) if m[1] == "job_id" else "x", path)


def form_post(http: TestClient, url: str, csrf: str | None, **headers: str) -> object:
    data = {"action": "complete"} | ({"csrf": csrf} if csrf is not None else {})
    return http.post(url, data=data, headers=headers)


@pytest.fixture
def http(dsn: str) -> Iterator[TestClient]:
    with serve(dsn) as client:
        yield client


def test_every_mutating_route_refuses_the_unauthenticated_and_viewers(
    dsn: str, http: TestClient
) -> None:
    job = insert_job(dsn)
    routes = mutating_routes(http)
    assert set(routes) >= KNOWN_ACTIONS, routes
    for path in routes:
        url = url_for(path, job.id)
        anonymous = form_post(http, url, None)
        assert anonymous.status_code == 401, (path, anonymous.status_code)
        as_viewer = http.post(url, headers=AS_VIEWER | {"content-type": "application/json"})
        assert as_viewer.status_code == 403, (path, as_viewer.status_code)
        assert job_row(dsn, job.id).state == "available", path

    with serve(dsn) as browser:  # a viewer's browser session, with a valid CSRF token
        csrf = session_csrf(browser, VIEWER_TOKEN)
        for path in routes:
            response = form_post(browser, url_for(path, job.id), csrf)
            assert response.status_code == 403, (path, response.status_code)
    assert job_row(dsn, job.id).state == "available"


def test_an_operator_session_needs_the_csrf_token(dsn: str, http: TestClient) -> None:
    job = insert_job(dsn)
    log_in(http, OPERATOR_TOKEN)
    routes = mutating_routes(http)
    for path in routes:
        url = url_for(path, job.id)
        assert form_post(http, url, None).status_code == 403, path
        assert form_post(http, url, "0" * 64).status_code == 403, path
    assert job_row(dsn, job.id).state == "available"
    # The positive control: with the token the same session acts.
    response = form_post(http, f"/jobs/{job.id}/cancel", csrf_of(http))
    assert response.status_code == 303 and job_row(dsn, job.id).state == "cancelled"


def test_a_cross_site_origin_is_refused_without_the_csrf_token(dsn: str) -> None:
    job = insert_job(dsn)
    with serve(dsn, tokens=False) as http:
        evil = {"origin": "https://evil.example"}
        response = http.post(f"/api/jobs/{job.id}/cancel", json={}, headers=evil)
        assert response.status_code == 403 and job_row(dsn, job.id).state == "available"
        # A valid token proves the page was ours, even behind a proxy that rewrote Host.
        response = form_post(
            http, f"/jobs/{job.id}/cancel", csrf_of(http), origin="https://awa.example"
        )
        assert response.status_code == 303 and job_row(dsn, job.id).state == "cancelled"


def test_operator_bearer_acts_without_csrf(dsn: str, http: TestClient) -> None:
    job = insert_job(dsn)
    response = http.post(f"/api/jobs/{job.id}/cancel", headers=AS_OPERATOR)
    assert response.status_code == 200 and response.json()["state"] == "cancelled"
    response = http.post(f"/api/jobs/{job.id}/retry", headers=AS_OPERATOR)
    assert response.status_code == 200 and response.json()["state"] == "available"
    assert (
        http.post(
            f"/api/jobs/{job.id}/cancel", headers=bearer("wrong-token-0123456789")
        ).status_code
        == 401
    )


def test_reading_needs_a_token_or_a_session(dsn: str, http: TestClient) -> None:
    job = insert_job(dsn)
    page = http.get("/jobs?state=available")
    assert page.status_code == 303
    assert page.headers["location"] == "/login?next=%2Fjobs%3Fstate%3Davailable"
    api = http.get("/api/jobs")
    assert api.status_code == 401 and api.headers["www-authenticate"] == "Bearer"
    assert http.get(f"/api/jobs/{job.id}", headers=AS_VIEWER).json()["id"] == job.id
    assert http.get("/api/stats", headers=bearer("Bearer nonsense")).status_code == 401
    for public in ("/healthz", "/readyz", "/static/awa.css"):
        assert http.get(public).status_code == 200, public
    log_in(http, VIEWER_TOKEN)
    assert "vera · viewer" in http.get("/").text
    assert "Cancel</button>" not in http.get(f"/jobs/{job.id}").text  # no actions for viewers


def test_login_form(dsn: str, http: TestClient) -> None:
    csrf = csrf_of(http)
    wrong = http.post("/login", data={"token": "nope", "csrf": csrf})
    assert wrong.status_code == 401 and "not valid" in wrong.text
    no_csrf = http.post("/login", data={"token": OPERATOR_TOKEN})
    assert no_csrf.status_code == 403
    good = http.post(
        "/login", data={"token": OPERATOR_TOKEN, "csrf": csrf, "next": "//evil.example/x"}
    )
    assert good.status_code == 303 and good.headers["location"] == "/"  # no open redirect
    cookie = good.headers["set-cookie"]
    assert "HttpOnly" in cookie and "SameSite=Strict" in cookie
    assert http.get("/").status_code == 200
    # One character changed well inside the value: not the last, whose low bits base64 may
    # ignore, and never to itself (a cookie ending in "00" tampered as [:-2] + "00" was
    # still valid, about once in a thousand runs).
    value = http.cookies["awa_session"]
    i = len(value) - 5
    tampered = value[:i] + ("A" if value[i] != "A" else "B") + value[i + 1 :]
    http.cookies.clear()
    http.cookies.set("awa_session", tampered, domain="127.0.0.1")
    assert http.get("/").status_code == 303
    log_in(http, OPERATOR_TOKEN)
    assert http.post("/logout", data={"csrf": csrf_of(http)}).status_code == 303
    assert http.get("/").status_code == 303


def test_tokens_never_reach_the_logs(
    dsn: str, http: TestClient, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    job = insert_job(dsn)
    log_in(http, OPERATOR_TOKEN)
    http.post("/login", data={"token": VIEWER_TOKEN + "x", "csrf": csrf_of(http)})
    http.post(f"/api/jobs/{job.id}/cancel", headers=AS_OPERATOR)
    http.get("/api/jobs", headers=AS_VIEWER)
    text = "\n".join(r.getMessage() for r in caplog.records)
    assert "action=audit actor=serve:otto verb=job.cancel" in text
    for secret in (OPERATOR_TOKEN, VIEWER_TOKEN, CALLBACK_KEY, http.cookies["awa_session"]):
        assert secret not in text


def test_read_only_refuses_every_action(dsn: str) -> None:
    job = insert_job(dsn)
    with serve(dsn, read_only=True) as http:
        for path in mutating_routes(http):
            response = http.post(url_for(path, job.id), headers=AS_OPERATOR)
            assert response.status_code == 403 and "read-only" in response.json()["error"], path
        assert http.get("/api/jobs", headers=AS_OPERATOR).status_code == 200
    with serve(dsn, tokens=False, read_only=True) as http:
        for path in mutating_routes(http):
            assert form_post(http, url_for(path, job.id), csrf_of(http)).status_code == 403, path
        assert http.get("/").status_code == 200
    assert job_row(dsn, job.id).state == "available"


def test_without_tokens_the_local_browser_acts_with_csrf(dsn: str) -> None:
    job = insert_job(dsn)
    with serve(dsn, tokens=False) as http:
        assert http.get("/login").status_code == 303  # nothing to sign in to
        assert "anonymous · operator" in http.get("/").text
        assert form_post(http, f"/jobs/{job.id}/cancel", None).status_code == 403
        # A form post from another site carries no token: refused. A JSON post cannot be sent
        # cross-site without a preflight, so curl on this host may post JSON.
        assert (
            http.post(
                f"/api/jobs/{job.id}/cancel", content=b"x=1", headers={"content-type": "text/plain"}
            ).status_code
            == 403
        )
        assert job_row(dsn, job.id).state == "available"
        response = http.post(f"/api/jobs/{job.id}/cancel", json={})
        assert response.status_code == 200 and response.json()["state"] == "cancelled"
        response = form_post(http, f"/jobs/{job.id}/retry", csrf_of(http))
        assert response.status_code == 303 and job_row(dsn, job.id).state == "available"


def test_callbacks_only_serves_nothing_else(dsn: str) -> None:
    with serve(dsn, callbacks_only=True) as http:
        assert http.get("/healthz").status_code == 200
        assert http.get("/", headers=AS_OPERATOR).status_code == 404
        assert http.get("/api/jobs", headers=AS_OPERATOR).status_code == 404
        assert http.post("/callbacks/x/complete").status_code == 401  # signed routes are there


def test_security_headers(dsn: str, http: TestClient) -> None:
    response = http.get("/login")
    assert "default-src 'self'" in response.headers["content-security-policy"]
    assert response.headers["x-frame-options"] == "DENY"
    assert http.get("/healthz").headers["x-content-type-options"] == "nosniff"
