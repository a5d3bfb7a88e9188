"""The CLI's one-job commands leave an audit row, written by the outcome core in the
transition's own transaction (architecture §15.4; issue 28), `awa audit` reads the log
(trial D28), and the CLI details of D14, D20 and D23 and `awa dlq purge ID`'s exit 4."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from click.testing import Result

import awa_cli as awa
from awa_cli.audit import cli_actor
from tests.helpers import ROOT, audit_rows, job_row, run_python
from tests.integration.commands.test_callback_cli import invoke, park

pytestmark = [pytest.mark.integration]


@pytest.fixture
def config(callbacks_config: Path) -> Path:
    return callbacks_config


def one_error_line(result: Result) -> str:
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "Traceback" not in result.output, result.output
    return lines[0]


def test_job_cancel_and_retry_of_one_id_are_audited(dsn: str, config: Path) -> None:
    with awa.Client(dsn) as client:
        job = client.insert({"n": 1}, kind="park", queue="nowhere")
    assert invoke(config, dsn, "job", "cancel", str(job.id)).exit_code == 0
    assert invoke(config, dsn, "job", "retry", str(job.id)).exit_code == 0
    missing = invoke(config, dsn, "job", "cancel", "999999")
    assert missing.exit_code == 4
    actor = cli_actor()
    assert audit_rows(dsn) == [
        (actor, "job.cancel", f"job:{job.id}", "ok", {}),
        (actor, "job.retry", f"job:{job.id}", "ok", {}),
    ]  # an action that changed nothing (unknown id) leaves no "ok" row


def test_callback_commands_are_audited_with_the_callback_id(dsn: str, config: Path) -> None:
    a, b, c, d = (park(dsn) for _ in range(4))
    assert invoke(config, dsn, "callback", "complete", str(a.callback_id)).exit_code == 0
    assert (
        invoke(config, dsn, "callback", "fail", str(b.callback_id), "--error", "no").exit_code == 0
    )
    assert invoke(config, dsn, "callback", "retry", str(c.callback_id)).exit_code == 0
    assert invoke(config, dsn, "callback", "resume", str(d.callback_id)).exit_code == 0
    actor = cli_actor()
    assert audit_rows(dsn) == [
        (actor, "callback.complete", f"job:{a.id}", "ok", {"callback_id": str(a.callback_id)}),
        (
            actor,
            "callback.fail",
            f"job:{b.id}",
            "ok",
            {"callback_id": str(b.callback_id), "error": "no"},
        ),
        (actor, "callback.retry", f"job:{c.id}", "ok", {"callback_id": str(c.callback_id)}),
        (actor, "callback.resume", f"job:{d.id}", "ok", {"callback_id": str(d.callback_id)}),
    ]


def test_a_nul_in_a_callback_error_is_exit_2_and_changes_nothing(dsn: str, config: Path) -> None:
    row = park(dsn)
    result = invoke(config, dsn, "callback", "fail", str(row.callback_id), "--error", "a\x00b")
    assert result.exit_code == 2, result.output
    assert "error: contains a NUL character" in one_error_line(result)
    assert job_row(dsn, row.id).state == "waiting_external"
    with awa.Client(dsn) as client, pytest.raises(awa.ValidationError):
        client.fail_external(row.callback_id, "a\x00b")
    assert audit_rows(dsn) == []


def test_awa_audit_lists_filters_and_prints_json(dsn: str, config: Path) -> None:
    with awa.Client(dsn) as client:
        one = client.insert({"n": 1}, kind="park", queue="nowhere")
        two = client.insert({"n": 2}, kind="park", queue="nowhere")
    invoke(config, dsn, "job", "cancel", str(one.id))
    invoke(config, dsn, "job", "cancel", str(two.id))
    invoke(config, dsn, "queue", "pause", "nowhere")
    refused = invoke(config, dsn, "job", "retry")
    assert refused.exit_code == 2
    result = invoke(config, dsn, "audit", "--json")
    assert result.exit_code == 0, result.output
    entries = json.loads(result.stdout)
    assert [e["action"] for e in entries] == [
        "job.retry",
        "queue.pause",
        "job.cancel",
        "job.cancel",
    ]
    assert entries[0]["result"] == "refused" and "--all" in entries[0]["detail"]["reason"]
    assert set(entries[0]) == {"id", "at", "actor", "action", "target", "result", "detail"}
    by_job = json.loads(invoke(config, dsn, "audit", "--job", str(two.id), "--json").stdout)
    assert [(e["action"], e["target"]) for e in by_job] == [("job.cancel", f"job:{two.id}")]
    cancels = json.loads(invoke(config, dsn, "audit", "--action", "job.cancel", "--json").stdout)
    assert len(cancels) == 2
    limited = json.loads(invoke(config, dsn, "audit", "--limit", "1", "--json").stdout)
    assert len(limited) == 1
    assert json.loads(invoke(config, dsn, "audit", "--since", "1h", "--json").stdout) == entries
    future = invoke(config, dsn, "audit", "--since", "2999-01-01T00:00:00", "--json")
    assert json.loads(future.stdout) == []
    bad = invoke(config, dsn, "audit", "--since", "yesterday-ish")
    assert bad.exit_code == 2 and "--since" in one_error_line(bad)
    text = invoke(config, dsn, "audit")
    assert text.exit_code == 0 and "queue.pause" in text.stdout and "nowhere" in text.stdout


def test_dlq_purge_of_an_id_that_is_not_a_dead_letter_exits_4(dsn: str, config: Path) -> None:
    with awa.Client(dsn) as client:
        job = client.insert({"n": 1}, kind="park", queue="nowhere")
    result = invoke(config, dsn, "dlq", "purge", str(job.id))
    assert result.exit_code == 4, result.output
    assert f"dead letter {job.id} not found" in one_error_line(result)


def test_bulk_cancel_prints_a_summary_not_a_line_per_job(dsn: str, config: Path) -> None:
    with awa.Client(dsn) as client:
        for n in range(30):
            client.insert({"n": n}, kind="park", queue="bulk")
    dry = invoke(config, dsn, "job", "cancel", "--queue", "bulk", "--dry-run")
    assert dry.stdout.strip() == "30 jobs would be cancelled"  # D23's wording
    # A real process: its log lines go to its stderr as an operator's terminal sees them.
    argv = ["-m", "awa_cli", "--config", str(config), "--database-url", dsn]
    env = {**os.environ, "PYTHONPATH": str(ROOT), "NO_COLOR": "1"}
    done = run_python(*argv, "job", "cancel", "--queue", "bulk", env=env)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "30 jobs cancelled"
    assert "job_cancelled" not in done.stderr, done.stderr  # D14: no line per job
    with awa.Client(dsn) as client:
        client.insert({"n": 0}, kind="park", queue="bulk")
    verbose = run_python(*argv, "-v", "job", "cancel", "--queue", "bulk", env=env)
    assert verbose.stderr.count("action=job_cancelled") == 1, verbose.stderr  # -v keeps them
    refused = invoke(config, dsn, "job", "cancel")
    assert one_error_line(refused) == (
        "Error: cancel needs a filter (--state, --queue, --kind) or --all"
    )
