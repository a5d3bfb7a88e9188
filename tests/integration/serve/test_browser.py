"""The dashboard in a real headless Chromium against a real ``awa serve`` process.

Every page renders what the database holds; filtering works; an operator signs in through
the form and cancels and retries a job; a viewer sees no button and a forged post is refused
(403) and audited; the browser never asks another host for anything; 375 px and 1,440 px
wide pages do not scroll sideways; the overview refreshes itself.
"""

from __future__ import annotations

import os
from pathlib import Path

import psycopg
import pytest

import awa_cli as awa
from tests.helpers import job_row, scalar
from tests.integration.serve.helpers import audit_rows
from tests.integration.serve.browser import (
    heartbeat,
    signed_in,
    LIST_PAGES,
    OPERATOR_TOKEN,
    VIEWER_TOKEN,
    claim,
    counts,
    no_horizontal_scroll,
    seed,
)

pytestmark = [pytest.mark.integration]


def ids_where(dsn: str, condition: str) -> list[int]:
    with psycopg.connect(dsn) as conn:
        query = f"SELECT id FROM awa.jobs WHERE {condition} ORDER BY id DESC LIMIT 50"
        return [r[0] for r in conn.execute(query)]  # type: ignore[call-overload]


def dead_count(dsn: str) -> int:
    return int(scalar(dsn, "SELECT count(*) FROM awa.dead_letters"))


def next_fire(dsn: str, name: str) -> str:
    """The schedule's next fire time as the page shows it (UTC, to the second)."""
    with psycopg.connect(dsn) as conn:
        conn.execute("SET TIME ZONE 'UTC'")
        row = conn.execute(
            "SELECT to_char(next_fire_at, 'YYYY-MM-DD HH24:MI:SS') FROM awa.periodic_jobs"
            " WHERE name = %s",
            (name,),
        ).fetchone()
    assert row is not None and row[0] is not None
    return str(row[0])


def _ids_on(page: object) -> list[int]:
    cells = page.locator("tbody td:first-child a").all_inner_texts()  # type: ignore[attr-defined]
    return [int(text) for text in cells]


def test_every_page_shows_the_database_and_filters_work(dsn: str, tmp_path: Path) -> None:
    data = seed(dsn)
    expected = counts(dsn)
    with signed_in(dsn, tmp_path, VIEWER_TOKEN) as (served, page):
        # Overview: the cards and the per-queue table are the database's counts.
        assert page.inner_text("#total") == str(sum(expected.values()))
        for state in ("available", "failed", "waiting_external"):
            assert page.inner_text(f"[data-state={state}]") == str(expected[state])
        reports = page.locator("tbody tr", has=page.locator("a", has_text="reports"))
        assert "2" in reports.inner_text()
        assert page.locator("figure.chart rect.bar-completed").count() >= 40
        title = page.locator("figure.chart svg title").first.text_content() or ""
        assert f"{data.completed} completed" in title
        # Jobs: newest first; filtering by the form's state select.
        page.click("nav a[href='/jobs']")
        assert _ids_on(page) == ids_where(dsn, "true")
        page.select_option("select[name=state]", "failed")
        page.click("form.filters button:has-text('Filter')")
        page.wait_for_url("**/jobs?state=failed**")
        assert _ids_on(page) == ids_where(dsn, "state = 'failed'")
        assert set(data.failed) <= set(_ids_on(page))
        page.goto(f"{served.url}/jobs")
        page.fill("input[name=tag]", "vip")
        page.click("form.filters button:has-text('Filter')")
        page.wait_for_url("**tag=vip**")
        assert _ids_on(page) == data.vip
        page.goto(f"{served.url}/jobs?kind=charge")
        assert _ids_on(page) == [data.waiting]
        page.fill("input[name=id]", str(data.available[0]))
        page.click("button:has-text('Find')")
        page.wait_for_url(f"**/jobs/{data.available[0]}")
        assert "user0@example.com" in page.inner_text("main")
        # The job page of a job waiting on its callback shows the URLs to resolve it.
        page.goto(f"{served.url}/jobs/{data.waiting}")
        callback_id = str(job_row(dsn, data.waiting).callback_id)
        urls = page.inner_text("dl.urls")
        for action in ("complete", "fail", "retry", "resume", "heartbeat"):
            assert f"{served.url}/callbacks/{callback_id}/{action}" in urls
        # Workers and kinds: the live worker, and the kind nobody runs flagged.
        heartbeat(dsn)
        page.click("nav a[href='/workers']")
        row = page.locator("tbody tr").first.inner_text()
        assert "build-host" in row and "4242" in row and "email=10" in row
        page.click("nav a[href='/kinds']")
        report = page.locator("tbody tr", has=page.locator("a", has_text="report")).first
        assert "no live worker" in report.inner_text()
        email = page.locator("tbody tr", has=page.locator("a", has_text="send_email")).first
        assert "Send one email." in email.inner_text()
        assert "no live worker" not in email.inner_text()
        # Queues: pause state and counts per state, as the database holds them.
        page.click("nav a[href='/queues']")
        email_row = page.locator("tbody tr", has=page.locator("a", has_text="email")).first
        assert "running" in email_row.inner_text()
        assert email_row.locator("td[data-label=available]").inner_text() == str(
            len(ids_where(dsn, "queue = 'email' AND state = 'available'"))
        )
        # DLQ: the depth and the dead letter with its error; its page has args and errors.
        page.click("nav a[href='/dlq']")
        assert page.inner_text("#dlq-total") == str(dead_count(dsn))
        assert page.inner_text("[data-dlq-queue=reports]") == "1"
        page.click(f"a[href='/dlq/{data.dead}']")
        assert "ExportError: disk full" in page.inner_text("main")
        assert '"export": "q3"' in page.inner_text("main")
        assert page.locator("main form[method=post]").count() == 0  # a viewer
        # Periodic: the stored schedule and its next fire time.
        page.click("nav a[href='/periodic']")
        row = page.locator("tbody tr").first.inner_text()
        assert data.schedule in row and "0 3 * * *" in row and "Europe/Berlin" in row
        assert next_fire(dsn, data.schedule) in row
        # Audit: the sign-in is there.
        page.click("nav a[href='/audit']")
        assert "serve:vera" in page.locator("tbody tr").first.inner_text()
    assert served.requests and served.foreign() == []


def test_an_operator_signs_in_and_cancels_then_retries(dsn: str, tmp_path: Path) -> None:
    data = seed(dsn)
    job_id = data.available[1]
    with signed_in(dsn, tmp_path, OPERATOR_TOKEN, f"/jobs/{job_id}") as (served, page):
        page.click("button:has-text('Cancel')")
        page.wait_for_url(f"**/jobs/{job_id}?done=cancelled")
        assert job_row(dsn, job_id).state == awa.JobState.CANCELLED
        assert "cancelled" in page.inner_text("h1")
        page.click("button:has-text('Retry now')")
        page.wait_for_url(f"**/jobs/{job_id}?done=retried")
        assert job_row(dsn, job_id).state == awa.JobState.AVAILABLE
        page.goto(f"{served.url}/audit?actor=serve:otto&action=job.cancel")
        rows = page.locator("tbody tr").all_inner_texts()
        assert len(rows) == 1 and f"job:{job_id}" in rows[0] and "ok" in rows[0]
    assert audit_rows(dsn, logins=True) == [
        ("serve:otto", "login", "session", "ok"),
        ("serve:otto", "job.cancel", f"job:{job_id}", "ok"),
        ("serve:otto", "job.retry", f"job:{job_id}", "ok"),
    ]
    assert served.foreign() == []


def test_a_viewer_has_no_buttons_and_a_forged_post_is_refused(dsn: str, tmp_path: Path) -> None:
    data = seed(dsn)
    job_id = data.available[0]
    with signed_in(dsn, tmp_path, VIEWER_TOKEN, f"/jobs/{job_id}") as (served, page):
        assert page.locator("button:has-text('Cancel')").count() == 0
        assert page.locator("form[action$='/cancel']").count() == 0
        status = page.evaluate(
            """async (id) => {
                const csrf = document.querySelector("meta[name=csrf-token]").content;
                const r = await fetch(`/jobs/${id}/cancel`, {method: "POST",
                    headers: {"Content-Type": "application/x-www-form-urlencoded"},
                    body: "csrf=" + encodeURIComponent(csrf)});
                return r.status;
            }""",
            job_id,
        )
        assert status == 403
    assert job_row(dsn, job_id).state == awa.JobState.AVAILABLE
    with psycopg.connect(dsn) as conn:
        refused = conn.execute(
            "SELECT actor, target, result FROM awa.audit_log WHERE action = 'request'"
        ).fetchall()
    assert refused == [("serve:vera", f"POST /jobs/{job_id}/cancel", "refused")]
    assert served.foreign() == []


def queue_paused(dsn: str, queue: str) -> bool:
    return bool(scalar(dsn, "SELECT paused FROM awa.queues WHERE name = %s", queue))


def test_an_operator_pauses_a_queue_retries_a_dead_letter_and_triggers_a_schedule(
    dsn: str, tmp_path: Path
) -> None:
    data = seed(dsn)
    with signed_in(dsn, tmp_path, OPERATOR_TOKEN, "/queues") as (served, page):
        email_row = page.locator("tbody tr", has=page.locator("a", has_text="email")).first
        email_row.locator("button:has-text('Pause')").click()
        page.wait_for_url("**/queues?done=paused+email")
        assert queue_paused(dsn, "email")
        with awa.Client(dsn) as client:
            assert "email" in client.paused_queues()
        assert claim(dsn, "email") == []  # no worker claims from a paused queue
        email_row = page.locator("tbody tr", has=page.locator("a", has_text="email")).first
        assert "paused" in email_row.inner_text()
        email_row.locator("button:has-text('Resume')").click()
        page.wait_for_url("**/queues?done=resumed+email")
        assert not queue_paused(dsn, "email")
        assert len(claim(dsn, "email")) == 5  # the positive control: resumed, it is claimed

        page.goto(f"{served.url}/dlq/{data.dead}")
        page.click("button:has-text('Retry')")
        page.wait_for_url(f"**/jobs/{data.dead}?done=**")
        assert job_row(dsn, data.dead).state == awa.JobState.AVAILABLE
        assert dead_count(dsn) == 0

        page.goto(f"{served.url}/periodic")
        page.click("button:has-text('Trigger now')")
        page.wait_for_url("**/periodic?done=triggered**")
        notice = page.inner_text("p.notice")
        triggered = int(notice.rsplit("job ", 1)[1].rstrip("."))
        assert job_row(dsn, triggered).kind == "report"
        assert job_row(dsn, triggered).state == awa.JobState.AVAILABLE  # enqueued now
    assert audit_rows(dsn, logins=True) == [
        ("serve:otto", "login", "session", "ok"),
        ("serve:otto", "queue.pause", "email", "ok"),
        ("serve:otto", "queue.resume", "email", "ok"),
        ("serve:otto", "dlq.retry", str(data.dead), "ok"),
        ("serve:otto", "cron.trigger", f"periodic:{data.schedule}", "ok"),
    ]
    assert served.foreign() == []


def test_a_viewer_cannot_pause_a_queue(dsn: str, tmp_path: Path) -> None:
    data = seed(dsn)
    with signed_in(dsn, tmp_path, VIEWER_TOKEN, "/queues") as (served, page):
        for path in ("/queues", "/periodic", f"/dlq/{data.dead}"):
            page.goto(f"{served.url}{path}")
            assert page.locator("main form[method=post]").count() == 0, path
        statuses = page.evaluate(
            """async (urls) => {
                const csrf = document.querySelector("meta[name=csrf-token]").content;
                const out = [];
                for (const url of urls) {
                    const r = await fetch(url, {method: "POST",
                        headers: {"Content-Type": "application/x-www-form-urlencoded"},
                        body: "csrf=" + encodeURIComponent(csrf)});
                    out.push(r.status);
                }
                return out;
            }""",
            [
                "/queues/email/pause",
                f"/dlq/{data.dead}/retry",
                f"/periodic/{data.schedule}/trigger",
            ],
        )
        assert statuses == [403, 403, 403]
    assert not queue_paused(dsn, "email") and dead_count(dsn) == 1
    with psycopg.connect(dsn) as conn:
        refused = conn.execute(
            "SELECT actor, target, result FROM awa.audit_log WHERE action <> 'login' ORDER BY id"
        ).fetchall()
    assert refused == [
        ("serve:vera", "POST /queues/email/pause", "refused"),
        ("serve:vera", f"POST /dlq/{data.dead}/retry", "refused"),
        ("serve:vera", f"POST /periodic/{data.schedule}/trigger", "refused"),
    ]
    assert served.foreign() == []


@pytest.mark.parametrize("width", [375, 1440])
def test_no_page_scrolls_sideways(dsn: str, tmp_path: Path, width: int) -> None:
    data = seed(dsn)
    with signed_in(dsn, tmp_path, OPERATOR_TOKEN, size=(width, 800)) as (served, page):
        extra = [f"/jobs/{data.waiting}", f"/jobs/{data.failed[0]}", f"/dlq/{data.dead}"]
        extra += [f"/jobs/{data.importing}", f"/jobs/{data.follow_up}"]
        for path in [*LIST_PAGES, *extra]:
            page.goto(f"{served.url}{path}")
            assert page.locator("main h1").count() == 1, path
            assert no_horizontal_scroll(page), f"{path} scrolls sideways at {width} px"
        shots = os.environ.get("SCREENSHOTS_DIR")
        if shots:  # python -m tests.integration.serve.screenshots sets it (README images)
            suffix = "" if width == 1440 else "-mobile"
            for name, path in (("overview", "/"), ("job", f"/jobs/{data.importing}")):
                page.goto(f"{served.url}{path}")
                page.screenshot(path=str(Path(shots) / f"{name}{suffix}.png"), full_page=True)
    assert served.foreign() == []


def test_a_job_page_shows_its_progress_and_timeline(dsn: str, tmp_path: Path) -> None:
    data = seed(dsn)
    browsing = signed_in(dsn, tmp_path, VIEWER_TOKEN, f"/jobs/{data.importing}", size=(375, 800))
    with browsing as (served, page):
        bar = page.locator("#progress progress")
        assert bar.get_attribute("value") == "60" and bar.get_attribute("max") == "100"
        assert bar.is_visible() and bar.bounding_box()["width"] > 150  # type: ignore[index]
        assert "copying orders: 6,000 of 10,000" in page.inner_text("#progress")
        attempts = page.locator("#timeline li.attempt").all_inner_texts()
        assert len(attempts) == 2
        assert "old-host:77:1" in attempts[0] and "retried" in attempts[0]
        assert "ConnectionError: connection reset by peer" in attempts[0]
        assert "build-host:4242:1" in attempts[1] and "running" in attempts[1]
        assert no_horizontal_scroll(page)
        # The follow-up's link opens its page, which links back to the job that produced it.
        page.click(f"#timeline a[data-follow-up='{data.follow_up}']")
        page.wait_for_url(f"**/jobs/{data.follow_up}")
        assert "notify_ops" in page.inner_text("main")
        assert page.locator("#progress").count() == 0
        page.click(f"#timeline a[data-trigger='{data.importing}']")
        page.wait_for_url(f"**/jobs/{data.importing}")
        assert page.locator("#timeline li.attempt").count() == 2
        assert no_horizontal_scroll(page)
    assert served.foreign() == []


def test_the_overview_refreshes_itself(dsn: str, tmp_path: Path) -> None:
    seed(dsn)
    with signed_in(dsn, tmp_path, VIEWER_TOKEN) as (served, page):
        before = int(page.inner_text("#total"))
        with psycopg.connect(dsn) as conn:
            awa.insert(conn, {"to": "late@example.com"}, kind="send_email", queue="email")
        page.wait_for_function(
            "(n) => document.querySelector('#total').textContent.trim() === String(n)",
            arg=before + 1,
            timeout=15_000,
        )
    assert served.foreign() == []
