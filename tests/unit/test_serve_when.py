"""The dashboard shows every timestamp to the second, ISO strings from a job's entries too."""

from __future__ import annotations


def test_timestamps_are_shown_to_the_second() -> None:
    from datetime import UTC, datetime

    from awa_cli.serve.common import format_when

    assert format_when("2026-12-01 10:31:55.465749+00") == "2026-12-01 10:31:55"
    assert format_when("2026-12-01T10:35:25+00:00") == "2026-12-01 10:35:25"
    assert format_when(datetime(2026, 12, 1, 9, 0, 1, 5, tzinfo=UTC)) == "2026-12-01 09:00:01"
    assert format_when("yesterday") == "yesterday" and format_when(None) == "-"
    assert format_when(7) == "7"
