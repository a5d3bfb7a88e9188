"""A job's place in the graph (architecture §16) as every surface shows it: the client's
``job_relations`` (parents and children with kind and state, the workflow and step, the
batch), ``awa job show`` (text and ``--json``), ``GET /api/jobs/{id}`` and the job page, and
the "blocked on parents 12 (running), 13 (available)" line for a blocked job."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass

import psycopg
import pytest

import awa_cli as awa
from tests.helpers import AwaRunner
from tests.integration.serve.helpers import OPERATOR_TOKEN, VIEWER_TOKEN, bearer, log_in, serve

pytestmark = [pytest.mark.integration]


@dataclass
class Task:
    n: int


@dataclass
class Extract:
    day: str = "2026-12-01"


@dataclass
class Load:
    table: str = "orders"


def _etl(dsn: str) -> awa.WorkflowRun:
    """extract -> (clean, enrich) -> load; extract is claimed (running)."""
    wf = awa.Workflow("etl-2026-12-01")
    e = wf.add("extract", Extract())
    clean = wf.add("clean", Task(1), after=[e])
    enrich = wf.add("enrich", Task(2), after=[e])
    wf.add("load", Load(), after=[clean, enrich])
    with awa.Client(dsn) as client:
        return client.insert_workflow(wf)


def _blocked_on_two(dsn: str) -> tuple[int, int, int]:
    """Parent a (running, claimed by a worker's claim), parent b (available), child c."""
    with awa.Client(dsn) as client:
        a = client.insert(Task(1), queue="rel")
        b = client.insert(Task(2), queue="other")
        c = client.insert(Load(), after=[a, b])
    with psycopg.connect(dsn) as conn:  # what a worker's claim does to a
        conn.execute(
            "UPDATE awa.jobs SET state = 'running', attempt = 1, attempted_at = now()"
            " WHERE id = %s",
            (a.id,),
        )
    return a.id, b.id, c.id


@pytest.mark.asyncio
async def test_job_relations_name_parents_children_workflow_and_batch(dsn: str) -> None:
    run = _etl(dsn)
    steps = {name: row.id for name, row in run.steps.items()}
    async with awa.AsyncClient(dsn) as client:
        load = await client.job_relations(steps["load"])
        assert [(p.id, p.kind, p.state, p.step) for p in load.parents] == [
            (steps["clean"], "task", "blocked", "clean"),
            (steps["enrich"], "task", "blocked", "enrich"),
        ]
        assert load.children == [] and (load.parent_count, load.child_count) == (2, 0)
        assert (load.workflow_id, load.workflow_name, load.step) == (
            run.id,
            "etl-2026-12-01",
            "load",
        )
        assert load.batch_id is None
        extract = await client.job_relations(steps["extract"], limit=1)
        assert [c.id for c in extract.children] == [steps["clean"]]  # the first one by id
        assert extract.child_count == 2 and extract.parents == []
        batch = await client.insert_batch([Task(7)], on_complete=Task(8))
        [member] = await client.list_jobs(kind="task", queue="default", limit=1)
        found = await client.job_relations(member.id)
        assert (found.batch_id, found.batch_callback) == (batch.id, None)
        assert found.to_json()["batch"] == {"id": batch.id, "callback": None}
        with pytest.raises(awa.JobNotFound):
            await client.job_relations(987654321)


@pytest.mark.asyncio
async def test_why_not_running_names_the_unfinished_parents(dsn: str) -> None:
    a, b, c = _blocked_on_two(dsn)
    async with awa.AsyncClient(dsn) as client:
        reason = await client.why_not_running(c)
    assert reason == f"blocked on parents {a} (running), {b} (available)"


def test_awa_job_show_prints_parents_children_workflow_and_batch(
    dsn: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AWA_DATABASE_URL", dsn)
    run = _etl(dsn)
    steps = {name: row.id for name, row in run.steps.items()}
    runner = AwaRunner()
    text = runner.awa("job", "show", str(steps["clean"]))
    assert text.exit_code == 0, text.output
    assert f"workflow: {run.id} 'etl-2026-12-01', step clean" in text.stdout
    assert f"parents (1):\n  job {steps['extract']}: extract, available (step extract)" in (
        text.stdout
    )
    assert f"children (1):\n  job {steps['load']}: load, blocked (step load)" in text.stdout
    assert f"waiting: blocked on parents {steps['extract']} (available)" in text.stdout
    shown = json.loads(runner.awa("job", "show", str(steps["clean"]), "--json").stdout)
    assert shown["parents"] == [
        {"id": steps["extract"], "kind": "extract", "state": "available", "step": "extract"}
    ]
    assert shown["children"] == [
        {"id": steps["load"], "kind": "load", "state": "blocked", "step": "load"}
    ]
    assert (shown["parent_count"], shown["child_count"]) == (1, 1)
    assert shown["workflow"] == {"id": run.id, "name": "etl-2026-12-01", "step": "clean"}
    assert shown["batch"] is None
    with awa.Client(dsn) as client:
        batch = client.insert_batch([Task(1)], on_complete=Task(2))
        plain = client.insert(Task(3))
    with psycopg.connect(dsn) as conn:
        [member] = conn.execute(
            "SELECT id FROM awa.jobs WHERE batch_id = %s", (batch.id,)
        ).fetchone()  # type: ignore[misc]
    text = runner.awa("job", "show", str(member))
    assert f"batch: member of batch {batch.id}" in text.stdout
    bare = runner.awa("job", "show", str(plain.id))
    assert "parents" not in bare.stdout and "workflow:" not in bare.stdout
    bare_json = json.loads(runner.awa("job", "show", str(plain.id), "--json").stdout)
    assert "parents" not in bare_json and "workflow" not in bare_json  # a plain job: as before


def test_api_job_includes_parents_and_children(dsn: str) -> None:
    a, b, c = _blocked_on_two(dsn)
    with serve(dsn) as http:
        child = http.get(f"/api/jobs/{c}", headers=bearer(VIEWER_TOKEN)).json()
        parent = http.get(f"/api/jobs/{a}", headers=bearer(VIEWER_TOKEN)).json()
    assert [(p["id"], p["state"]) for p in child["parents"]] == [(a, "running"), (b, "available")]
    assert child["why_not_running"] == f"blocked on parents {a} (running), {b} (available)"
    assert child["children"] == [] and child["parent_count"] == 2
    assert [(x["id"], x["state"], x["kind"]) for x in parent["children"]] == [
        (c, "blocked", "load")
    ]
    assert parent["parents"] == [] and parent["child_count"] == 1


def test_job_page_lists_parents_children_and_why_a_blocked_job_waits(dsn: str) -> None:
    run = _etl(dsn)
    steps = {name: row.id for name, row in run.steps.items()}
    a, b, c = _blocked_on_two(dsn)
    with serve(dsn) as http:
        log_in(http, OPERATOR_TOKEN)
        page = http.get(f"/jobs/{steps['clean']}").text
        assert f'href="/workflows/{run.id}"' in page and "etl-2026-12-01" in page
        assert re.search(r"step <strong>clean</strong>", page)
        assert f'<a href="/jobs/{steps["extract"]}" data-parent="{steps["extract"]}">' in page
        assert f'<a href="/jobs/{steps["load"]}" data-child="{steps["load"]}">' in page
        blocked = http.get(f"/jobs/{c}").text
        assert f"Not running: blocked on parents {a} (running), {b} (available)." in blocked
        assert f'data-parent="{a}"' in blocked and f'data-parent="{b}"' in blocked
        plain = http.get(f"/jobs/{a}").text
        assert 'id="relations"' in plain and 'id="workflow"' not in plain
