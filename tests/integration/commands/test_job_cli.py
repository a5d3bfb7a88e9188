"""`awa job` through click's CliRunner and the real console script, against a real database."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from datetime import datetime, timedelta, UTC
from pathlib import Path
from typing import Any

import psycopg
import pytest
from click.testing import Result


pytestmark = pytest.mark.integration


def _count(db: psycopg.Connection) -> int:
    row = db.execute("SELECT count(*) FROM awa.jobs").fetchone()
    db.commit()
    assert row is not None
    return int(row[0])


def _one_error_line(result: Result) -> str:
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, result.stderr
    assert "Traceback" not in result.stderr and "Traceback" not in result.stdout
    assert lines[0].startswith("Error: ")
    return lines[0]


def _awa_script() -> str:
    script = Path(sys.executable).parent / "awa"
    if script.exists():
        return str(script)
    found = shutil.which("awa")
    assert found, "the awa console script is not installed"
    return found


def test_enqueue_json_then_list_and_show(awa: Any, db: psycopg.Connection) -> None:
    before = datetime.now(UTC)
    result = awa(
        "job",
        "enqueue",
        "send_report",
        "--args",
        '{"report": 7, "to": "ops@example.com"}',
        "--queue",
        "reports",
        "--priority",
        "1",
        "--max-attempts",
        "3",
        "--run-at",
        "+5m",
        "--unique",
        "--json",
    )
    assert result.exit_code == 0, result.output
    job = json.loads(result.stdout)
    assert job["kind"] == "send_report"
    assert job["queue"] == "reports"
    assert job["priority"] == 1 and job["max_attempts"] == 3
    assert job["args"] == {"report": 7, "to": "ops@example.com"}
    assert job["state"] == "scheduled"
    assert job["unique_key"]
    run_at = datetime.fromisoformat(job["run_at"])
    assert (
        before + timedelta(minutes=4, seconds=50)
        < run_at
        < datetime.now(UTC) + timedelta(minutes=5, seconds=10)
    )
    stored = db.execute(
        "SELECT kind, queue, priority, state::text FROM awa.jobs WHERE id = %s", (job["id"],)
    ).fetchone()
    assert stored == ("send_report", "reports", 1, "scheduled")
    db.commit()

    second = awa("job", "enqueue", "other", "--json")
    assert second.exit_code == 0, second.output
    other = json.loads(second.stdout)
    assert other["args"] == {} and other["state"] == "available" and other["queue"] == "default"

    for args in (["job", "list", "--json"], ["--json", "job", "list"]):
        listed = awa(*args)
        assert listed.exit_code == 0, listed.output
        rows = json.loads(listed.stdout)
        assert isinstance(rows, list)
        assert [r["id"] for r in rows] == [other["id"], job["id"]]

    filtered = json.loads(awa("job", "list", "--json", "--state", "scheduled").stdout)
    assert [r["id"] for r in filtered] == [job["id"]]
    filtered = json.loads(awa("job", "list", "--json", "--kind", "other").stdout)
    assert [r["id"] for r in filtered] == [other["id"]]
    filtered = json.loads(awa("job", "list", "--json", "--queue", "reports", "--limit", "1").stdout)
    assert [r["id"] for r in filtered] == [job["id"]]

    plain = awa("job", "list")
    assert plain.exit_code == 0
    lines = plain.stdout.splitlines()
    # plain text when not a terminal: a header line, then one line per job
    assert lines[0].split() == ["id", "kind", "queue", "state", "attempt", "run_at"]
    assert lines[1].split()[:5] == [str(other["id"]), "other", "default", "available", "0/25"]
    assert lines[2].split()[:5] == [str(job["id"]), "send_report", "reports", "scheduled", "0/3"]

    shown = awa("job", "show", str(job["id"]))
    assert shown.exit_code == 0, shown.output
    out = shown.stdout
    assert f"id: {job['id']}" in out
    assert "kind: send_report" in out and "queue: reports" in out and "state: scheduled" in out
    assert 'args: {"report": 7, "to": "ops@example.com"}' in out

    shown_json = awa("job", "show", str(job["id"]), "--json")
    assert shown_json.exit_code == 0
    shown_data = json.loads(shown_json.stdout)
    timeline = shown_data.pop("timeline")  # the row, plus its history (architecture §11)
    # show adds where the job stands under the limits (architecture §13)
    assert shown_data.pop("why_not_running").startswith("scheduled for ")
    assert shown_data.pop("limit") is None and shown_data.pop("concurrency_key") is None
    assert shown_data == job
    assert timeline["id"] == job["id"] and timeline["attempts"] == []
    assert json.loads(awa("--json", "job", "show", str(job["id"])).stdout)["id"] == job["id"]


def test_enqueue_plain_text(awa: Any) -> None:
    result = awa("job", "enqueue", "ping", "--args", '{"n": 1}')
    assert result.exit_code == 0, result.output
    assert "enqueued" in result.stderr
    lines = result.stdout.splitlines()
    assert lines[1].split()[1:4] == ["ping", "default", "available"]


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--args", "{not json"], "--args"),
        (["--args", "[1, 2]"], "--args"),
        (["--args", "{}", "--priority", "9"], "priority"),
        (["--args", "{}", "--priority", "0"], "priority"),
        (["--args", "{}", "--max-attempts", "1001"], "max_attempts"),
        (["--args", "{}", "--queue", "q" * 201], "queue"),
        (["--args", '{"a": "\\u0000"}'], "args"),
        (["--args", "{}", "--run-at", "tomorrow"], "--run-at"),
        (["--args", "{}", "--run-at", "+5 parsecs"], "--run-at"),
    ],
)
def test_enqueue_bad_input_exits_2_and_writes_nothing(
    awa: Any, db: psycopg.Connection, args: list[str], needle: str
) -> None:
    result = awa("job", "enqueue", "k", *args)
    assert result.exit_code == 2, result.output
    line = _one_error_line(result)
    assert needle in line
    assert line.count(needle) == 1 or needle in ("args", "queue"), line  # the prefix once
    assert result.stdout == ""
    assert _count(db) == 0


def test_bad_input_is_rejected_before_connecting(awa: Any) -> None:
    # validation happens first: an unreachable database is never tried
    bogus = "postgresql://nobody@/nodb?host=/nonexistent-awa-socket&port=1"
    result = awa("job", "enqueue", "k", "--args", "{}", "--priority", "9", database_url=bogus)
    assert result.exit_code == 2
    assert "priority" in _one_error_line(result)


def test_show_missing_job_exits_4(awa: Any) -> None:
    result = awa("job", "show", "999999")
    assert result.exit_code == 4, result.output
    line = _one_error_line(result)
    assert "999999" in line and "not found" in line
    assert result.stdout == ""
    for verb in ("cancel", "retry"):
        result = awa("job", verb, "999999")
        assert result.exit_code == 4, result.output
        _one_error_line(result)


def test_duplicate_unique_enqueue_exits_1(awa: Any, db: psycopg.Connection) -> None:
    first = awa("job", "enqueue", "once", "--args", '{"a": 1}', "--unique", "--json")
    assert first.exit_code == 0, first.output
    job_id = json.loads(first.stdout)["id"]
    again = awa("job", "enqueue", "once", "--args", '{"a": 1}', "--unique")
    assert again.exit_code == 1, again.output
    line = _one_error_line(again)
    assert "once" in line and str(job_id) in line
    # different args are a different key; no --unique is never a duplicate
    assert awa("job", "enqueue", "once", "--args", '{"a": 2}', "--unique").exit_code == 0
    assert awa("job", "enqueue", "once", "--args", '{"a": 1}').exit_code == 0
    assert _count(db) == 3


def test_verbose_lets_the_exception_through(awa: Any) -> None:
    from awa_cli.results import JobNotFound

    with pytest.raises(JobNotFound):
        awa("-v", "job", "show", "999999")


def test_cancel_and_retry(awa: Any, db: psycopg.Connection) -> None:
    job_id = json.loads(awa("job", "enqueue", "k", "--json").stdout)["id"]
    cancelled = awa("job", "cancel", str(job_id), "--json")
    assert cancelled.exit_code == 0, cancelled.output
    assert json.loads(cancelled.stdout)["state"] == "cancelled"
    again = awa("job", "cancel", str(job_id))
    assert again.exit_code == 1
    assert "cancelled" in _one_error_line(again)
    retried = awa("job", "retry", str(job_id), "--json")
    assert retried.exit_code == 0, retried.output
    assert json.loads(retried.stdout)["state"] == "available"
    assert db.execute("SELECT state::text FROM awa.jobs WHERE id = %s", (job_id,)).fetchone() == (
        "available",
    )


# -- the real console script ------------------------------------------------------------------


def _run(*args: str, config: Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("AWA_CONFIG", "AWA_DATABASE_URL")}
    env.update(NO_COLOR="1", COLUMNS="120")
    return subprocess.run(
        [_awa_script(), "--config", str(config), *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
        cwd=config.parent,
    )


def test_console_script_migrate_enqueue_list(dsn: str, config_file: Path) -> None:
    migrated = _run("--database-url", dsn, "migrate", "--json", config=config_file)
    assert migrated.returncode == 0, migrated.stderr
    assert json.loads(migrated.stdout) == {"applied": []}  # the test database is already migrated

    enqueued = _run(
        "--database-url",
        dsn,
        "job",
        "enqueue",
        "from_shell",
        "--args",
        '{"x": 1}',
        "--json",
        config=config_file,
    )
    assert enqueued.returncode == 0, enqueued.stderr
    job = json.loads(enqueued.stdout)

    listed = _run("--database-url", dsn, "job", "list", "--json", config=config_file)
    assert listed.returncode == 0, listed.stderr
    rows = json.loads(listed.stdout)
    assert [(r["id"], r["kind"], r["args"]) for r in rows] == [(job["id"], "from_shell", {"x": 1})]


def test_console_script_errors(dsn: str, config_file: Path) -> None:
    missing = _run("--database-url", dsn, "job", "show", "999999", config=config_file)
    assert missing.returncode == 4
    lines = [line for line in missing.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("Error: "), missing.stderr
    assert "Traceback" not in missing.stderr

    verbose = _run("-v", "--database-url", dsn, "job", "show", "999999", config=config_file)
    assert verbose.returncode != 0
    assert "Traceback" in verbose.stderr and "JobNotFound" in verbose.stderr

    bad = _run("--database-url", dsn, "job", "enqueue", "k", "--args", "{oops", config=config_file)
    assert bad.returncode == 2
    assert [line for line in bad.stderr.splitlines() if line.strip()][0].startswith("Error: --args")
