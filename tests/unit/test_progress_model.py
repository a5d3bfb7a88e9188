"""The pure parts of issue 19: progress validation and its throttle, and the job timeline."""

from __future__ import annotations

import json
import math
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from tests.helpers import memory_row
from awa_cli.attempts import decide
from awa_cli.errors import ValidationError
from awa_cli.history import JobTimeline, RelatedJob, timeline, trigger_of
from awa_cli.jobs import JobRow, JobState
from awa_cli.progress import MAX_PROGRESS_BYTES, ProgressTracker, progress_value
from awa_cli.testing import HandlerJob

NOW = datetime(2026, 12, 1, 9, 0, tzinfo=UTC)


@pytest.mark.parametrize(
    ("percent", "message", "checkpoint", "field"),
    [
        (-1, None, {}, "percent"),
        (100.5, None, {}, "percent"),
        (math.nan, None, {}, "percent"),
        (True, None, {}, "percent"),
        ("50", None, {}, "percent"),
        (50, 7, {}, "message"),
        (50, None, {"x": object()}, "checkpoint"),
        (50, None, {"x": "a" * MAX_PROGRESS_BYTES}, "progress"),
    ],
)
def test_a_bad_value_names_the_field(
    percent: Any, message: Any, checkpoint: Any, field: str
) -> None:
    with pytest.raises(ValidationError) as raised:
        progress_value(percent, message, checkpoint)
    assert raised.value.field == field


def test_a_good_value_is_stored_as_its_json() -> None:
    value, text = progress_value(0, None, {"at": NOW, "n": [1, 2]})
    assert value == json.loads(text)
    assert value["percent"] == 0 and value["message"] is None
    assert value["checkpoint"] == {"at": NOW.isoformat(), "n": [1, 2]}
    assert datetime.fromisoformat(value["at"]).tzinfo is not None
    assert progress_value(100, "done", {})[0]["percent"] == 100


def test_the_tracker_gives_a_value_at_most_once_a_second_and_the_outcome_the_latest() -> None:
    tracker = ProgressTracker({"percent": 10, "message": None, "checkpoint": {}, "at": ""})
    assert tracker.take(0.0) is None and tracker.final() is None  # nothing reported yet
    for i in range(5):
        tracker.report({"percent": i}, f"{i}")
    assert tracker.take(100.0) == "4"  # the latest of the burst
    tracker.report({"percent": 5}, "5")
    assert not tracker.due(100.5) and tracker.take(100.5) is None  # within the second
    assert tracker.take(101.0) == "5"
    assert tracker.take(105.0) is None  # nothing new
    assert tracker.final() == "5" and tracker.value == {"percent": 5}


def test_a_handler_job_keeps_its_progress_when_a_value_is_refused() -> None:
    job = HandlerJob({"x": 1}, kind="k", progress={"percent": 5, "checkpoint": {"i": 1}})
    assert job.progress == {"percent": 5, "checkpoint": {"i": 1}}
    with pytest.raises(ValidationError, match="percent"):
        job.set_progress(200)
    assert job.progress == {"percent": 5, "checkpoint": {"i": 1}}
    job.set_progress(60, "more", i=2)
    assert job.progress is not None and job.progress["checkpoint"] == {"i": 2}
    result = decide(job.row, args=job.args, result=None, exc=None, duration=0, record=job.finish())
    assert result.progress is not None and json.loads(result.progress)["percent"] == 60


def _row(**fields: Any) -> JobRow:
    """Job 7's completed third attempt (of 5) with its output and last progress."""
    values: dict[str, Any] = dict(kind="k", queue="q", args={}, state="completed", attempt=3)
    values.update(max_attempts=5, run_lease=3, output={"ok": True}, attempted_by="h:3")
    values.update(attempted_at=NOW + timedelta(minutes=3), finalized_at=NOW + timedelta(minutes=4))
    values["progress"] = {"percent": 100, "message": "done", "checkpoint": {}, "at": ""}
    values.update(fields)
    return memory_row(NOW, **values)


def test_the_timeline_of_a_job_retried_rescued_then_completed() -> None:
    errors = [
        {"error": "ValueError: x", "attempt": 1, "at": "t1", "worker": "h:1", "started_at": "s1"},
        {"error": "heartbeat stale: worker presumed dead", "attempt": 2, "at": "t2"},
    ]
    row = _row(errors=errors, metadata={"awa.trigger_id": 3})
    tl = timeline(row, [RelatedJob(9, "report", "available")], RelatedJob(3, "k0", "completed"))
    first, second, third = tl.attempts
    assert (first.outcome, first.worker, first.started_at, first.error) == (
        "retried",
        "h:1",
        "s1",
        "ValueError: x",
    )
    assert (second.outcome, second.rescue_reason, second.worker) == (
        "rescued",
        "stale_heartbeat",
        None,
    )
    assert (third.outcome, third.worker, third.error) == ("completed", "h:3", None)
    assert third.ended_at == row.finalized_at.isoformat()  # type: ignore[union-attr]
    assert trigger_of(row) == 3
    data = tl.to_json()
    assert json.loads(json.dumps(data)) == data  # JSON-ready
    assert data["follow_ups"] == [{"id": 9, "kind": "report", "state": "available"}]
    text = "\n".join(tl.lines())
    assert "produced by job 3 (k0, completed)" in text
    assert "attempt 2: rescued, ended t2 (rescued: stale_heartbeat): heartbeat stale" in text
    assert "follow-up job 9 (report, available)" in text
    assert "progress 100% done" in text and 'output   {"ok": true}' in text


def test_the_timeline_of_a_failed_job_and_of_a_waiting_one() -> None:
    failed = _row(
        state=JobState.FAILED,
        attempt=1,
        errors=[{"error": "TerminalError: no", "attempt": 1, "at": "t", "terminal": True}],
    )
    [only] = timeline(failed).attempts
    assert (only.outcome, only.error, only.worker) == ("failed", "TerminalError: no", "h:3")
    import uuid

    callback = uuid.uuid4()
    waiting = _row(
        state=JobState.WAITING_EXTERNAL,
        attempt=1,
        callback_id=callback,
        callback_timeout_at=NOW,
        finalized_at=None,
    )
    tl = timeline(waiting)
    assert isinstance(tl, JobTimeline)
    assert tl.attempts[0].outcome == "waiting_external" and tl.attempts[0].ended_at is None
    assert tl.callback == {"id": str(callback), "timeout_at": NOW.isoformat(), "waiting": True}
    assert trigger_of(_row(metadata={"awa.trigger_id": "x"})) is None


def test_a_failed_write_offers_the_value_again() -> None:
    tracker = ProgressTracker()
    tracker.untake()  # nothing reported: nothing to offer
    assert tracker.take(10.0) is None
    tracker.report({"percent": 1}, "1")
    assert tracker.take(10.0) == "1"
    tracker.untake()
    assert tracker.take(10.1) == "1"  # at once, not a second later
