"""`awa batch list|show` (architecture §16) against a real database."""

from __future__ import annotations

import json
from typing import Any

import psycopg
import pytest

import awa_cli as awa

pytestmark = pytest.mark.integration


@pytest.fixture
def awa_cli(awa: Any) -> Any:
    """The CLI fixture ``awa`` of conftest, by another name: ``awa`` is the package here."""
    return awa


def _report(n: int) -> awa.EnqueueRequest:
    return awa.EnqueueRequest({"b": n}).with_opts(awa.InsertOpts(kind="report"))


def _batches(dsn: str) -> tuple[int, int]:
    with psycopg.connect(dsn) as conn:
        done = awa.insert_batch(conn, [{"n": 1}, {"n": 2}], kind="member", on_complete=_report(1))
        conn.execute(
            "UPDATE awa.jobs SET state = 'completed', finalized_at = now() WHERE batch_id = %s",
            (done.id,),
        )
        half = awa.insert_batch(conn, [{"n": 1}, {"n": 2}], kind="member", on_death=_report(2))
        conn.execute(
            "UPDATE awa.jobs SET state = 'failed', finalized_at = now()"
            " WHERE id = (SELECT min(id) FROM awa.jobs WHERE batch_id = %s)",
            (half.id,),
        )
    return done.id, half.id


def test_list_and_show(awa_cli: Any, dsn: str) -> None:
    done, half = _batches(dsn)
    listed = awa_cli("batch", "list", "--json")
    assert listed.exit_code == 0, listed.output
    rows = {r["id"]: r for r in json.loads(listed.stdout)}
    assert rows[done]["state"] == "completed" and rows[done]["succeeded"] is True
    assert rows[half]["state"] == "running"
    assert rows[half]["counts"] == {
        "pending": 1,
        "completed": 0,
        "failed": 1,
        "cancelled": 0,
        "total": 2,
    }
    running = json.loads(awa_cli("--json", "batch", "list", "--state", "running").stdout)
    assert [r["id"] for r in running] == [half]
    text = awa_cli("batch", "list")
    assert "1/2 (50%)" in text.stdout and "2/2 (100%)" in text.stdout

    shown = json.loads(awa_cli("batch", "show", str(half), "--json").stdout)
    assert shown["by_state"] == {"available": 1, "failed": 1}
    assert shown["callbacks"]["on_death"]["kind"] == "report"
    assert shown["callbacks"]["on_death"]["job_id"] is not None
    show = awa_cli("batch", "show", str(done))
    assert show.exit_code == 0
    assert "state: completed (succeeded)" in show.stdout
    assert "progress: 2/2 (100%)" in show.stdout
    assert "on_complete: report (job " in show.stdout


def test_unknown_batch_exits_4(awa_cli: Any) -> None:
    result = awa_cli("batch", "show", "424242")
    assert result.exit_code == 4
    assert result.stderr.strip() == "Error: batch 424242 not found"
    assert awa_cli("batch", "show", "x").exit_code == 2
    assert awa_cli("batch", "list", "--state", "nope").exit_code == 2
