"""The operator layer's pure models (awa_cli/dead_letters.py, queues.py, audit.py, bulk.py), no
database."""

from __future__ import annotations

import dataclasses
import json
from datetime import UTC, datetime
from typing import Any

import pytest

import awa_cli as awa
from awa_cli import audit
from awa_cli.audit import AuditEntry, cli_actor
from awa_cli.bulk import bulk_states, require_filter
from awa_cli.queues import QueueInfo
from awa_cli.dead_letters import DEAD_LETTER_FIELDS, DeadLetter, DeadReason, DlqDepth
from awa_cli.jobs import JOB_ROW_FIELDS, JobRow, JobState

AT = datetime(2026, 12, 1, 9, 0, tzinfo=UTC)


def record(**changes: Any) -> dict[str, Any]:
    base: dict[str, Any] = {name: None for name in DEAD_LETTER_FIELDS}
    base.update(
        id=7,
        kind="send_email",
        queue="mail",
        args={"to": "a"},
        state="failed",
        priority=2,
        attempt=3,
        max_attempts=3,
        run_at=AT,
        run_lease=3,
        errors=[{"error": "boom", "attempt": 3}],
        metadata={},
        tags=["x"],
        unique_key=memoryview(b"\x01"),
        unique_states="{available,running}",
        created_at=AT,
        finalized_at=AT,
        dead_at=AT,
        dead_reason="exhausted",
        callback_in_handler=False,  # a column JobRow does not carry: ignored
    )
    base.update(changes)
    return base


def test_dead_letter_has_the_job_row_fields_then_its_own() -> None:
    names = tuple(f.name for f in dataclasses.fields(DeadLetter))
    assert names == (*JOB_ROW_FIELDS, "dead_at", "dead_reason") == DEAD_LETTER_FIELDS
    assert awa.DeadLetter is DeadLetter and "DeadLetter" in awa.__all__


def test_dead_letter_from_record_converts_like_a_job_row() -> None:
    dead = DeadLetter.from_record(record())
    assert dead.state is JobState.FAILED and dead.dead_reason is DeadReason.EXHAUSTED
    assert dead.unique_key == b"\x01" and dead.unique_states == [
        JobState.AVAILABLE,
        JobState.RUNNING,
    ]
    assert dead.dead_at == AT
    assert dead.job_row() == JobRow.from_record(record())
    assert type(dead.job_row()) is JobRow
    with pytest.raises(dataclasses.FrozenInstanceError):
        dead.dead_reason = DeadReason.MANUAL  # type: ignore[misc]
    with pytest.raises(ValueError):
        DeadLetter.from_record(record(dead_reason="bored"))


def test_dead_letter_from_values_evolve_and_json() -> None:
    rec = record(dead_reason="manual")
    dead = DeadLetter.from_values([rec[name] for name in DEAD_LETTER_FIELDS])
    assert dead == DeadLetter.from_record(rec)
    moved = dead.evolve(queue="other")
    assert type(moved) is DeadLetter and moved.queue == "other" and moved.dead_at == AT
    out = dead.to_json()
    assert out["dead_reason"] == "manual" and out["dead_at"] == AT.isoformat()
    assert out["state"] == "failed" and out["unique_key"] == "01"
    assert json.loads(json.dumps(out)) == out


def test_dead_reasons_match_the_check_constraint() -> None:
    assert [str(r) for r in DeadReason] == [
        "exhausted",
        "terminal_error",
        "rescued",
        "callback_failed",
        "manual",
    ]


def test_depth_from_rows() -> None:
    rows = [
        {"queue": None, "n": 5, "is_total": True},
        {"queue": "a", "n": 3, "is_total": False},
        {"queue": "b", "n": 2, "is_total": False},
    ]
    assert DlqDepth.from_rows(rows).to_json() == {"total": 5, "queues": {"a": 3, "b": 2}}
    assert DlqDepth.from_rows([]) == DlqDepth(total=0, queues={})


def test_queue_info_and_audit_entry_json() -> None:
    info = QueueInfo.from_record(
        {"queue": "mail", "paused": True, "paused_at": AT, "paused_by": "cli:a", "updated_at": AT}
    )
    assert info.to_json() == {
        "queue": "mail",
        "paused": True,
        "paused_at": AT.isoformat(),
        "paused_by": "cli:a",
        "dead_letter": False,
        "updated_at": AT.isoformat(),
    }
    assert QueueInfo("q").to_json()["paused_at"] is None
    entry = AuditEntry.from_record(
        {
            "id": 1,
            "at": AT,
            "actor": "cli:a",
            "action": "dlq.retry",
            "target": "7",
            "result": "ok",
            "detail": None,
        }
    )
    assert entry.detail == {} and entry.to_json()["at"] == AT.isoformat()


def test_cli_actor_names_the_os_user(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(audit.getpass, "getuser", lambda: "alice")
    assert cli_actor() == "cli:alice"

    def nobody() -> str:
        raise OSError("no user")

    monkeypatch.setattr(audit.getpass, "getuser", nobody)
    assert cli_actor() == "cli:unknown"


def test_bulk_states() -> None:
    assert bulk_states("retry", []) == [JobState.CANCELLED, JobState.FAILED]
    assert bulk_states("cancel", ["available"]) == [JobState.AVAILABLE]
    assert bulk_states("purge", ["failed", JobState.FAILED]) == [JobState.FAILED]
    with pytest.raises(
        awa.ValidationError, match=r"^state: retry acts on cancelled, failed, not running$"
    ):
        bulk_states("retry", ["running"])
    with pytest.raises(awa.ValidationError, match=r"^state: "):
        bulk_states("purge", ["finished"])


def test_require_filter() -> None:
    require_filter("dlq purge", all_=False, queue="q", kind=None)
    require_filter("dlq purge", all_=True, queue=None, kind=None)
    require_filter("dlq purge", all_=True, queue="q", kind=None)  # the filter still applies
    with pytest.raises(awa.ValidationError) as info:
        require_filter("dlq purge", all_=False, queue=None, older_than=None)
    assert str(info.value) == "dlq purge needs a filter (--queue, --older-than) or --all"
