"""`awa queue pause|resume`, `awa job retry|cancel|purge` by filter and `awa dlq ...` through
the CLI runner against a real database: output, --json, exit codes and the audit log."""

from __future__ import annotations

import getpass
import json
from typing import Any

import psycopg
import pytest
from click.testing import Result


pytestmark = pytest.mark.integration


def sql(dsn: str, statement: str, *params: object) -> list[tuple[Any, ...]]:
    with psycopg.connect(dsn, autocommit=True) as conn:
        cur = conn.execute(statement, params)  # type: ignore[arg-type]
        return cur.fetchall() if cur.description else []


def failed_jobs(dsn: str, n: int, queue: str = "default", kind: str = "mail") -> list[int]:
    rows = sql(
        dsn,
        "INSERT INTO awa.jobs (kind, queue, args, state, attempt, max_attempts, finalized_at)"
        " SELECT %s, %s, jsonb_build_object('n', g), 'failed', 1, 1, now()"
        " FROM generate_series(1, %s) AS g RETURNING id",
        kind,
        queue,
        n,
    )
    return sorted(r[0] for r in rows)


def actor() -> str:
    return f"cli:{getpass.getuser()}"


def error_line(result: Result) -> str:
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "Traceback" not in result.output, result.output
    return lines[0]


def test_queue_pause_resume_list_and_stats(awa: Any, dsn: str) -> None:
    paused = awa("queue", "pause", "email", "--json")
    assert paused.exit_code == 0, paused.output
    body = json.loads(paused.stdout)
    assert body["queue"] == "email" and body["paused"] is True and body["paused_by"] == actor()
    listed = json.loads(awa("queue", "list", "--json").stdout)
    assert {q["queue"]: q["paused"] for q in listed} == {"default": False, "email": True}
    stats = json.loads(awa("queue", "stats", "email", "--json").stdout)
    assert stats[0]["paused"] is True
    table = awa("queue", "list")
    assert "email\tpaused" in table.stdout
    resumed = awa("queue", "resume", "email")
    assert resumed.exit_code == 0 and "queue email resumed" in resumed.stdout
    assert json.loads(awa("queue", "list", "--json").stdout)[1]["paused"] is False
    audit = sql(dsn, "SELECT actor, action, target, result FROM awa.audit_log ORDER BY id")
    assert audit == [
        (actor(), "queue.pause", "email", "ok"),
        (actor(), "queue.resume", "email", "ok"),
    ]
    bad = awa("queue", "pause", "")
    assert bad.exit_code == 2 and "queue" in error_line(bad)


def test_job_bulk_commands_count_json_dry_run_and_refusal(awa: Any, dsn: str) -> None:
    ids = failed_jobs(dsn, 4)
    failed_jobs(dsn, 2, queue="other")
    refused = awa("job", "retry")
    assert refused.exit_code == 2 and "--all" in error_line(refused)
    mixed = awa("job", "retry", str(ids[0]), "--queue", "default")
    assert mixed.exit_code == 2
    dry = awa("job", "retry", "--queue", "default", "--dry-run", "--json")
    assert dry.exit_code == 0 and json.loads(dry.stdout) == {"count": 4}
    single = awa("job", "retry", str(ids[0]), "--json")  # a positional ID: the single retry
    assert single.exit_code == 0 and json.loads(single.stdout)["state"] == "available"
    bulk = awa("job", "retry", "--state", "failed", "--queue", "default")
    assert bulk.exit_code == 0 and bulk.stdout.strip() == "3 jobs retried"
    cancel = awa("job", "cancel", "--queue", "default", "--json")
    assert cancel.exit_code == 0 and json.loads(cancel.stdout) == {"count": 4}
    bad_state = awa("job", "cancel", "--state", "running", "--all")
    assert bad_state.exit_code == 2
    bad_age = awa("job", "purge", "--older-than", "soon")
    assert bad_age.exit_code == 2 and "--older-than" in error_line(bad_age)
    young = awa("job", "purge", "--older-than", "1d", "--json")
    assert json.loads(young.stdout) == {"count": 0}
    purge = awa("job", "purge", "--all", "--json")
    assert purge.exit_code == 0 and json.loads(purge.stdout) == {"count": 6}
    assert sql(dsn, "SELECT count(*) FROM awa.jobs") == [(0,)]
    audit = sql(dsn, "SELECT action, target, result, detail FROM awa.audit_log ORDER BY id")
    refusal = {"reason": "retry needs a filter (--state, --queue, --kind) or --all"}
    assert audit == [
        ("job.retry", "all", "refused", refusal),  # the reason is in detail (D10)
        ("job.retry", f"job:{ids[0]}", "ok", {}),  # the one-job retry
        ("job.retry", "state=failed queue=default", "ok", {"count": 3}),
        ("job.cancel", "queue=default", "ok", {"count": 4}),
        ("job.purge", "older_than=86400.0", "ok", {"count": 0}),
        ("job.purge", "all", "ok", {"count": 6}),
    ]


def test_dlq_commands(awa: Any, dsn: str) -> None:
    ids = failed_jobs(dsn, 3)
    other = failed_jobs(dsn, 2, queue="other", kind="sms")
    empty = awa("dlq", "depth", "--json")
    assert json.loads(empty.stdout) == {"total": 0, "queues": {}}
    assert awa("dlq", "move").exit_code == 2
    dry = awa("dlq", "move", "--queue", "default", "--dry-run", "--json")
    assert json.loads(dry.stdout) == {"count": 3}
    moved = awa("dlq", "move", "--all", "--reason", "outage")
    assert moved.exit_code == 0 and moved.stdout.strip().startswith("5 ")
    depth = json.loads(awa("dlq", "depth", "--json").stdout)
    assert depth == {"total": 5, "queues": {"default": 3, "other": 2}}
    listed = json.loads(awa("dlq", "list", "--queue", "other", "--json").stdout)
    assert sorted(d["id"] for d in listed) == other and listed[0]["dead_reason"] == "manual"
    table = awa("dlq", "list", "--kind", "mail")
    assert table.exit_code == 0 and table.stdout.count("\tmanual\t") == 3
    shown = awa("dlq", "show", str(ids[0]))
    assert shown.exit_code == 0 and "dead_reason: manual" in shown.stdout
    assert "moved to the dead-letter queue: outage" in shown.stdout
    assert json.loads(awa("dlq", "show", str(ids[0]), "--json").stdout)["id"] == ids[0]
    missing = awa("dlq", "show", "999999")
    assert missing.exit_code == 4 and "999999" in error_line(missing)
    job_show = awa("job", "show", str(ids[0]))
    assert job_show.exit_code == 4 and f"awa dlq show {ids[0]}" in error_line(job_show)
    back = awa("dlq", "retry", str(ids[0]), "--to-queue", "again", "--json")
    assert back.exit_code == 0, back.output
    row = json.loads(back.stdout)
    assert row["id"] == ids[0] and row["queue"] == "again" and row["attempt"] == 0
    assert row["errors"][-1]["error"] == "retried from the dead-letter queue"
    assert awa("dlq", "retry", "999999").exit_code == 4
    bulk = awa("dlq", "retry", "--kind", "mail", "--json")
    assert json.loads(bulk.stdout) == {"count": 2}
    assert awa("dlq", "purge").exit_code == 2
    assert json.loads(awa("dlq", "purge", str(other[0]), "--json").stdout) == {"count": 1}
    assert json.loads(awa("dlq", "purge", "--older-than", "1h", "--json").stdout) == {"count": 0}
    assert json.loads(awa("dlq", "purge", "--all", "--json").stdout) == {"count": 1}
    assert json.loads(awa("dlq", "depth", "--json").stdout)["total"] == 0
    audit = sql(dsn, "SELECT action, result, detail->>'count' FROM awa.audit_log ORDER BY id")
    assert audit == [
        ("dlq.move", "refused", None),
        ("dlq.move", "ok", "5"),
        ("dlq.retry", "ok", "1"),
        ("dlq.retry", "failed", None),
        ("dlq.retry", "ok", "2"),
        ("dlq.purge", "refused", None),
        ("dlq.purge", "ok", "1"),
        ("dlq.purge", "ok", "0"),
        ("dlq.purge", "ok", "1"),
    ]


def test_dlq_retry_of_a_held_unique_key_exits_1_and_stays(awa: Any, dsn: str) -> None:
    [job_id] = failed_jobs(dsn, 1)
    sql(dsn, "UPDATE awa.jobs SET unique_key = '\\x01', unique_states = '{available}'")
    assert awa("dlq", "move", "--all").exit_code == 0
    sql(
        dsn,
        "INSERT INTO awa.jobs (kind, queue, args, unique_key, unique_states)"
        " VALUES ('mail', 'default', '{}', '\\x01', '{available}')",
    )
    held = awa("dlq", "retry", str(job_id))
    assert held.exit_code == 1 and "unique key" in error_line(held)
    assert sql(dsn, "SELECT count(*) FROM awa.dead_letters WHERE id = %s", job_id) == [(1,)]
