"""`awa serve` pages and admin API read the database through the client and act through it."""

from __future__ import annotations

import logging
import re

import psycopg
import pytest

import awa_cli as awa
from tests.helpers import job_row
from tests.integration.serve.helpers import (
    audit_rows,
    AS_OPERATOR,
    AS_VIEWER,
    OPERATOR_TOKEN,
    serve,
    session_csrf,
)
from tests.integration.test_callbacks_http import Hook, hook_app, park

pytestmark = [pytest.mark.integration]


def seed(dsn: str) -> dict[str, list[int]]:
    """Jobs in two queues and three states; returns their ids by label."""
    ids: dict[str, list[int]] = {"email": [], "reports": []}
    with psycopg.connect(dsn) as conn:
        for n in range(5):
            ids["email"].append(awa.insert(conn, {"n": n}, kind="send_email", queue="email").id)
        for n in range(3):
            ids["reports"].append(awa.insert(conn, {"n": n}, kind="report", queue="reports").id)
        conn.execute("UPDATE awa.jobs SET state = 'failed' WHERE id = %s", (ids["reports"][0],))
        conn.execute(
            "UPDATE awa.jobs SET state = 'completed', finalized_at = now() WHERE id = ANY(%s)",
            (ids["email"][:2],),
        )
    return ids


def test_stats_match_the_database(dsn: str) -> None:
    seed(dsn)
    with serve(dsn) as http:
        data = http.get("/api/stats", headers=AS_VIEWER).json()
        page = http.get("/", headers=AS_VIEWER).text
    assert data["total"] == 8
    assert data["totals"]["available"] == 5 and data["totals"]["completed"] == 2
    assert data["totals"]["failed"] == 1
    by_queue = {q["queue"]: q for q in data["queues"]}
    assert by_queue["email"]["counts"]["available"] == 3
    assert by_queue["reports"]["counts"]["failed"] == 1
    assert by_queue["email"]["oldest_available_age_seconds"] is not None
    assert re.search(r'<span class="num" id="total">8</span>', page)
    assert 'data-label="available">3</td>' in page  # the email queue's row


def test_job_list_filters_and_finds(dsn: str) -> None:
    ids = seed(dsn)
    with serve(dsn) as http:

        def listed(query: str) -> list[int]:
            response = http.get(f"/api/jobs?{query}", headers=AS_VIEWER)
            assert response.status_code == 200, response.text
            return [j["id"] for j in response.json()["jobs"]]

        assert listed("queue=email") == sorted(ids["email"], reverse=True)
        assert listed("kind=report&state=failed") == [ids["reports"][0]]
        assert listed("state=completed&queue=reports") == []
        assert http.get("/api/jobs?state=nope", headers=AS_VIEWER).status_code == 422
        assert http.get("/api/jobs?limit=abc", headers=AS_VIEWER).status_code == 422
        page = http.get("/jobs?queue=reports&state=failed", headers=AS_VIEWER).text
        assert f'href="/jobs/{ids["reports"][0]}"' in page
        assert f'href="/jobs/{ids["reports"][1]}"' not in page
        found = http.get(f"/jobs?id={ids['email'][3]}", headers=AS_VIEWER)
        assert found.status_code == 303 and found.headers["location"] == f"/jobs/{ids['email'][3]}"
        assert http.get("/jobs?id=12x", headers=AS_VIEWER).status_code == 422


def test_keyset_pagination_walks_every_job_once(dsn: str) -> None:
    with psycopg.connect(dsn) as conn:
        with conn.cursor() as cur:
            cur.execute(
                "INSERT INTO awa.jobs (kind, args) SELECT 'bulk', jsonb_build_object('n', g)"
                " FROM generate_series(1, 123) g"
            )
        all_ids = [r[0] for r in conn.execute("SELECT id FROM awa.jobs ORDER BY id DESC")]
    seen: list[int] = []
    with serve(dsn) as http:
        before = ""
        while True:
            data = http.get(f"/api/jobs?limit=50{before}", headers=AS_VIEWER).json()
            seen += [j["id"] for j in data["jobs"]]
            if data["next_before"] is None:
                break
            before = f"&before={data['next_before']}"
        page = http.get("/jobs", headers=AS_VIEWER).text
        older = re.search(r'<a href="(/jobs\?before=(\d+))" rel="next">', page)
        assert older and int(older[2]) == all_ids[49]
        second = http.get(older[1].replace("&amp;", "&"), headers=AS_VIEWER).text
    assert seen == all_ids
    assert f'href="/jobs/{all_ids[50]}"' in second and f'href="/jobs/{all_ids[49]}"' not in second


def test_job_page_and_api_actions(dsn: str, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="awa.audit")
    with psycopg.connect(dsn) as conn:
        job = awa.insert(conn, {"to": "ada@example.com"}, kind="send_email", metadata={"m": 1})
        conn.execute(
            "UPDATE awa.jobs SET errors = %s::jsonb, output = '{\"sent\": 0}' WHERE id = %s",
            (
                '[{"error": "SMTPError: <b>refused</b>", "attempt": 1, "at": "2026-12-01T00:00:00"}]',
                job.id,
            ),
        )
    with serve(dsn) as http:
        page = http.get(f"/jobs/{job.id}", headers=AS_VIEWER).text
        assert "ada@example.com" in page and "&#34;m&#34;: 1" in page
        assert "SMTPError: &lt;b&gt;refused&lt;/b&gt;" in page  # escaped, never markup
        assert "&#34;sent&#34;: 0" in page
        assert http.get("/jobs/999999", headers=AS_VIEWER).status_code == 404
        assert http.get("/api/jobs/999999", headers=AS_VIEWER).json() == {
            "error": "job 999999 not found"
        }
        cancelled = http.post(f"/api/jobs/{job.id}/cancel", headers=AS_OPERATOR)
        assert cancelled.status_code == 200 and cancelled.json()["state"] == "cancelled"
        again = http.post(f"/api/jobs/{job.id}/cancel", headers=AS_OPERATOR)
        assert again.status_code == 409 and "cannot be cancelled" in again.json()["error"]
        retried = http.post(
            f"/jobs/{job.id}/retry", data={"csrf": session_csrf(http, OPERATOR_TOKEN)}
        )
        assert (
            retried.status_code == 303
            and retried.headers["location"] == f"/jobs/{job.id}?done=retried"
        )
        assert "Done: retried" in http.get(retried.headers["location"]).text
    assert job_row(dsn, job.id).state == "available"
    lines = [r.getMessage() for r in caplog.records if r.name == "awa.audit"]
    assert f"action=audit actor=serve:otto verb=job.cancel target=job:{job.id} result=ok" in lines
    entries = audit_rows(dsn, detail=True, logins=True)
    target = f"job:{job.id}"
    assert entries[0] == ("serve:otto", "job.cancel", target, "ok", {})
    actor, action, where, result, detail = entries[1]
    assert (actor, action, where, result) == ("serve:otto", "job.cancel", target, "refused")
    assert detail["status"] == 409 and "cannot be cancelled" in detail["error"]
    assert entries[2][:4] == ("serve:otto", "login", "session", "ok")
    assert entries[3] == ("serve:otto", "job.retry", target, "ok", {})
    assert len(entries) == 4


def test_resolve_a_callback_from_the_job_page(dsn: str) -> None:
    app = hook_app([])
    parked = park(dsn, app, n=3)
    with serve(dsn, app) as http:
        csrf = session_csrf(http, OPERATOR_TOKEN)
        page = http.get(f"/jobs/{parked.id}").text
        assert str(parked.callback_id) in page and "Resolve callback" in page
        assert f"waiting on callback <code>{parked.callback_id}</code>" in page  # the timeline
        response = http.post(
            f"/jobs/{parked.id}/callback",
            data={"csrf": csrf, "action": "complete", "payload": '{"by": "hand"}'},
        )
        assert response.status_code == 303, response.text
        bad = http.post(f"/jobs/{parked.id}/callback", data={"csrf": csrf, "action": "complete"})
        assert bad.status_code == 404  # already resolved, as over HTTP
    row = job_row(dsn, parked.id)
    assert row.state == "completed" and row.callback_result == {"by": "hand"}
    with psycopg.connect(dsn) as conn:  # the app's follow-up spec ran with the resolution
        assert conn.execute("SELECT args FROM awa.jobs WHERE kind = 'notify'").fetchall() == [
            ({"n": 3},)
        ]
    assert Hook  # the trigger type, imported with the app


def test_readyz_reports_a_schema_that_is_not_current(dsn: str, fresh_dsn: str) -> None:
    with serve(dsn) as http:
        assert http.get("/readyz").json() == {"status": "ok"}
    with serve(fresh_dsn) as http:
        response = http.get("/readyz")
        assert http.get("/healthz").status_code == 200
    assert response.status_code == 503 and "0001_" in response.json()["error"]
    with serve("postgresql://nobody@127.0.0.1:1/none?connect_timeout=1") as http:
        down = http.get("/readyz")
    assert down.status_code == 503 and down.json()["error"] == "database unavailable"


def seed_history(dsn: str) -> tuple[int, int]:
    """A running job on its second attempt with progress, whose first attempt was retried and
    which produced a follow-up (metadata ``awa.trigger_id``, as the outcome core writes it)."""
    with psycopg.connect(dsn) as conn:
        job = awa.insert(conn, {"batch": 7}, kind="import_orders", queue="imports")
        conn.execute(
            "UPDATE awa.jobs SET state = 'running', attempt = 2, attempted_at = now(),"
            " attempted_by = 'host-a:11:1', progress = %s::jsonb, errors = %s::jsonb"
            " WHERE id = %s",
            (
                '{"percent": 60, "message": "copying <rows>", "checkpoint": {"offset": 600},'
                ' "at": "2026-12-01T10:00:00+00:00"}',
                '[{"error": "ConnectionError: reset", "attempt": 1, "terminal": false,'
                ' "at": "2026-12-01T09:59:00+00:00", "worker": "host-b:22:1",'
                ' "started_at": "2026-12-01T09:58:00+00:00"}]',
                job.id,
            ),
        )
        follow_up = awa.insert(
            conn,
            {"about": job.id},
            kind="notify_ops",
            queue="imports",
            metadata={"awa.trigger_id": job.id},
        )
    return job.id, follow_up.id


def test_job_page_shows_progress_attempts_and_follow_ups(dsn: str) -> None:
    job_id, follow_id = seed_history(dsn)
    with serve(dsn) as http:
        page = http.get(f"/jobs/{job_id}", headers=AS_VIEWER).text
        data = http.get(f"/api/jobs/{job_id}", headers=AS_VIEWER).json()
        follow_page = http.get(f"/jobs/{follow_id}", headers=AS_VIEWER).text
        follow_data = http.get(f"/api/jobs/{follow_id}", headers=AS_VIEWER).json()
    # The page: a bar at 60 % with the (escaped) message, both attempts, the follow-up link.
    assert '<progress max="100" value="60">' in page
    assert "copying &lt;rows&gt;" in page and "copying <rows>" not in page
    attempts = re.findall(r'<li class="attempt" data-attempt="(\d)">(.*?)</li>', page, re.S)
    assert [n for n, _ in attempts] == ["1", "2"]
    first, second = attempts[0][1], attempts[1][1]
    assert "host-b:22:1" in first and "retried" in first and "ConnectionError: reset" in first
    assert "host-a:11:1" in second and "running" in second
    assert f'<a href="/jobs/{follow_id}" data-follow-up="{follow_id}">' in page
    assert 'id="why-not-running"' not in page  # running: nothing holds it back
    # The follow-up's page links back to the job that produced it.
    assert f'<a href="/jobs/{job_id}" rel="up" data-trigger="{job_id}">' in follow_page
    assert 'id="progress"' not in follow_page and "data-follow-up" not in follow_page
    # The API: the row plus the timeline, as `awa job show --json` prints it.
    assert data["id"] == job_id and data["progress"]["percent"] == 60
    timeline = data["timeline"]
    assert [(a["attempt"], a["outcome"], a["worker"]) for a in timeline["attempts"]] == [
        (1, "retried", "host-b:22:1"),
        (2, "running", "host-a:11:1"),
    ]
    assert timeline["attempts"][0]["error"] == "ConnectionError: reset"
    assert timeline["follow_ups"] == [{"id": follow_id, "kind": "notify_ops", "state": "available"}]
    assert timeline["progress"]["message"] == "copying <rows>"
    assert data["why_not_running"] is None
    assert follow_data["timeline"]["trigger"] == {
        "id": job_id,
        "kind": "import_orders",
        "state": "running",
    }
    assert follow_data["why_not_running"] is None  # available, due, queue not paused


def test_a_job_in_a_paused_queue_says_why_it_is_not_running(dsn: str) -> None:
    with psycopg.connect(dsn) as conn:
        job = awa.insert(conn, {"n": 1}, kind="report", queue="reports")
        later = awa.insert(conn, {"n": 2}, kind="report", queue="email")
        conn.execute(
            "UPDATE awa.jobs SET run_at = now() + interval '1 hour' WHERE id = %s", (later.id,)
        )
    with awa.Client(dsn) as client:
        client.pause_queue("reports")
    with serve(dsn) as http:
        page = http.get(f"/jobs/{job.id}", headers=AS_VIEWER).text
        data = http.get(f"/api/jobs/{job.id}", headers=AS_VIEWER).json()
        scheduled = http.get(f"/api/jobs/{later.id}", headers=AS_VIEWER).json()
        scheduled_page = http.get(f"/jobs/{later.id}", headers=AS_VIEWER).text
    assert "Not running: queue paused." in page
    assert data["why_not_running"] == "queue paused"
    assert scheduled["why_not_running"].startswith("scheduled for ")
    assert f"Not running: {scheduled['why_not_running']}." in scheduled_page


def test_a_dead_lettered_follow_up_links_to_its_dead_letter_page(dsn: str) -> None:
    job_id, follow_id = seed_history(dsn)
    with psycopg.connect(dsn) as conn:
        conn.execute("UPDATE awa.jobs SET state = 'failed' WHERE id = %s", (follow_id,))
    with awa.Client(dsn) as client:
        assert client.move_failed_to_dlq(kind="notify_ops") == 1
    with serve(dsn) as http:
        page = http.get(f"/jobs/{job_id}", headers=AS_VIEWER).text
        data = http.get(f"/api/jobs/{job_id}", headers=AS_VIEWER).json()
    assert f'<a href="/dlq/{follow_id}" data-follow-up="{follow_id}">' in page
    assert data["timeline"]["follow_ups"] == [
        {"id": follow_id, "kind": "notify_ops", "state": "failed (dead letter)"}
    ]


def test_a_rescued_attempt_shows_its_reason(dsn: str) -> None:
    with psycopg.connect(dsn) as conn:
        job = awa.insert(conn, {"n": 1}, kind="report", queue="reports")
        conn.execute(
            "UPDATE awa.jobs SET state = 'retryable', attempt = 1, errors = %s::jsonb"
            " WHERE id = %s",
            ('[{"error": "heartbeat stale: worker presumed dead", "attempt": 1}]', job.id),
        )
    with serve(dsn) as http:
        page = http.get(f"/jobs/{job.id}", headers=AS_VIEWER).text
        data = http.get(f"/api/jobs/{job.id}", headers=AS_VIEWER).json()
    assert data["timeline"]["attempts"][0]["outcome"] == "rescued"
    reason = data["timeline"]["attempts"][0]["rescue_reason"]
    assert reason and f'<span class="flag">rescued: {reason}</span>' in page
