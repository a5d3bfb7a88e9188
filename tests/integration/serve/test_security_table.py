"""The security review's table of 64 attacks (2026-12), re-run where a request can say it.

Each test names the rows it re-runs; docs/security.md lists every row with the test that
covers it. The rows that failed in the review (H1, M1-M3, L1-L7, I1-I12) are in
test_security_review.py and tests/integration/test_callbacks_http.py.
"""

from __future__ import annotations

import time
import uuid

import psycopg
import pytest

import awa_cli as awa
from awa_cli.callbacks import SignatureError, sign, verify
from tests.integration.serve.helpers import (
    AS_OPERATOR,
    CALLBACK_KEY,
    OPERATOR_TOKEN,
    VIEWER_TOKEN,
    csrf_of,
    serve,
    session_csrf,
)

pytestmark = [pytest.mark.integration]


def insert_job(dsn: str) -> awa.JobRow:
    with psycopg.connect(dsn) as conn:
        return awa.insert(conn, {"n": 1}, kind="probe")


def test_rows_5_6_malformed_tokens_and_tokens_in_the_query_string(dsn: str) -> None:
    with serve(dsn) as http:
        for headers in (
            {"Authorization": f"Bearer {OPERATOR_TOKEN[:-1]}"},
            {"Authorization": f"Basic {OPERATOR_TOKEN}"},
            {"Authorization": OPERATOR_TOKEN},
        ):
            assert http.get("/api/stats", headers=headers).status_code == 401, headers
        assert (
            http.get("/api/stats", headers={"Authorization": f"bearer {VIEWER_TOKEN}"}).status_code
            == 200
        )
        for name in ("token", "access_token", "bearer", "auth"):
            assert http.get(f"/api/stats?{name}={OPERATOR_TOKEN}").status_code == 401


def test_row_7_other_methods_and_unauthenticated_head(dsn: str) -> None:
    job = insert_job(dsn)
    with serve(dsn) as http:
        auth = AS_OPERATOR
        for method in ("PUT", "DELETE", "PATCH"):
            response = http.request(method, f"/api/jobs/{job.id}/cancel", headers=auth)
            assert response.status_code == 405, method
        assert http.head("/api/stats").status_code == 401


def test_row_11_forwarded_headers_do_not_make_a_client_local(dsn: str) -> None:
    with serve(dsn) as http:
        for header in ("X-Forwarded-For", "X-Real-IP"):
            assert http.get("/api/stats", headers={header: "127.0.0.1"}).status_code == 401
        assert http.get("/api/stats", headers={"Forwarded": "for=127.0.0.1"}).status_code == 401


@pytest.mark.parametrize(
    "path",
    [
        "/callbacks/../api/jobs",
        "/static/../api/jobs",
        "//api/jobs",
        "/API/jobs",
        "/./api/jobs",
        "/healthz/../api/jobs",
        "/login/../api/jobs",
        "/api%2Fjobs",
    ],
)
def test_row_13_path_normalisation_never_skips_the_guard(dsn: str, path: str) -> None:
    with serve(dsn) as http:
        response = http.get(path)
    assert response.status_code in (303, 401, 404), (path, response.status_code)
    assert '"jobs"' not in response.text


def test_rows_15_16_18_cookie_flags_tampering_and_fixation(dsn: str) -> None:
    with serve(dsn) as http:
        csrf = csrf_of(http)
        http.cookies.set("awa_session", "attacker-chosen-session-id-0123456789", domain="127.0.0.1")
        good = http.post("/login", data={"token": OPERATOR_TOKEN, "csrf": csrf})
        cookie = good.headers["set-cookie"]
        assert "HttpOnly" in cookie and "SameSite=Strict" in cookie and "Path=/" in cookie
        assert "attacker-chosen" not in cookie  # a fresh id at login
        for value in ("", "garbage", "x" * 4096, "attacker-chosen-session-id-0123456789"):
            http.cookies.clear()
            http.cookies.set("awa_session", value, domain="127.0.0.1")
            assert http.get("/api/stats").status_code == 401, value[:20]


@pytest.mark.parametrize(
    "target",
    [
        "//evil.example",
        "https://evil.example",
        "/\\evil.example",
        "\\\\evil",
        "javascript:alert(1)",
        "///evil",
    ],
)
def test_row_21_no_open_redirect_after_login(dsn: str, target: str) -> None:
    with serve(dsn) as http:
        csrf = csrf_of(http)
        response = http.post("/login", data={"token": OPERATOR_TOKEN, "csrf": csrf, "next": target})
    assert response.status_code == 303 and response.headers["location"] == "/"


def test_rows_22_23_24_csrf_variants(dsn: str) -> None:
    job = insert_job(dsn)
    with serve(dsn) as http:
        csrf = session_csrf(http, OPERATOR_TOKEN)
        url = f"/jobs/{job.id}/cancel"
        assert http.post(url, data={"csrf": "0" * 64}).status_code == 403
        both = f"csrf={csrf}&csrf={'0' * 64}"
        form = {"content-type": "application/x-www-form-urlencoded"}
        assert http.post(url, content=both, headers=form).status_code == 403  # last one wins
        multipart = http.post(url, files={"csrf": ("x", b"x")})
        assert multipart.status_code == 403
        api = f"/api/jobs/{job.id}/cancel"
        plain = {"content-type": "text/plain"}
        assert http.post(api, content=b"{}", headers=plain).status_code == 403
        assert http.post(api, data={"a": "b"}).status_code == 403
        for origin in ("http://evil.example", "null"):
            headers = {"origin": origin, "content-type": "application/json"}
            assert http.post(api, content=b"{}", headers=headers).status_code == 403
        preflight = http.options(api, headers={"origin": "http://evil.example"})
        assert (
            preflight.status_code == 405 and "access-control-allow-origin" not in preflight.headers
        )


def test_row_25_login_needs_its_csrf_token(dsn: str) -> None:
    with serve(dsn) as http:
        csrf_of(http)
        assert http.post("/login", data={"token": OPERATOR_TOKEN}).status_code == 403
        assert (
            http.post("/login", data={"token": OPERATOR_TOKEN, "csrf": "0" * 64}).status_code == 403
        )


def test_rows_33_34_crlf_and_traversal(dsn: str) -> None:
    with serve(dsn) as http:
        crlf = http.get("/jobs%0d%0aSet-Cookie:%20x=1")
        assert crlf.status_code == 303 and "\r" not in crlf.headers["location"]
        assert "set-cookie: x=1" not in str(crlf.headers).lower()
        for path in (
            "/static/../app.py",
            "/static/..%2fapp.py",
            "/static/%2e%2e/app.py",
            "/static/..%5capp.py",
            "/static/%00",
        ):
            response = http.get(path)
            assert response.status_code in (303, 401, 404), path
            assert "build_app" not in response.text


def _signed(cid: str, action: str, raw: bytes, **headers: str) -> dict[str, str]:
    return {**sign(CALLBACK_KEY, cid, raw, action=action), **headers}


def test_rows_35_to_41_callback_headers_keys_and_bodies(dsn: str) -> None:
    cid = str(uuid.uuid4())
    url = f"/callbacks/{cid}/complete"
    now = int(time.time())
    with serve(dsn) as http:
        arabic = {"Awa-Timestamp": "\u0661\u0662\u0663", "Awa-Signature": "v2=" + "0" * 64}
        with pytest.raises(SignatureError, match="malformed"):  # not sendable as an HTTP header
            verify([CALLBACK_KEY], cid, b"", arabic)
        for ts in ("abc", "-5", "1.5", "1" * 13, "0x10"):
            headers = {"Awa-Timestamp": ts, "Awa-Signature": "v2=" + "0" * 64}
            assert http.post(url, headers=headers).status_code == 401, ts
        for sig in ("v1=" + "0" * 64, "V2=" + "0" * 64, "v2=", "v2=" + "0" * 64):
            headers = {"Awa-Timestamp": str(now), "Awa-Signature": sig}
            assert http.post(url, headers=headers).status_code == 401, sig
        for offset in (-301, -3600, 302, 86400):
            headers = sign(CALLBACK_KEY, cid, b"", now + offset)
            assert http.post(url, headers=headers).status_code == 401, offset
        other = str(uuid.uuid4())
        assert http.post(url, headers=_signed(other, "complete", b"")).status_code == 401
        assert (
            http.post(
                f"/callbacks/{cid.upper()}/complete", headers=_signed(cid, "complete", b"")
            ).status_code
            == 401
        )
        assert (
            http.post(url, content=b"{}x", headers=_signed(cid, "complete", b"{}")).status_code
            == 401
        )
        # Signed, but unknown: 404 only after the signature (no enumeration without a key).
        assert http.post(url, headers=_signed(cid, "complete", b"")).status_code == 404
        assert (
            http.post(
                "/callbacks/not-a-uuid/complete", headers=_signed("not-a-uuid", "complete", b"")
            ).status_code
            == 404
        )
        assert (
            http.post(
                f"/callbacks/{cid}/explode", headers=_signed(cid, "complete", b"")
            ).status_code
            == 404
        )
        for raw in (b"not json", b"[1]", b'"s"', b'{"nope": 1}', b"NaN", b"\xff\xfe"):
            response = http.post(url, content=raw, headers=_signed(cid, "complete", raw))
            assert response.status_code == 422, (raw, response.text)  # parsed before the lookup


def test_row_64_websockets_are_closed(dsn: str) -> None:
    from starlette.websockets import WebSocketDisconnect

    with serve(dsn) as http, pytest.raises(WebSocketDisconnect) as closed:
        with http.websocket_connect("/api/stats"):
            pass
    assert closed.value.code == 1008


def test_rows_1_2_public_routes_answer_and_the_rest_challenge(dsn: str) -> None:
    with serve(dsn) as http:
        for path in ("/healthz", "/login", "/static/awa.css"):
            assert http.get(path).status_code == 200, path
        assert http.get("/jobs").status_code == 303
        assert http.get("/jobs").headers["location"].startswith("/login?next=")
        assert http.get("/api/jobs").status_code == 401
        assert http.post("/api/queues/default/pause").status_code == 401


XSS = [
    "<script>window.__xss=1</script>",
    '"><img src=x onerror=window.__xss=2>',
    "<svg onload=window.__xss=3>",
]


def test_row_28_payloads_are_escaped_on_every_page(dsn: str) -> None:
    """Row 28 in-process (the browser tests run Chromium over the pages): payloads in the
    kind, queue, args, tags and metadata never reach a page as markup."""
    with psycopg.connect(dsn) as conn:
        job = awa.insert(
            conn,
            {"a": XSS[0], "b": XSS[1]},
            kind="k" + XSS[0],
            queue="q" + XSS[1],
            tags=[XSS[2]],
            metadata={"m": XSS[2]},
        )
    with serve(dsn, tokens=False) as http:
        for path in (f"/jobs/{job.id}", "/jobs", "/queues", "/", "/kinds", "/audit"):
            page = http.get(path).text
            for payload in XSS:
                assert payload not in page, (path, payload)
