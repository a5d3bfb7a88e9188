"""Issue 28's dashboard in a real headless Chromium against a real ``awa serve`` process, at
375 and 1,440 px: bulk actions from the jobs list (select, confirm with the count, act),
args and errors in the list (expandable, escaped), the queue page with its chart and
workers, live updates on every list page without a reload (and none while a box is ticked),
a purge that asks first, the pause of a configured queue with no jobs, and a page that
runs no inline script (its CSP stays strict)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import psycopg
import pytest

import awa_cli as awa
from tests.helpers import job_row
from tests.integration.serve.helpers import audit_rows
from tests.integration.serve.browser import (
    signed_in,
    LIST_PAGES,
    OPERATOR_TOKEN,
    VIEWER_TOKEN,
    no_horizontal_scroll,
    seed,
)

pytestmark = [pytest.mark.integration]

WIDTHS = [375, 1440]


def shot(page: Any, name: str, width: int) -> None:
    """Save a screenshot for the docs when ``SCREENSHOTS_DIR`` is set (screenshots.py)."""
    out = os.environ.get("SCREENSHOTS_DIR")
    if out:
        suffix = "" if width == 1440 else "-mobile"
        page.screenshot(path=str(Path(out) / f"{name}{suffix}.png"), full_page=width == 1440)


@pytest.mark.parametrize("width", WIDTHS)
def test_an_operator_cancels_selected_jobs_then_retries_all_matching(
    dsn: str, tmp_path: Path, width: int
) -> None:
    data = seed(dsn)
    chosen = data.available[:2]
    blocked: list[str] = []
    listed = "/jobs?queue=email&state=available"
    browsing = signed_in(dsn, tmp_path, OPERATOR_TOKEN, listed, size=(width, 900), csp_log=blocked)
    with browsing as (served, page):
        for job_id in chosen:
            page.check(f"input[name=ids][value='{job_id}']")
        assert page.inner_text("#selected-count") == "2 jobs selected"  # awa.js counts them
        assert no_horizontal_scroll(page)
        shot(page, "jobs-bulk", width)
        page.click("button:has-text('Cancel selected')")
        page.wait_for_url("**/jobs/bulk")
        assert page.inner_text("h1") == "Cancel 2 jobs?"
        assert "Cancel the 2 selected jobs (ids " in page.inner_text("#confirm")
        assert {job_row(dsn, i).state for i in chosen} == {awa.JobState.AVAILABLE}  # asked first
        assert no_horizontal_scroll(page)
        shot(page, "confirm", width)
        page.click("button[data-confirmed]")
        page.wait_for_url("**/jobs?state=available&queue=email&done=2+jobs+cancelled")
        assert "Done: 2 jobs cancelled." in page.inner_text("p.notice")
        assert {job_row(dsn, i).state for i in chosen} == {awa.JobState.CANCELLED}
        assert {job_row(dsn, i).state for i in data.available[2:]} == {awa.JobState.AVAILABLE}
        # Every cancelled job of the queue, by the filter: the count is on the page.
        page.goto(f"{served.url}/jobs?queue=email&state=cancelled")
        page.click("button:has-text('Retry all')")
        page.wait_for_url("**/jobs/bulk")
        assert page.inner_text("h1") == "Retry 2 jobs?"
        assert "matching state=cancelled queue=email" in page.inner_text("#confirm")
        page.click("button[data-confirmed]")
        page.wait_for_url("**done=2+jobs+retried")
        assert {job_row(dsn, i).state for i in chosen} == {awa.JobState.AVAILABLE}
        # Select all on the page, then go back instead of confirming: nothing changes.
        page.goto(f"{served.url}/jobs?queue=email&state=available")
        page.check("input[data-select-all]")
        boxes = page.locator("input[name=ids]")
        assert boxes.count() == 5 and all(boxes.nth(i).is_checked() for i in range(5))
        page.click("button:has-text('Delete selected')")
        page.wait_for_url("**/jobs/bulk")
        assert "Nothing to delete" in page.inner_text("main")
        assert page.locator("button[data-confirmed]").count() == 0
        page.click("a:has-text('Back')")
        page.wait_for_url("**/jobs?state=available&queue=email")
        assert blocked == []
    ids = ",".join(map(str, sorted(chosen)))
    assert [r[:4] for r in audit_rows(dsn, detail=True)] == [
        ("serve:otto", "job.cancel", f"ids={ids}", "ok"),
        ("serve:otto", "job.retry", "state=cancelled queue=email", "ok"),
    ]
    assert [r[4] for r in audit_rows(dsn, detail=True)] == [{"count": 2}, {"count": 2}]
    assert served.foreign() == []


def test_a_viewer_sees_no_checkboxes_and_a_forged_bulk_post_is_refused(
    dsn: str, tmp_path: Path
) -> None:
    data = seed(dsn)
    with signed_in(dsn, tmp_path, VIEWER_TOKEN, "/jobs") as (_served, page):
        assert page.locator("input[name=ids]").count() == 0
        assert page.locator("form#bulk").count() == 0
        status = page.evaluate(
            """async (id) => {
                const csrf = document.querySelector("meta[name=csrf-token]").content;
                const r = await fetch("/jobs/bulk", {method: "POST",
                    headers: {"Content-Type": "application/x-www-form-urlencoded"},
                    body: "csrf=" + encodeURIComponent(csrf) + "&do=cancel:selected&ids=" + id
                        + "&confirm=yes"});
                return r.status;
            }""",
            data.available[0],
        )
        assert status == 403
    assert job_row(dsn, data.available[0]).state == awa.JobState.AVAILABLE
    assert [r[:4] for r in audit_rows(dsn, detail=True)] == [
        ("serve:vera", "request", "POST /jobs/bulk", "refused")
    ]


@pytest.mark.parametrize("width", WIDTHS)
def test_args_and_errors_show_in_the_list_and_expand(dsn: str, tmp_path: Path, width: int) -> None:
    data = seed(dsn)
    with psycopg.connect(dsn) as conn:
        long = awa.insert(
            conn,
            {"tenant": "acme", "note": "<img src=x onerror=alert(1)>", "rows": list(range(200))},
            kind="sync_account",
            queue="sync",
        ).id
    with signed_in(
        dsn, tmp_path, VIEWER_TOKEN, "/jobs?state=failed&queue=reports", size=(width, 900)
    ) as (served, page):
        row = page.locator("tbody tr", has=page.locator(f"a[href='/jobs/{data.failed[0]}']"))
        assert "ReportError: no data" in row.locator("td[data-label='last error']").inner_text()
        assert '"report"' in row.locator("td[data-label=args]").inner_text()
        page.goto(f"{served.url}/jobs?queue=sync")
        cell = page.locator("tbody tr").first.locator("td[data-label=args]")
        summary = cell.locator("summary")
        assert '"note": "<img src=x onerror=alert(1)>"' in summary.inner_text()  # shown as text
        assert summary.inner_text().endswith("…")
        assert not cell.locator("pre").is_visible()
        summary.click()
        assert cell.locator("pre").is_visible() and "199" in cell.locator("pre").inner_text()
        assert page.locator("img").count() == 0  # escaped: no element was made of it
        assert no_horizontal_scroll(page)
        assert long in [int(t) for t in page.locator("tbody td:first-child a").all_inner_texts()]
    assert served.foreign() == []


@pytest.mark.parametrize("width", WIDTHS)
def test_the_queue_page_has_its_chart_and_its_workers(dsn: str, tmp_path: Path, width: int) -> None:
    seed(dsn)
    with psycopg.connect(dsn) as conn:
        completed, failed = conn.execute(
            "SELECT count(*) FILTER (WHERE state = 'completed'), count(*) FILTER (WHERE state ="
            " 'failed') FROM awa.jobs WHERE queue = 'email' AND finalized_at > now() - interval"
            " '1 hour'"
        ).fetchone()  # type: ignore[misc]
    with signed_in(dsn, tmp_path, VIEWER_TOKEN, "/queues", size=(width, 900)) as (served, page):
        page.click("tbody a:text-is('email')")
        page.wait_for_url("**/queues/email")
        title = page.locator("#queue-chart svg title").first.text_content() or ""
        assert f"{completed} completed and {failed} failed" in title
        assert page.locator("#queue-chart rect.bar-completed").count() >= 40
        assert page.locator("#queue-chart rect.bar-failed").count() >= 1
        worker = page.locator("h2:text('Workers serving it') + .table-wrap tbody tr").first
        assert worker.locator("td[data-label=host]").inner_text() == "build-host"
        assert worker.locator("td[data-label=concurrency]").inner_text() == "10"
        assert page.inner_text("[data-state=available]") == "5"
        assert no_horizontal_scroll(page)
        shot(page, "queue", width)
    assert served.foreign() == []


def _until(page: Any, script: str, arg: object) -> None:
    page.wait_for_function(script, arg=arg, timeout=15_000)


def test_every_list_page_updates_itself_without_a_reload(dsn: str, tmp_path: Path) -> None:
    seed(dsn)
    blocked: list[str] = []
    with signed_in(dsn, tmp_path, OPERATOR_TOKEN, "/jobs", csp_log=blocked) as (served, page):
        page.evaluate("window.__same = true")  # gone if the page were reloaded
        with psycopg.connect(dsn) as conn:
            new = awa.insert(conn, {"to": "late@example.com"}, kind="send_email", queue="email").id
        _until(
            page,
            "(id) => document.querySelector('tbody td:first-child a').textContent.trim() === String(id)",
            new,
        )
        # While a box is ticked the list holds still (the selection is kept).
        page.check(f"input[name=ids][value='{new}']")
        with psycopg.connect(dsn) as conn:
            newer = awa.insert(
                conn, {"to": "later@example.com"}, kind="send_email", queue="email"
            ).id
        page.wait_for_timeout(6_500)  # more than one refresh period
        assert page.locator(f"a[href='/jobs/{newer}']").count() == 0
        assert page.is_checked(f"input[name=ids][value='{new}']")
        page.uncheck(f"input[name=ids][value='{new}']")
        _until(page, "(id) => !!document.querySelector(`a[href='/jobs/${id}']`)", newer)
        assert page.evaluate("window.__same") is True
        # The queue page, the DLQ and the audit log too.
        page.goto(f"{served.url}/queues/email")
        page.evaluate("window.__same = true")
        with psycopg.connect(dsn) as conn:
            awa.insert(conn, {"to": "x@example.com"}, kind="send_email", queue="email")
        _until(
            page,
            "(n) => document.querySelector('[data-state=available]').textContent.trim() === String(n)",
            8,
        )
        page.goto(f"{served.url}/dlq")
        page.evaluate("window.__same = true")
        before = int(page.inner_text("#dlq-total"))
        with awa.Client(dsn) as client:
            assert client.move_failed_to_dlq(queue="reports") == 2
        _until(
            page,
            "(n) => document.querySelector('#dlq-total').textContent.trim() === String(n)",
            before + 2,
        )
        page.goto(f"{served.url}/audit")
        page.evaluate("window.__same = true")
        with awa.Client(dsn) as client:
            client.record_audit("cli:ops", "job.cancel", "queue=email", "ok", {"count": 7})
        _until(
            page,
            "() => document.querySelector('#audit-live tbody').textContent.includes('count=7')",
            None,
        )
        assert page.evaluate("window.__same") is True
        assert blocked == []
    assert served.foreign() == []


def test_purge_asks_first_in_the_browser(dsn: str, tmp_path: Path) -> None:
    data = seed(dsn)
    browsing = signed_in(dsn, tmp_path, OPERATOR_TOKEN, f"/dlq/{data.dead}", size=(375, 800))
    with browsing as (_served, page):
        page.click("button:has-text('Purge')")
        page.wait_for_url(f"**/dlq/{data.dead}/purge")
        assert page.inner_text("h1") == f"Purge dead letter {data.dead}?"
        text = page.inner_text("#confirm")
        assert "deletes 1 dead letter" in text and "kind export, queue reports" in text
        assert " UTC" in text  # the time says its zone
        with awa.Client(dsn) as client:
            assert client.dlq_depth().total == 1
        assert no_horizontal_scroll(page)
        page.click("button:has-text('Purge 1 dead letter')")
        page.wait_for_url("**/dlq?done=**")
        with awa.Client(dsn) as client:
            assert client.dlq_depth().total == 0
    assert [r[:4] for r in audit_rows(dsn, detail=True)] == [
        ("serve:otto", "dlq.purge", f"id={data.dead}", "ok")
    ]


def test_a_configured_queue_with_no_jobs_is_paused_from_the_page(dsn: str, tmp_path: Path) -> None:
    seed(dsn)
    config = "\n[queues.acc]\nconcurrency = 2\n"
    with signed_in(dsn, tmp_path, OPERATOR_TOKEN, "/queues", extra_config=config) as (served, page):
        row = page.locator("tbody tr", has=page.locator("a:text-is('acc')"))
        row.locator("button:has-text('Pause')").click()
        page.wait_for_url("**/queues?done=paused+acc")
        with awa.Client(dsn) as client:
            assert client.paused_queues() == ["acc"]
        page.goto(f"{served.url}/")
        assert page.inner_text("#paused-queues") == "1"
        assert "acc" in page.inner_text("#paused-notice")
        acc = page.locator("tbody tr", has=page.locator("a:text-is('acc')"))
        assert "paused" in acc.locator("td[data-label=status]").inner_text()
        assert page.inner_text("#dead-letters") == "1"


@pytest.mark.parametrize("width", WIDTHS)
def test_list_pages_fit_and_run_no_inline_script(dsn: str, tmp_path: Path, width: int) -> None:
    seed(dsn)
    blocked: list[str] = []
    browsing = signed_in(dsn, tmp_path, OPERATOR_TOKEN, size=(width, 800), csp_log=blocked)
    with browsing as (served, page):
        for path in LIST_PAGES:
            response = page.goto(f"{served.url}{path}")
            csp = response.headers["content-security-policy"]  # type: ignore[union-attr]
            assert "default-src 'self'" in csp and "unsafe-inline" not in csp, path
            assert page.locator("script:not([src])").count() == 0, path
            assert page.locator("[onclick], [onchange], [onsubmit]").count() == 0, path
            assert no_horizontal_scroll(page), f"{path} scrolls sideways at {width} px"
            assert "UTC" in page.inner_text("main") or path in ("/kinds", "/workers", "/queues"), (
                path
            )
        assert blocked == []
    assert served.foreign() == []


@pytest.mark.parametrize("width", WIDTHS)
def test_retry_all_dead_letters_from_the_dlq_page(dsn: str, tmp_path: Path, width: int) -> None:
    data = seed(dsn)
    browsing = signed_in(dsn, tmp_path, OPERATOR_TOKEN, "/dlq?queue=reports", size=(width, 900))
    with browsing as (served, page):
        assert no_horizontal_scroll(page)
        page.click("#dlq-bulk button:has-text('Retry all')")
        page.wait_for_url("**/dlq/bulk")
        assert page.inner_text("h1") == "Retry 1 dead letter?"
        assert "matching queue=reports" in page.inner_text("#confirm")
        with awa.Client(dsn) as client:
            assert client.dlq_depth().total == 1
        page.click("button[data-confirmed]")
        page.wait_for_url("**/dlq?queue=reports&done=1+dead+letter+retried")
        assert job_row(dsn, data.dead).state == awa.JobState.AVAILABLE
    assert [r[:4] for r in audit_rows(dsn, detail=True)] == [
        ("serve:otto", "dlq.retry", "queue=reports", "ok")
    ]
    assert served.foreign() == []
