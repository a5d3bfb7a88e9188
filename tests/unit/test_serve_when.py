"""The dashboard shows every timestamp to the second, in UTC and labelled so (D27), ISO strings
from a job's entries too; progress rounded; list cells clipped; audit details on one line."""

from __future__ import annotations


def test_timestamps_are_shown_to_the_second_in_utc_with_the_label() -> None:
    from datetime import UTC, datetime, timedelta, timezone

    from awa_cli.serve.common import format_when

    assert format_when("2026-12-01 10:31:55.465749+00") == "2026-12-01 10:31:55 UTC"
    assert format_when("2026-12-01T10:35:25+00:00") == "2026-12-01 10:35:25 UTC"
    assert format_when(datetime(2026, 12, 1, 9, 0, 1, 5, tzinfo=UTC)) == "2026-12-01 09:00:01 UTC"
    berlin = timezone(timedelta(hours=1))
    assert format_when(datetime(2026, 12, 1, 10, 0, tzinfo=berlin)) == "2026-12-01 09:00:00 UTC"
    assert format_when("2026-12-01T10:00:00+01:00") == "2026-12-01 09:00:00 UTC"
    assert format_when(datetime(2026, 12, 1, 9, 0)) == "2026-12-01 09:00:00 UTC"  # naive: UTC
    assert format_when("yesterday") == "yesterday" and format_when(None) == "-"
    assert format_when(7) == "7"


def test_progress_is_rounded() -> None:
    from awa_cli.serve.common import format_percent

    assert format_percent(16.666666666666668) == "16.7%"
    assert format_percent(60) == "60%" and format_percent(100.0) == "100%"
    assert format_percent(None) == "-"


def test_list_cells_are_clipped_and_bounded() -> None:
    from awa_cli.serve.common import CLIP_CHARS, FULL_CHARS, clip

    small = clip({"to": "a@example.com"})
    assert small == {"short": '{"to": "a@example.com"}', "full": "", "more": ""}
    big = clip({"blob": "x" * 10_000})
    assert len(big["short"]) == CLIP_CHARS and big["short"].endswith("…")
    assert len(big["full"]) == FULL_CHARS + 1 and big["more"].endswith("more characters")
    traceback = clip("ValueError: bad\n  line two")
    assert traceback["short"] == "ValueError: bad line two" and "\n" in traceback["full"]


def test_audit_details_on_one_line() -> None:
    from awa_cli.serve.common import format_detail

    assert format_detail({"count": 1500}) == "count=1500"
    assert format_detail({"status": 404, "error": "job 9 not found"}) == (
        "status=404 error=job 9 not found"
    )
    assert format_detail({"left": [3, 4]}) == "left=[3, 4]"
    assert format_detail({}) == "-" and format_detail(None) == "-"
