"""`awa workflow list|show|cancel|retry [--json]` (architecture §16): output, audit, exit 4."""

from __future__ import annotations

import json
from dataclasses import dataclass

import pytest

import awa_cli as awa
from awa_cli.audit import AuditEntry
from awa_cli.cli import cli
from tests.helpers import AwaRunner, insert_chain

pytestmark = [pytest.mark.integration]


@dataclass
class Task:
    n: int


def test_list_show_cancel_retry(dsn: str, runner: AwaRunner) -> None:
    run = insert_chain(dsn, "nightly", ("extract", Task(1)), ("load", Task(2)))
    env = {"AWA_DATABASE_URL": dsn}
    listed = runner.invoke(cli, ["workflow", "list", "--json"], env=env)
    assert listed.exit_code == 0, listed.output
    [row] = json.loads(listed.output)
    assert row["id"] == run.id and row["state"] == "running"
    assert row["counts"] == {"available": 1, "blocked": 1}
    text = runner.invoke(cli, ["workflow", "list"], env=env)
    assert "nightly" in text.output and "available=1 blocked=1" in text.output
    shown = runner.invoke(cli, ["workflow", "show", str(run.id), "--json"], env=env)
    data = json.loads(shown.output)
    assert data["steps"]["load"]["after"] == ["extract"]
    assert data["steps"]["load"]["state"] == "blocked"
    plain = runner.invoke(cli, ["workflow", "show", str(run.id)], env=env)
    assert "extract" in plain.output and "blocked" in plain.output
    cancelled = runner.invoke(cli, ["workflow", "cancel", str(run.id)], env=env)
    assert cancelled.exit_code == 0 and f"workflow {run.id} cancelled" in cancelled.output
    retried = runner.invoke(cli, ["workflow", "retry", str(run.id), "--json"], env=env)
    assert json.loads(retried.output)["state"] == "running"
    with awa.Client(dsn) as client:
        actions = [e.action for e in client.audit_log(target=f"workflow:{run.id}")]
    assert sorted(actions) == ["workflow.cancel", "workflow.retry"]
    assert all(e.actor.startswith("cli:") for e in client_audit(dsn, run.id))


def client_audit(dsn: str, wf_id: int) -> list[AuditEntry]:
    with awa.Client(dsn) as client:
        return list(client.audit_log(target=f"workflow:{wf_id}"))


def test_an_unknown_workflow_exits_4(dsn: str, runner: AwaRunner) -> None:
    env = {"AWA_DATABASE_URL": dsn}
    for verb in ("show", "cancel", "retry"):
        result = runner.invoke(cli, ["workflow", verb, "424242"], env=env)
        assert result.exit_code == 4, result.output
        assert "workflow 424242 not found" in result.output
