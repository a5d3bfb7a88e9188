"""The security review of `awa serve` (2026-12), finding by finding (architecture §18.4).

Each test names the finding and the review's attack number; each fails on the code the review
attacked. The callback findings (M1, M2, I3, I4, I12) are in tests/integration/test_callbacks_http.py.
"""

from __future__ import annotations

import asyncio
import logging
import re
import time
from datetime import timedelta

import psycopg
import pytest
from starlette.testclient import TestClient

import awa_cli as awa
from awa_cli.commands.serve import access_line, check_allowed_hosts, read_tokens
from awa_cli.config import ConfigError, ServeConfig, ServeToken
from awa_cli.serve import api
from awa_cli.serve.auth import Token
from tests.helpers import login_role, readme_grants, scalar
from tests.integration.serve.helpers import (
    AS_OPERATOR,
    AS_VIEWER,
    OPERATOR_TOKEN,
    csrf_of,
    log_in,
    serve,
    session_csrf,
)

pytestmark = [pytest.mark.integration]

EVIL = "rebind.evil.example:8477"


def insert_job(dsn: str, **options: object) -> awa.JobRow:
    with psycopg.connect(dsn) as conn:
        return awa.insert(conn, {"n": 1}, kind="probe", **options)


def one_line_error(response: object) -> str:
    body = response.json()  # type: ignore[attr-defined]
    assert set(body) == {"error"} and "\n" not in body["error"]
    return str(body["error"])


# --- H1: the Host allow-list (DNS rebinding) --------------------------------------------------


def test_open_mode_refuses_a_foreign_host_for_reads_and_forms(dsn: str) -> None:
    """H1 (attack 12): a rebound page's Host is refused (421) before anything is read or
    done, for the JSON API and for a form carrying a CSRF token scraped from a page."""
    job = insert_job(dsn)
    with serve(dsn, tokens=False) as http:
        assert http.get(f"/api/jobs/{job.id}").status_code == 200
        token = csrf_of(http)
        read = http.get(f"/api/jobs/{job.id}", headers={"host": EVIL})
        assert read.status_code == 421 and "Host" in one_line_error(read)
        origin = {"host": EVIL, "origin": f"http://{EVIL}"}
        api_post = http.post("/api/queues/default/pause", json={}, headers=origin)
        form = http.post("/queues/default/resume", data={"csrf": token}, headers=origin)
        page = http.get("/jobs", headers={"host": EVIL})
        callback = http.post("/callbacks/x/complete", headers={"host": EVIL})
    for response in (api_post, form, page, callback):
        assert response.status_code == 421, response.text
    with psycopg.connect(dsn) as conn:
        paused = conn.execute("SELECT paused FROM awa.queues WHERE name = 'default'").fetchone()
    assert paused is None or paused[0] is False


@pytest.mark.parametrize(
    ("host", "status"),
    [
        ("127.0.0.1:8477", 200),
        ("localhost:8477", 200),
        ("[::1]:8477", 200),
        ("LOCALHOST:8477", 200),
        ("localhost:9999", 421),  # another port: another server
        ("localhost", 421),  # port 80
        ("localhost.:8477", 421),
        ("127.0.0.1.nip.io:8477", 421),
        ("", 421),
    ],
)
def test_open_mode_answers_loopback_names_with_the_port_only(
    dsn: str, host: str, status: int
) -> None:
    with serve(dsn, tokens=False) as http:
        assert http.get("/api/stats", headers={"host": host}).status_code == status


def test_token_mode_answers_the_allowed_hosts(dsn: str) -> None:
    """`[serve] allowed_hosts` names the public names (any port, or the one given)."""
    hosts = ("jobs.example.com", "ops.example.com:8443")
    with serve(dsn, allowed_hosts=hosts) as http:
        auth = AS_VIEWER
        for host, status in [
            ("jobs.example.com", 200),
            ("JOBS.example.com:443", 200),
            ("ops.example.com:8443", 200),
            ("ops.example.com:8444", 421),
            ("evil.example.com", 421),
        ]:
            assert http.get("/api/stats", headers={**auth, "host": host}).status_code == status
        # The health checks answer an orchestrator's probe by address, never a foreign name.
        assert http.get("/healthz", headers={"host": "10.1.2.3:8477"}).status_code == 200
        assert http.get("/healthz", headers={"host": EVIL}).status_code == 421


# --- M3: /login throttle, counted failures, token strength, audit retention --------------------


def _audit_count(dsn: str, action: str, result: str) -> int:
    query = "SELECT count(*) FROM awa.audit_log WHERE action = %s AND result = %s"
    return int(scalar(dsn, query, action, result))


def test_login_is_throttled_after_five_failures_and_failures_are_counted(dsn: str) -> None:
    """M3 (attack 27): 5 failures, then one try per 10 s (429, even with the right token);
    failures go to awa_serve_login_failures_total, not one audit row each."""
    refused_before = _audit_count(dsn, "login", "refused")
    with serve(dsn) as http:
        csrf = csrf_of(http)
        statuses = [
            http.post("/login", data={"token": f"wrong-{i}", "csrf": csrf}).status_code
            for i in range(7)
        ]
        right = http.post("/login", data={"token": OPERATOR_TOKEN, "csrf": csrf})
        assert right.status_code == 429 and int(right.headers["retry-after"]) <= 11
        policy = http.app.state.policy  # type: ignore[attr-defined]
        entry = policy.throttle._clients["testclient"]
        entry.last -= 10.5  # ten seconds later: one more try
        assert http.post("/login", data={"token": OPERATOR_TOKEN, "csrf": csrf}).status_code == 303
        metrics = http.get("/metrics").text
    assert statuses == [401] * 5 + [429, 429]
    assert "awa_serve_login_failures_total 5" in metrics
    assert "awa_serve_login_throttled_total 3" in metrics
    assert _audit_count(dsn, "login", "refused") == refused_before


def test_the_throttle_is_per_client(dsn: str) -> None:
    with serve(dsn) as http:
        policy = http.app.state.policy  # type: ignore[attr-defined]
        for _ in range(5):
            policy.throttle.failed("203.0.113.9")
        assert policy.throttle.wait("203.0.113.9") > 9
        log_in(http, OPERATOR_TOKEN)  # another client is not held back


@pytest.mark.parametrize("weak", ["a" * 16, "0123" * 8, "abababab-abababab"])
def test_weak_tokens_are_refused_at_start_naming_the_token_not_its_value(weak: str) -> None:
    """M3: a token of few distinct characters is refused; the error names the table and the
    variable, never the value."""
    serve_config = ServeConfig(tokens=(ServeToken("ops", "AWA_OPS", "operator"),))
    with pytest.raises(ConfigError) as caught:
        read_tokens(serve_config, {"AWA_OPS": weak})
    message = str(caught.value)
    assert "[serve.tokens.ops]" in message and "AWA_OPS" in message and weak not in message
    assert read_tokens(serve_config, {"AWA_OPS": "7f3a9c01d2e84b56"})[0].name == "ops"


def prune_audit_as(dsn: str, sweeper: str) -> tuple[int, set[int], int]:
    """Two entries, 91 and 89 days old; one sweep connected as ``sweeper``: what it pruned,
    which of the two are left, and the old one's id."""
    from awa_cli.maintenance import sweep_once

    with psycopg.connect(dsn) as conn:
        old, new = (
            conn.execute(
                "INSERT INTO awa.audit_log (at, actor, action, target, result)"
                " VALUES (now() - %s, 'test', 'retention.probe', 't', 'ok') RETURNING id",
                (age,),
            ).fetchone()[0]  # type: ignore[index]
            for age in (timedelta(days=91), timedelta(days=89))
        )

    async def sweep() -> int:
        async with awa.AsyncClient(sweeper) as client:
            await client.ensure_open()
            report = await sweep_once(
                client.core,
                heartbeat_staleness=60,
                completed_retention=86400,
                failed_retention=86400,
                audit_retention=90 * 86400,
            )
            return report.audit_pruned

    pruned = asyncio.run(sweep())
    with psycopg.connect(dsn) as conn:
        left = {
            r[0]
            for r in conn.execute("SELECT id FROM awa.audit_log WHERE id IN (%s, %s)", (old, new))
        }
    return pruned, left, old


def test_audit_retention_prunes_old_entries(dsn: str) -> None:
    """M3: `[maintenance] audit_retention` (90d by default) is applied by the sweep."""
    from awa_cli.config import MaintenanceConfig

    assert MaintenanceConfig().audit_retention == 90 * 86400
    pruned, left, old = prune_audit_as(dsn, dsn)
    assert pruned >= 1 and old not in left and len(left) == 1


def test_audit_retention_works_under_the_readme_worker_role(
    dsn: str, caplog: pytest.LogCaptureFixture
) -> None:
    """The README's least-privilege role has DELETE on awa.audit_log and no UPDATE: the prune
    used to lock its rows FOR UPDATE, which needs UPDATE, so it was refused and every sweep
    (every rescue_interval) logged a WARNING."""
    with login_role(dsn, "awa_worker", "pw", readme_grants()) as (_, url):
        with caplog.at_level(logging.WARNING, logger="awa.maintenance"):
            pruned, left, old = prune_audit_as(dsn, url)
    assert pruned >= 1 and old not in left and len(left) == 1
    assert "audit retention skipped" not in caplog.text


# --- L1, L2, L3, L7: sessions, CSRF, cookies, caching ----------------------------------------


def test_logout_ends_the_session_on_the_server(dsn: str) -> None:
    """L1 (attack 19): the cookie replayed after logout is worthless."""
    with serve(dsn) as http:
        csrf = session_csrf(http, OPERATOR_TOKEN)
        stolen = http.cookies["awa_session"]
        assert http.post("/logout", data={"csrf": csrf}).status_code == 303
        http.cookies.clear()
        http.cookies.set("awa_session", stolen, domain="127.0.0.1")
        assert http.get("/").status_code == 303
        assert http.get("/api/stats").status_code == 401


def test_a_session_ends_after_its_idle_timeout(dsn: str) -> None:
    with serve(dsn) as http:
        log_in(http, OPERATOR_TOKEN)
        assert http.get("/api/stats").status_code == 200
        http.app.state.policy.sessions.idle = 0.05  # type: ignore[attr-defined]
        time.sleep(0.1)
        assert http.get("/api/stats").status_code == 401


def test_the_csrf_token_is_bound_to_the_session(dsn: str) -> None:
    """L2 (attack 26): a planted awa_csrf cookie with the attacker's matching token is refused
    for a signed-in browser; the session's own token passes."""
    job = insert_job(dsn)
    with serve(dsn) as attacker, serve(dsn) as victim:
        seed_token = csrf_of(attacker)  # the (seed, token) pair anyone can mint at /login
        seed = attacker.cookies["awa_csrf"]
        log_in(victim, OPERATOR_TOKEN)
        victim.cookies.set("awa_csrf", seed, domain="127.0.0.1")
        tossed = victim.post(f"/jobs/{job.id}/cancel", data={"csrf": seed_token})
        assert tossed.status_code == 403, tossed.text
        own = victim.post(f"/jobs/{job.id}/cancel", data={"csrf": csrf_of(victim)})
        assert own.status_code == 303, own.text


def _login_cookie(http: TestClient, **headers: str) -> str:
    page = http.get("/login", headers=headers)
    token = re.search(r'name="csrf-token" content="([0-9a-f]+)"', page.text)
    assert token, page.text[:300]
    # A Secure cookie is not sent back over the test's plain http: the browser's copy, by hand.
    seed = page.headers["set-cookie"].split(";", 1)[0]
    data = {"token": OPERATOR_TOKEN, "csrf": token.group(1)}
    http.cookies.clear()
    response = http.post("/login", data=data, headers={**headers, "cookie": seed})
    assert response.status_code == 303, response.text
    return next(c for c in response.headers.get_list("set-cookie") if "awa_session=" in c)


def test_cookies_are_secure_with_the_host_prefix_behind_tls(dsn: str) -> None:
    """L3 (attack 20): `secure_cookies`, or a trusted proxy that says https."""
    with serve(dsn) as http:
        plain = _login_cookie(http, **{"x-forwarded-proto": "https"})  # no proxy trusted
    assert plain.startswith("awa_session=") and "Secure" not in plain
    with serve(dsn, secure_cookies=True) as http:
        forced = _login_cookie(http)
        session = forced.split(";", 1)[0]
        assert http.get("/api/stats", headers={"cookie": session}).status_code == 200
        assert http.get("/api/stats", headers={"cookie": session[7:]}).status_code == 401
    assert forced.startswith("__Host-awa_session=") and "; Secure" in forced
    with serve(dsn, forwarded_allow_ips="*") as http:
        proxied = _login_cookie(http, **{"x-forwarded-proto": "https"})
        hsts = http.get("/login", headers={"x-forwarded-proto": "https"}).headers
    assert proxied.startswith("__Host-awa_session=") and "; Secure" in proxied
    assert "max-age" in hsts["strict-transport-security"]


def test_authenticated_responses_are_no_store(dsn: str) -> None:
    """L7: every response but /static/* says Cache-Control: no-store."""
    job = insert_job(dsn)
    with serve(dsn) as http:
        auth = AS_VIEWER
        for path in ("/api/jobs", f"/api/jobs/{job.id}", f"/jobs/{job.id}", "/"):
            assert http.get(path, headers=auth).headers["cache-control"] == "no-store", path
        assert http.get("/static/awa.css").headers.get("cache-control") != "no-store"


# --- L4, L5, L6 --------------------------------------------------------------------------------


def test_a_crafted_queue_name_stays_one_path_segment(dsn: str) -> None:
    """L4 (attack 30): the Pause form of a queue named ../periodic/nightly posts to that queue's
    own (encoded) route, never to /periodic/nightly/pause."""
    insert_job(dsn, queue="../periodic/nightly")
    with serve(dsn, tokens=False) as http:
        page = http.get("/queues").text
        assert 'action="/queues/..%2Fperiodic%2Fnightly/pause"' in page
        assert "/queues/../periodic" not in page


def test_read_only_on_a_public_host_without_tokens_says_so() -> None:
    """L5 (attack 10)."""
    line = access_line("0.0.0.0", 8477, tokens=0, callbacks_only=False)
    assert "every client that can reach 0.0.0.0:8477 can read all job data" in line
    assert "this host only" in access_line("127.0.0.1", 8477, tokens=0, callbacks_only=False)


def test_list_pages_are_bounded_in_bytes(dsn: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """L6 (attack 52): a page stops at PAGE_BYTES with a cursor; paging on returns every job.
    I1 (attack 54): ?limit=1000 is the documented maximum and answers 200."""
    monkeypatch.setattr(api, "PAGE_BYTES", 60_000)
    with psycopg.connect(dsn) as conn:
        ids = {awa.insert(conn, {"blob": "x" * 10_000}, kind="bigargs").id for _ in range(12)}
    with serve(dsn, tokens=False) as http:
        first = http.get("/api/jobs?kind=bigargs&limit=1000")
        assert first.status_code == 200
        assert http.get("/api/jobs?limit=1001").status_code == 422
        seen = [j["id"] for j in first.json()["jobs"]]
        assert 5 <= len(seen) <= 7 and len(first.content) < 80_000
        cursor = first.json()["next_before"]
        while cursor is not None:
            page = http.get(f"/api/jobs?kind=bigargs&limit=1000&before={cursor}").json()
            seen += [j["id"] for j in page["jobs"]]
            cursor = page["next_before"]
    assert set(seen) == ids and len(seen) == len(ids)


# --- I-items -------------------------------------------------------------------------------


def test_ids_beyond_bigint_and_nul_bytes_are_not_500(dsn: str) -> None:
    """I2 (attack 32)."""
    huge = "99999999999999999999999"
    with serve(dsn, tokens=False) as http:
        for path in (f"/api/jobs/{huge}", f"/jobs/{huge}", f"/api/dlq/{huge}"):
            assert http.get(path).status_code == 404, path
        nul = http.get("/api/jobs?kind=%00")
        assert nul.status_code == 400 and one_line_error(nul)


def test_callback_urls_never_reflect_the_host_header(dsn: str) -> None:
    """I5: with no callback_base_url, the job page shows this server's own address."""
    from tests.integration.test_callbacks_http import hook_app, park

    parked = park(dsn, hook_app([]))
    with serve(dsn, tokens=False) as http:
        page = http.get(f"/jobs/{parked.id}", headers={"host": "localhost:8477"}).text
    assert f"http://127.0.0.1:8477/callbacks/{parked.callback_id}/complete" in page
    assert "localhost:8477/callbacks" not in page


def test_bidi_characters_are_shown_escaped(dsn: str) -> None:
    """I6: U+202E in a queue name reaches the page as visible text, not as a control."""
    job = insert_job(dsn, queue="q\u202eevil")
    with serve(dsn, tokens=False) as http:
        page = http.get(f"/jobs/{job.id}").text
    assert "\u202e" not in page and "q\\u202eevil" in page


def test_token_repr_hides_the_secret() -> None:
    """I8."""
    assert "s3cret" not in repr(Token("ops", "operator", b"s3cret-0123456789"))


def test_csp_sets_base_uri_and_object_src(dsn: str) -> None:
    """I9."""
    with serve(dsn, tokens=False) as http:
        csp = http.get("/").headers["content-security-policy"]
    assert "base-uri 'none'" in csp and "object-src 'none'" in csp


def test_bearer_form_posts_are_bounded(dsn: str) -> None:
    """I10 (attack 56): an operator's bearer form post over max_body answers 413."""
    job = insert_job(dsn)
    with serve(dsn, max_body=4096) as http:
        big = http.post(
            f"/jobs/{job.id}/cancel",
            content=b"x=" + b"y" * 10_000,
            headers={**AS_OPERATOR, "content-type": "application/x-www-form-urlencoded"},
        )
    assert big.status_code == 413


def test_application_jsonp_is_not_json(dsn: str) -> None:
    """I11: only the exact media type application/json stands in for a CSRF token."""
    with serve(dsn, tokens=False) as http:
        jsonp = http.post(
            "/api/queues/default/pause",
            content=b"{}",
            headers={"content-type": "application/jsonp"},
        )
        json_ok = http.post(
            "/api/queues/default/resume",
            content=b"{}",
            headers={"content-type": "application/json; charset=utf-8"},
        )
    assert jsonp.status_code == 403
    assert json_ok.status_code in (200, 404)


def test_allowed_hosts_without_tokens_is_refused_at_start() -> None:
    """H1: with no tokens only loopback names are answered; naming public hosts needs tokens
    (or a read-only or callbacks-only server)."""
    config = ServeConfig(allowed_hosts=("jobs.example.com",))
    with pytest.raises(ConfigError, match=r"\[serve\] allowed_hosts: needs \[serve\] tokens"):
        check_allowed_hosts(config, has_tokens=False, read_only=False)
    check_allowed_hosts(config, has_tokens=True, read_only=False)
    check_allowed_hosts(config, has_tokens=False, read_only=True)


def test_allowed_hosts_are_checked_in_the_config(tmp_path: object) -> None:
    from pathlib import Path

    from awa_cli.config import load_config

    path = Path(str(tmp_path)) / "awa.toml"
    path.write_text('[serve]\nallowed_hosts = ["jobs.example.com:8443", "Ops.Example.com"]\n')
    assert load_config(path, explicit=True).serve.allowed_hosts == (
        "jobs.example.com:8443",
        "ops.example.com",
    )
    path.write_text('[serve]\nallowed_hosts = ["http://jobs.example.com/"]\n')
    with pytest.raises(ConfigError, match=r"allowed_hosts\[0\]"):
        load_config(path, explicit=True)
