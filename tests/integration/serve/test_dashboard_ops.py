"""Issue 28, the dashboard's side: pausing a configured queue with no jobs (D13), the overview's
paused queues and DLQ depth (D13), confirmation before a purge and before every bulk action
(D22), the audit detail (D10), queues that drop off once gone (D28), bulk actions from the
jobs list and the queue page, through the real app and a real database. Every action is
audited once, under the caller, by the outcome core."""

from __future__ import annotations

import re
from typing import Any
from urllib.parse import urlencode

import psycopg
import pytest

import awa_cli as awa
from tests.integration.serve.helpers import (
    audit_rows,
    AS_OPERATOR,
    AS_VIEWER,
    OPERATOR_TOKEN,
    serve,
    session_csrf,
)
from tests.integration.serve.test_controls import dead_letter

pytestmark = [pytest.mark.integration]

FORM = {"Content-Type": "application/x-www-form-urlencoded"}


def add(
    dsn: str, n: int, *, state: str = "available", queue: str = "mail", **extra: Any
) -> list[int]:
    """``n`` jobs of kind ``send`` in ``queue``, then set to ``state`` (finished ones with an
    error and a finalized_at), ``tags`` when given."""
    with psycopg.connect(dsn) as conn:
        ids = [
            awa.insert(conn, {"to": f"u{i}@example.com"}, kind="send", queue=queue, **extra).id
            for i in range(n)
        ]
        if state != "available":
            conn.execute(
                "UPDATE awa.jobs SET state = %s::awa.job_state, attempt = 1,"
                " finalized_at = CASE WHEN %s IN ('completed', 'failed', 'cancelled')"
                " THEN now() END,"
                ' errors = \'[{"error": "SMTPError: 550 mailbox unavailable", "attempt": 1}]\''
                " WHERE id = ANY (%s)",
                (state, state, ids),
            )
    return ids


def states(dsn: str, ids: list[int]) -> dict[int, str]:
    with psycopg.connect(dsn) as conn:
        rows = conn.execute(
            "SELECT id, state::text FROM awa.jobs WHERE id = ANY (%s)", (ids,)
        ).fetchall()
    return {int(i): str(s) for i, s in rows}


# -- D13: pausing a queue the config names, before it has any job ---------------------------
def test_a_configured_queue_with_no_jobs_can_be_paused(dsn: str) -> None:
    with serve(dsn, configured_queues=("acc",)) as http:
        response = http.post("/api/queues/acc/pause", headers=AS_OPERATOR)
        assert response.status_code == 200, response.text
        assert response.json()["queue"] == "acc" and response.json()["paused"] is True
        with awa.Client(dsn) as client:
            assert client.paused_queues() == ["acc"]
        listed = {
            q["queue"]: q["paused"]
            for q in http.get("/api/queues", headers=AS_OPERATOR).json()["queues"]
        }
        assert listed["acc"] is True
        assert http.post("/api/queues/acc/resume", headers=AS_OPERATOR).json()["paused"] is False
        # A name nobody knows is still 404: a typo pauses nothing.
        missing = http.post("/api/queues/acx/pause", headers=AS_OPERATOR)
        assert missing.status_code == 404 and missing.json() == {"error": "queue 'acx' not found"}
    assert [r[:4] for r in audit_rows(dsn, detail=True)] == [
        ("serve:otto", "queue.pause", "acc", "ok"),
        ("serve:otto", "queue.resume", "acc", "ok"),
        ("serve:otto", "queue.pause", "acx", "refused"),
    ]


def test_the_queue_page_lists_a_configured_queue_with_no_jobs(dsn: str) -> None:
    with serve(dsn, configured_queues=("acc",)) as http:
        page = http.get("/queues/acc", headers=AS_OPERATOR)
        assert page.status_code == 200 and "Queue acc" in page.text
        assert http.get("/queues/nope", headers=AS_OPERATOR).status_code == 404
        assert http.get("/api/queues/nope", headers=AS_OPERATOR).json() == {
            "error": "queue 'nope' not found"
        }


# -- D13: the overview shows paused queues and the DLQ depth --------------------------------
def test_the_overview_shows_paused_queues_and_the_dead_letters(dsn: str) -> None:
    add(dsn, 2, queue="mail")
    add(dsn, 1, queue="reports")
    dead_letter(dsn, queue="mail")
    dead_letter(dsn, queue="mail")
    with awa.Client(dsn) as client:
        client.pause_queue("mail")
        client.pause_queue("idle")  # paused, no job: listed all the same
    with serve(dsn) as http:
        page = http.get("/", headers=AS_OPERATOR).text
        stats = http.get("/api/stats", headers=AS_OPERATOR).json()
    assert stats["paused_queues"] == ["idle", "mail"]
    assert stats["dead_letters"] == {"total": 2, "queues": {"mail": 2}}
    assert re.search(r'id="dead-letters">2<', page)
    assert re.search(r'id="paused-queues">2<', page)
    notice = re.search(r'id="paused-notice"[^>]*>(.*?)</p>', page, re.S)
    assert notice and "mail" in notice.group(1) and "idle" in notice.group(1)
    rows = {
        m.group(1): m.group(2)
        for m in re.finditer(r'<tr><td[^>]*><a href="/queues/(\w+)">\w+</a></td>(.*?)</tr>', page)
    }
    assert set(rows) >= {"mail", "reports", "idle"}
    assert "paused" in rows["mail"] and "paused" in rows["idle"] and "paused" not in rows["reports"]


# -- D22: a purge asks first, and says what it deletes --------------------------------------
def test_purge_from_the_page_asks_first_and_the_api_does_not(dsn: str) -> None:
    first, second = dead_letter(dsn), dead_letter(dsn)
    with serve(dsn) as http:
        csrf = session_csrf(http, OPERATOR_TOKEN)
        asked = http.post(f"/dlq/{first}/purge", data={"csrf": csrf})
        assert asked.status_code == 200
        assert f"Purge dead letter {first}?" in asked.text
        assert "deletes 1 dead letter" in asked.text and "kind send, queue mail" in asked.text
        assert 'name="confirm" value="yes"' in asked.text
        with awa.Client(dsn) as client:
            assert client.dlq_depth().total == 2  # nothing purged yet
        done = http.post(f"/dlq/{first}/purge", data={"csrf": csrf, "confirm": "yes"})
        assert done.status_code == 303 and done.headers["location"].startswith("/dlq?done=")
        assert http.post(f"/api/dlq/{second}/purge", headers=AS_OPERATOR).json() == {"purged": 1}
    with awa.Client(dsn) as client:
        assert client.dlq_depth().total == 0
    assert [r[:4] for r in audit_rows(dsn, detail=True)] == [
        ("serve:otto", "dlq.purge", f"id={first}", "ok"),
        ("serve:otto", "dlq.purge", f"id={second}", "ok"),
    ]


# -- D10: the audit page shows each entry's detail ------------------------------------------
def test_the_audit_page_shows_the_detail(dsn: str) -> None:
    with awa.Client(dsn) as client:
        client.record_audit("cli:root", "job.cancel", "queue=email", "ok", {"count": 1500})
        client.record_audit(
            "cli:root", "job.retry", "job:9", "refused", {"status": 404, "error": "job 9 not found"}
        )
    with serve(dsn) as http:
        page = http.get("/audit", headers=AS_OPERATOR).text
    cells = re.findall(r'<td class="wrap clip-cell" data-label="detail">(.*?)</td>', page, re.S)
    assert any("count=1500" in c for c in cells), cells
    assert any("status=404" in c and "error=job 9 not found" in c for c in cells), cells


# -- D28: a queue seen once and gone drops off the list -------------------------------------
def test_a_queue_nothing_keeps_drops_off_after_a_day(dsn: str) -> None:
    with psycopg.connect(dsn) as conn:
        conn.execute(
            "INSERT INTO awa.queues (name, paused, updated_at) VALUES"
            " ('zzz', false, now() - interval '25 hours'),"  # seen once, long gone
            " ('fresh', false, now() - interval '1 hour'),"  # seen an hour ago: still listed
            " ('held', true, now() - interval '25 hours'),"  # paused: listed
            " ('cfg', false, now() - interval '25 hours'),"  # configured: listed
            " ('busy', false, now() - interval '25 hours'),"  # an unfinished job: listed
            " ('served', false, now() - interval '25 hours'),"  # a live worker serves it
            " ('left', false, now() - interval '25 hours')"  # its worker stops now
        )
        conn.execute(
            "INSERT INTO awa.workers (id, host, pid, queues, kinds) VALUES"
            " ('h:1:1', 'h', 1, '{\"served\": 2}', '[]'), ('h:2:1', 'h', 2, '{\"left\": 1}', '[]')"
        )
        conn.execute("DELETE FROM awa.workers WHERE id = 'h:2:1'")  # not the statement: no touch
    add(dsn, 1, queue="busy", state="running")
    with serve(dsn, configured_queues=("cfg",)) as http:
        names = {q["queue"] for q in http.get("/api/queues", headers=AS_OPERATOR).json()["queues"]}
        assert names == {"fresh", "held", "cfg", "busy", "served"}
        with psycopg.connect(dsn) as conn:  # a worker that stops marks its queues seen now
            conn.execute(
                "INSERT INTO awa.workers (id, host, pid, queues, kinds) VALUES"
                " ('h:3:1', 'h', 3, '{\"left\": 1}', '[]')"
            )
        from awa_cli.db import workers

        async def stop() -> None:
            async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
                await workers.remove(conn, "h:3:1")

        import asyncio

        asyncio.run(stop())
        names = {q["queue"] for q in http.get("/api/queues", headers=AS_OPERATOR).json()["queues"]}
        assert "left" in names and "zzz" not in names
    with awa.Client(dsn) as client:  # `awa queue list` reads the same rule
        assert {q.queue for q in client.list_queues()} == {
            "fresh",
            "held",
            "busy",
            "served",
            "left",
        }


# -- bulk actions ---------------------------------------------------------------------------
def test_bulk_api_cancels_retries_and_deletes_by_ids_and_by_filter(dsn: str) -> None:
    waiting = add(dsn, 3)
    running = add(dsn, 1, state="running")
    failed = add(dsn, 4, state="failed", queue="reports")
    vip = add(dsn, 2, state="failed", queue="reports", tags=["vip"])
    done = add(dsn, 2, state="completed")
    with serve(dsn) as http:
        # Selected ids: only the states the operation applies to change (running is left).
        body = {"ids": [*waiting[:2], *running], "dry_run": True}
        assert http.post("/api/jobs/bulk/cancel", json=body, headers=AS_OPERATOR).json() == {
            "count": 2,
            "dry_run": True,
        }
        assert states(dsn, waiting) == dict.fromkeys(waiting, "available")
        body["dry_run"] = False
        assert (
            http.post("/api/jobs/bulk/cancel", json=body, headers=AS_OPERATOR).json()["count"] == 2
        )
        assert states(dsn, [*waiting, *running]) == {
            waiting[0]: "cancelled",
            waiting[1]: "cancelled",
            waiting[2]: "available",
            running[0]: "running",
        }
        # The list's filter: the tag and the queue and the state.
        tagged = {"state": "failed", "queue": "reports", "tag": "vip"}
        assert (
            http.post("/api/jobs/bulk/retry", json=tagged, headers=AS_OPERATOR).json()["count"] == 2
        )
        assert set(states(dsn, vip).values()) == {"available"}
        assert set(states(dsn, failed).values()) == {"failed"}
        # Delete: finished jobs only.
        gone = http.post(
            "/api/jobs/bulk/delete", json={"ids": [*done, waiting[2]]}, headers=AS_OPERATOR
        )
        assert gone.json()["count"] == 2
        assert states(dsn, [*done, waiting[2]]) == {waiting[2]: "available"}
        # Refusals: no filter, a state the operation does not act on, bad ids, a viewer.
        none = http.post("/api/jobs/bulk/cancel", json={}, headers=AS_OPERATOR)
        assert none.status_code == 422 and "needs a filter" in none.json()["error"]
        wrong = http.post("/api/jobs/bulk/cancel", json={"state": "failed"}, headers=AS_OPERATOR)
        assert wrong.status_code == 422 and wrong.json()["error"].startswith(
            "state: cancel acts on"
        )
        bad = http.post("/api/jobs/bulk/retry", json={"ids": ["1; DROP"]}, headers=AS_OPERATOR)
        assert bad.status_code == 422 and bad.json()["error"].startswith("ids:")
        assert (
            http.post("/api/jobs/bulk/purge", json={"ids": [1]}, headers=AS_OPERATOR).status_code
            == 422
        )
        viewer = http.post("/api/jobs/bulk/cancel", json={"ids": waiting}, headers=AS_VIEWER)
        assert viewer.status_code == 403
    entries = [r[:4] for r in audit_rows(dsn, detail=True)]
    ids = ",".join(map(str, sorted([*waiting[:2], *running])))
    assert entries[:3] == [
        ("serve:otto", "job.cancel", f"ids={ids}", "ok"),
        ("serve:otto", "job.retry", "state=failed queue=reports tag=vip", "ok"),
        ("serve:otto", "job.purge", "ids=" + ",".join(map(str, sorted([*done, waiting[2]]))), "ok"),
    ]
    assert audit_rows(dsn, detail=True)[0][4] == {"count": 2}
    assert [e[3] for e in entries[3:]] == ["refused"] * 5  # every refusal recorded too


def test_the_bulk_form_confirms_with_the_count_then_acts(dsn: str) -> None:
    failed = add(dsn, 3, state="failed")
    other = add(dsn, 2, state="failed", queue="reports")
    with serve(dsn) as http:
        csrf = session_csrf(http, OPERATOR_TOKEN)
        form = {"csrf": csrf, "do": "retry:matching", "state": "failed", "queue": "mail"}
        asked = http.post("/jobs/bulk", data=form)
        assert asked.status_code == 200, asked.text
        assert "Retry 3 jobs?" in asked.text
        assert "Retry all 3 jobs matching state=failed queue=mail" in asked.text
        assert set(states(dsn, failed).values()) == {"failed"}  # nothing yet
        done = http.post("/jobs/bulk", data=form | {"confirm": "yes"})
        assert done.status_code == 303
        assert done.headers["location"] == "/jobs?state=failed&queue=mail&done=3+jobs+retried"
        assert set(states(dsn, failed).values()) == {"available"}
        assert set(states(dsn, other).values()) == {"failed"}
        # Selected: the page says how many of them it changes.
        picked = urlencode(
            [("csrf", csrf), ("do", "delete:selected"), ("ids", other[0]), ("ids", failed[0])]
        )
        asked = http.post("/jobs/bulk", content=picked, headers=FORM)
        assert (
            "Delete 1 job?" in asked.text and "Delete 1 of the 2 selected jobs (ids " in asked.text
        )
        assert "The other 1 are not completed, failed or cancelled" in asked.text
        done = http.post("/jobs/bulk", content=picked + "&confirm=yes", headers=FORM)
        assert done.headers["location"] == "/jobs?done=1+job+deleted"
        assert states(dsn, [other[0], failed[0]]) == {failed[0]: "available"}
        # No filter and nothing selected: refused with a one-line reason.
        refused = http.post("/jobs/bulk", data={"csrf": csrf, "do": "cancel:matching"})
        assert refused.status_code == 422 and "set a filter first" in refused.text
        # Without the CSRF token: refused by the guard.
        assert (
            http.post("/jobs/bulk", data={"do": "cancel:selected", "ids": "1"}).status_code == 403
        )


def test_the_jobs_list_shows_args_and_errors_escaped_and_bounded(dsn: str) -> None:
    with psycopg.connect(dsn) as conn:
        awa.insert(conn, {"blob": "y" * 20_000}, kind="big")
        job = awa.insert(conn, {"html": "<script>alert(1)</script>"}, kind="k")
        conn.execute(
            "UPDATE awa.jobs SET state = 'failed', finalized_at = now(),"
            ' errors = \'[{"error": "KeyError: <b>tenant</b>", "attempt": 1}]\' WHERE id = %s',
            (job.id,),
        )
    with serve(dsn) as http:
        page = http.get("/jobs", headers=AS_OPERATOR).text
    assert (
        "<script>alert(1)</script>" not in page and "&lt;script&gt;alert(1)&lt;/script&gt;" in page
    )
    assert "KeyError: &lt;b&gt;tenant&lt;/b&gt;" in page
    assert "y" * 5000 not in page and "more characters" in page  # bounded, the job page has all


# -- the queue page -------------------------------------------------------------------------
def test_the_queue_api_has_its_chart_workers_and_failures(dsn: str) -> None:
    add(dsn, 2, state="running")
    add(dsn, 3, state="completed")
    failed = add(dsn, 1, state="failed")
    add(dsn, 4, state="completed", queue="reports")  # another queue's: not counted
    dead_letter(dsn, queue="mail", kind="bounce")
    with psycopg.connect(dsn) as conn:
        conn.execute("UPDATE awa.jobs SET attempted_by = 'web-1:77' WHERE state = 'running'")
        conn.execute(
            "INSERT INTO awa.workers (id, host, pid, queues, kinds) VALUES"
            " ('web-1:77:1', 'web-1', 77, '{\"mail\": 8, \"reports\": 2}', '[]'),"
            " ('web-2:88:1', 'web-2', 88, '{\"mail\": 4}', '[]'),"
            " ('web-3:99:1', 'web-3', 99, '{\"reports\": 4}', '[]')"
        )
    with serve(dsn) as http:
        shown = http.get("/api/queues/mail", headers=AS_OPERATOR).json()
        page = http.get("/queues/mail", headers=AS_OPERATOR).text
    assert shown["queue"] == "mail" and shown["counts"]["running"] == 2
    assert sum(p["completed"] for p in shown["throughput"]) == 3
    assert sum(p["failed"] for p in shown["throughput"]) == 2  # one failed, one dead letter
    assert shown["dead_letters"] == 1
    assert sorted((w["host"], w["concurrency"], w["running"]) for w in shown["workers"]) == [
        ("web-1", 8, 2),
        ("web-2", 4, 0),
    ]
    assert [j["id"] for j in shown["failures"]] == failed
    assert "3 completed and 2 failed in the last hour" in page
    assert page.count('class="bar-failed"') >= 1 and "web-2" in page and "web-3" not in page


# -- the DLQ page's Retry all / Purge all ----------------------------------------------------
def test_retry_all_and_purge_all_dead_letters_ask_with_the_count(dsn: str) -> None:
    mail = [dead_letter(dsn, queue="mail", kind=f"k{i}") for i in range(3)]
    reports = dead_letter(dsn, queue="reports", kind="export")
    with serve(dsn) as http:
        csrf = session_csrf(http, OPERATOR_TOKEN)
        assert 'action="/dlq/bulk"' in http.get("/dlq?queue=mail").text
        form = {"csrf": csrf, "do": "retry", "queue": "mail"}
        asked = http.post("/dlq/bulk", data=form)
        assert asked.status_code == 200 and "Retry 3 dead letters?" in asked.text
        assert "Retry all 3 dead letters matching queue=mail." in asked.text
        with awa.Client(dsn) as client:
            assert client.dlq_depth().total == 4  # asked first: nothing moved
        done = http.post("/dlq/bulk", data=form | {"confirm": "yes"})
        assert done.headers["location"] == "/dlq?queue=mail&done=3+dead+letters+retried"
        assert set(states(dsn, mail).values()) == {"available"}
        # No filter: every dead letter; the API twin with a dry run first.
        dry = http.post("/api/dlq/bulk/purge", json={"dry_run": True}, headers=AS_OPERATOR)
        assert dry.json() == {"count": 1, "dry_run": True}
        asked = http.post("/dlq/bulk", data={"csrf": csrf, "do": "purge"})
        assert "Purge all 1 dead letter in the queue." in asked.text
        assert http.post("/api/dlq/bulk/purge", json={}, headers=AS_OPERATOR).json()["count"] == 1
        bad = http.post("/api/dlq/bulk/move", json={}, headers=AS_OPERATOR)
        assert bad.status_code == 422
        viewer = http.post("/api/dlq/bulk/retry", json={}, headers=AS_VIEWER)
        assert viewer.status_code == 403
    with awa.Client(dsn) as client:
        assert client.dlq_depth().total == 0
    assert reports not in states(dsn, [reports])
    assert [r[:4] for r in audit_rows(dsn, detail=True)] == [
        ("serve:otto", "dlq.retry", "queue=mail", "ok"),
        ("serve:otto", "dlq.purge", "all", "ok"),
        ("serve:otto", "request", "POST /api/dlq/bulk/move", "refused"),
        ("serve:vera", "request", "POST /api/dlq/bulk/retry", "refused"),
    ]
