"""The batch pages in a real headless Chromium against a real ``awa serve`` process: the
listing and a batch's page show its progress bar and counts, link its members and callback
jobs, and fit 375 px and 1,440 px without scrolling sideways or asking another host."""

from __future__ import annotations

from pathlib import Path

import psycopg
import pytest

import awa_cli as awa
from tests.integration.serve.browser import (
    signed_in,
    VIEWER_TOKEN,
    no_horizontal_scroll,
)

pytestmark = [pytest.mark.integration]


def _seed(dsn: str) -> tuple[int, int]:
    """A running batch with 3 of 8 members done, and a completed one; their ids."""
    report = awa.EnqueueRequest({"r": 1}).with_opts(awa.InsertOpts(kind="report"))
    with psycopg.connect(dsn) as conn:
        running = awa.insert_batch(
            conn, [{"n": n} for n in range(8)], kind="resize", on_complete=report
        )
        conn.execute(
            "UPDATE awa.jobs SET state = 'completed', finalized_at = now() WHERE id IN"
            " (SELECT id FROM awa.jobs WHERE batch_id = %s ORDER BY id LIMIT 3)",
            (running.id,),
        )
        done = awa.insert_batch(conn, [{"n": 1}], kind="resize", on_complete=report)
        conn.execute(
            "UPDATE awa.jobs SET state = 'completed', finalized_at = now() WHERE batch_id = %s",
            (done.id,),
        )
    return running.id, done.id


@pytest.mark.parametrize("width", [375, 1440])
def test_batch_pages_show_progress_and_fit_the_screen(dsn: str, tmp_path: Path, width: int) -> None:
    running, done = _seed(dsn)
    with signed_in(dsn, tmp_path, VIEWER_TOKEN, "/batches", size=(width, 800)) as (served, page):
        assert page.locator("main h1").inner_text() == "Batches"
        assert no_horizontal_scroll(page), f"/batches scrolls sideways at {width} px"
        row = page.locator("tbody tr", has=page.locator(f"a[href='/batches/{running}']"))
        assert row.locator("progress").get_attribute("value") == "37.5"
        assert "3/8" in row.inner_text()
        page.click(f"a[href='/batches/{running}']")
        page.wait_for_url(f"**/batches/{running}")
        bar = page.locator("#progress progress")
        assert bar.is_visible() and bar.bounding_box()["width"] > 100  # type: ignore[index]
        assert "3 of 8 done" in page.inner_text("#progress")
        assert "not enqueued" in page.inner_text("table.callbacks")
        assert page.locator("table.members tbody a").count() == 8
        assert no_horizontal_scroll(page), f"/batches/{running} scrolls sideways at {width} px"
        # the finished batch links the callback job its last member enqueued
        page.goto(f"{served.url}/batches/{done}")
        assert page.locator("#progress progress").get_attribute("value") == "100"
        page.click("table.callbacks a")
        page.wait_for_url("**/jobs/*")
        assert "report" in page.inner_text("main")
        page.goto(f"{served.url}/batches?state=completed")
        assert page.locator("tbody td:first-child a").all_inner_texts() == [str(done)]
    assert served.foreign() == []
