"""The queues, DLQ and periodic pages and their API (architecture §12): the data the database
holds, each action through the client, exactly one awa.audit_log row per action (the core's
in-transaction entry, never doubled by the serve's), 404 for an unknown target, 403 for a
viewer and in read-only mode."""

from __future__ import annotations

import asyncio

import psycopg
import pytest

import awa_cli as awa
from awa_cli.periodic import Schedule
from tests.integration.serve.helpers import (
    audit_rows,
    AS_OPERATOR,
    AS_VIEWER,
    OPERATOR_TOKEN,
    VIEWER_TOKEN,
    log_in,
    serve,
    session_csrf,
)

pytestmark = [pytest.mark.integration]

NIGHTLY = Schedule("nightly", "0 3 * * *", "report", {"day": "y"}, "Europe/Berlin")


def dead_letter(dsn: str, queue: str = "mail", kind: str = "send") -> int:
    """A failed job moved into the DLQ through the client (its id)."""
    with psycopg.connect(dsn) as conn:
        job = awa.insert(conn, {"to": "a@example.com"}, kind=kind, queue=queue)
        conn.execute(
            "UPDATE awa.jobs SET state = 'failed', attempt = 1, finalized_at = now(),"
            ' errors = \'[{"error": "boom", "attempt": 1}]\' WHERE id = %s',
            (job.id,),
        )
    with awa.Client(dsn) as client:
        assert client.move_failed_to_dlq(queue=queue, kind=kind) == 1
    return job.id


def store_schedule(dsn: str) -> None:
    async def main() -> None:
        async with awa.AsyncClient(dsn) as client:
            await client.core.register_schedules([NIGHTLY])
            await client.core.fire_periodic()

    asyncio.run(main())


def paused(dsn: str, queue: str) -> bool | None:
    with psycopg.connect(dsn) as conn:
        row = conn.execute("SELECT paused FROM awa.queues WHERE name = %s", (queue,)).fetchone()
    return None if row is None else bool(row[0])


def test_queues_pause_and_resume_audited_once(dsn: str) -> None:
    with psycopg.connect(dsn) as conn:
        awa.insert(conn, {}, kind="send", queue="mail")
        awa.insert(conn, {}, kind="send", queue="mail")
    with serve(dsn) as http:
        listed = http.get("/api/queues", headers=AS_OPERATOR).json()["queues"]
        mail = next(q for q in listed if q["queue"] == "mail")
        assert mail["paused"] is False and mail["counts"]["available"] == 2
        assert mail["oldest_available_age_seconds"] is not None

        response = http.post("/api/queues/mail/pause", headers=AS_OPERATOR)
        assert response.status_code == 200 and response.json()["paused"] is True
        assert paused(dsn, "mail") is True
        with psycopg.connect(dsn) as conn:
            assert conn.execute(
                "SELECT paused_by FROM awa.queues WHERE name = 'mail'"
            ).fetchone() == ("serve:otto",)
        assert audit_rows(dsn) == [("serve:otto", "queue.pause", "mail", "ok")]

        csrf = session_csrf(http, OPERATOR_TOKEN)
        page = http.get("/queues").text
        assert "paused" in page and 'action="/queues/mail/resume"' in page
        form = http.post("/queues/mail/resume", data={"csrf": csrf})
        assert form.status_code == 303 and form.headers["location"].startswith("/queues?done=")
        assert paused(dsn, "mail") is False
        assert audit_rows(dsn)[1:] == [("serve:otto", "queue.resume", "mail", "ok")]

        unknown = http.post("/api/queues/nope/pause", headers=AS_OPERATOR)
        assert unknown.status_code == 404 and unknown.json() == {"error": "queue 'nope' not found"}
        assert paused(dsn, "nope") is None  # nothing created
        assert audit_rows(dsn)[2:] == [("serve:otto", "queue.pause", "nope", "refused")]


def test_dlq_list_page_retry_and_purge(dsn: str) -> None:
    first, second = dead_letter(dsn), dead_letter(dsn, queue="reports", kind="report")
    with serve(dsn) as http:
        listed = http.get("/api/dlq", headers=AS_OPERATOR).json()
        assert [d["id"] for d in listed["dead_letters"]] == [second, first]
        assert listed["depth"] == {"total": 2, "queues": {"mail": 1, "reports": 1}}
        filtered = http.get("/api/dlq?queue=mail&limit=5", headers=AS_OPERATOR).json()
        assert [d["id"] for d in filtered["dead_letters"]] == [first]
        assert http.get("/api/dlq?limit=0", headers=AS_OPERATOR).status_code == 422
        one = http.get(f"/api/dlq/{first}", headers=AS_OPERATOR).json()
        assert one["dead_reason"] == "manual" and one["errors"][0]["error"] == "boom"
        assert one["dead_at"] and one["args"] == {"to": "a@example.com"}

        csrf = session_csrf(http, OPERATOR_TOKEN)
        page = http.get(f"/dlq/{first}").text
        assert "boom" in page and "a@example.com" in page and "Retry</button>" in page
        assert f'href="/dlq/{second}"' in http.get("/dlq").text
        retried = http.post(f"/dlq/{first}/retry", data={"csrf": csrf})
        assert retried.status_code == 303 and retried.headers["location"].startswith(
            f"/jobs/{first}?"
        )
        with psycopg.connect(dsn) as conn:
            assert conn.execute("SELECT state FROM awa.jobs WHERE id = %s", (first,)).fetchone()
        purged = http.post(f"/api/dlq/{second}/purge", headers=AS_OPERATOR)
        assert purged.status_code == 200 and purged.json() == {"purged": 1}
        assert http.get(f"/api/dlq/{second}", headers=AS_OPERATOR).status_code == 404
        missing = http.post(f"/api/dlq/{second}/purge", headers=AS_OPERATOR)
        assert missing.status_code == 404 and "not found" in missing.json()["error"]
        assert http.post(f"/api/dlq/{second}/retry", headers=AS_OPERATOR).status_code == 404
    served = audit_rows(dsn)
    assert served == [
        ("serve:otto", "dlq.retry", str(first), "ok"),
        ("serve:otto", "dlq.purge", f"id={second}", "ok"),
        ("serve:otto", "dlq.purge", f"id={second}", "refused"),
        ("serve:otto", "dlq.retry", str(second), "failed"),  # the core's own entry
    ]


def test_periodic_list_pause_resume_trigger(dsn: str) -> None:
    store_schedule(dsn)
    with serve(dsn) as http:
        (listed,) = http.get("/api/periodic", headers=AS_OPERATOR).json()["periodic"]
        assert listed["name"] == "nightly" and listed["cron"] == "0 3 * * *"
        assert listed["timezone"] == "Europe/Berlin" and listed["paused"] is False
        assert listed["next_fire_at"] is not None

        assert (
            http.post("/api/periodic/nightly/pause", headers=AS_OPERATOR).json()["paused"] is True
        )
        csrf = session_csrf(http, OPERATOR_TOKEN)
        page = http.get("/periodic").text
        assert "0 3 * * *" in page and 'action="/periodic/nightly/resume"' in page
        resumed = http.post("/periodic/nightly/resume", data={"csrf": csrf})
        assert resumed.status_code == 303
        triggered = http.post("/api/periodic/nightly/trigger", headers=AS_OPERATOR)
        assert triggered.status_code == 200 and triggered.json()["kind"] == "report"
        job_id = triggered.json()["id"]
        missing = http.post("/api/periodic/nope/trigger", headers=AS_OPERATOR)
        assert missing.status_code == 404 and missing.json() == {
            "error": "periodic job 'nope' not found"
        }
    assert audit_rows(dsn) == [
        ("serve:otto", "cron.pause", "periodic:nightly", "ok"),
        ("serve:otto", "cron.resume", "periodic:nightly", "ok"),
        ("serve:otto", "cron.trigger", "periodic:nightly", "ok"),
        ("serve:otto", "cron.trigger", "periodic:nope", "refused"),
    ]
    with psycopg.connect(dsn) as conn:
        assert conn.execute("SELECT kind FROM awa.jobs WHERE id = %s", (job_id,)).fetchone() == (
            "report",
        )


def test_viewer_and_read_only_are_refused(dsn: str) -> None:
    store_schedule(dsn)
    dead = dead_letter(dsn)
    with psycopg.connect(dsn) as conn:
        awa.insert(conn, {}, kind="send", queue="mail")
    with serve(dsn) as http:
        for url in ("/api/queues/mail/pause", "/api/periodic/nightly/trigger"):
            assert http.post(url, headers=AS_VIEWER).status_code == 403, url
        log_in(http, VIEWER_TOKEN)
        for page in ("/queues", "/periodic", "/dlq", f"/dlq/{dead}"):
            main = http.get(page).text.split("</header>")[1]
            assert "nightly" in main or "mail" in main, page
            assert 'method="post"' not in main, page  # no action button for a viewer
    with serve(dsn, read_only=True) as http:
        response = http.post("/api/queues/mail/pause", headers=AS_OPERATOR)
        assert response.status_code == 403 and "read-only" in response.json()["error"]
    assert paused(dsn, "mail") is None


def test_an_action_records_one_row_however_the_client_is_set(dsn: str) -> None:
    """A client with its own actor (as the CLI's) still yields one row, the caller's."""
    with psycopg.connect(dsn) as conn:
        awa.insert(conn, {}, kind="send", queue="mail")
    with serve(dsn) as http:
        client: awa.AsyncClient = http.app.state.client  # type: ignore[attr-defined]
        client.core.actor = "cli:someone"
        assert http.post("/api/queues/mail/pause", headers=AS_OPERATOR).status_code == 200
        assert http.post("/api/jobs/999999/cancel", headers=AS_OPERATOR).status_code == 404
    assert audit_rows(dsn) == [
        ("serve:otto", "queue.pause", "mail", "ok"),
        ("serve:otto", "job.cancel", "job:999999", "refused"),
    ]
