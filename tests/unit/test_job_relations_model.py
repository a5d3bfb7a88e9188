"""The pure model of a job's place in the graph (architecture §16): ``JobRelations`` as
``awa job show`` prints it and as its JSON carries it."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from awa_cli.history import JobTimeline, show_json
from awa_cli.jobs import JOB_ROW_FIELDS, JobRow, JobState
from awa_cli.workflows import JobRelations, Relative


def test_lines_name_the_workflow_batch_and_the_first_relatives() -> None:
    rel = JobRelations(
        parents=[Relative(2, "transform", "running", "clean"), Relative(3, "x", "deleted")],
        children=[Relative(9, "report", "failed (dead letter)")],
        parent_count=2,
        child_count=40,
        workflow_id=1,
        workflow_name="etl",
        step="load",
        batch_id=7,
        batch_callback="on_success",
    )
    assert rel.lines() == [
        "workflow: 1 'etl', step load",
        "batch: on_success callback of batch 7",
        "parents (2):",
        "  job 2: transform, running (step clean)",
        "  job 3: x, deleted",
        "children (first 1 of 40):",
        "  job 9: report, failed (dead letter)",
    ]
    data = rel.to_json()
    assert data["workflow"] == {"id": 1, "name": "etl", "step": "load"}
    assert data["batch"] == {"id": 7, "callback": "on_success"}
    assert data["children"] == [
        {"id": 9, "kind": "report", "state": "failed (dead letter)", "step": None}
    ]
    assert not rel.empty and JobRelations().empty and JobRelations().lines() == []
    assert JobRelations(batch_id=3).lines() == ["batch: member of batch 3"]


def test_show_json_adds_the_relations_only_when_there_are_any() -> None:
    now = datetime(2026, 12, 2, tzinfo=UTC)
    values: dict[str, Any] = dict.fromkeys(JOB_ROW_FIELDS)
    values |= {"id": 5, "kind": "k", "queue": "default", "args": {}, "state": JobState.BLOCKED}
    values |= {"priority": 2, "attempt": 0, "max_attempts": 25, "run_at": now, "run_lease": 0}
    values |= {"errors": [], "metadata": {}, "tags": [], "created_at": now}
    row = JobRow(**values)
    history = JobTimeline(row, [])
    plain = show_json(history, {}, JobRelations())
    assert "parents" not in plain and plain == show_json(history, {})
    child = show_json(history, {}, JobRelations([Relative(4, "k", "running")], [], 1, 0))
    assert child["parents"] == [{"id": 4, "kind": "k", "state": "running", "step": None}]
    assert (child["children"], child["parent_count"], child["workflow"]) == ([], 1, None)
