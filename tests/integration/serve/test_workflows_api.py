"""The workflows in the admin API (architecture §16): list and one workflow with its steps,
cancel and retry through the client, one audit row each (the core's, in the action's
transaction), 404 for an unknown id, 403 for a viewer and in read-only mode."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

import awa_cli as awa
from tests.integration.serve.helpers import (
    AS_OPERATOR,
    AS_VIEWER,
    OPERATOR_TOKEN,
    audit_rows,
    serve,
)

pytestmark = [pytest.mark.integration]


@dataclass
class Task:
    n: int


def _insert(dsn: str) -> awa.WorkflowRun:
    wf = awa.Workflow("api")
    a = wf.add("a", Task(1))
    wf.add("b", Task(2), after=[a])
    with awa.Client(dsn) as client:
        return client.insert_workflow(wf)


def test_list_show_cancel_retry_audited_once(dsn: str) -> None:
    run = _insert(dsn)
    with serve(dsn) as http:
        [listed] = http.get("/api/workflows", headers=AS_OPERATOR).json()
        assert listed["id"] == run.id and listed["counts"] == {"available": 1, "blocked": 1}
        one = http.get(f"/api/workflows/{run.id}", headers=AS_OPERATOR).json()
        assert one["steps"]["b"]["after"] == ["a"] and one["steps"]["b"]["state"] == "blocked"
        assert http.get("/api/workflows?state=bogus", headers=AS_OPERATOR).status_code == 422
        missing = http.get("/api/workflows/999999", headers=AS_OPERATOR)
        assert missing.status_code == 404 and "workflow 999999 not found" in missing.json()["error"]
        done = http.post(f"/api/workflows/{run.id}/cancel", headers=AS_OPERATOR)
        assert done.status_code == 200 and done.json()["state"] == "cancelled"
        again = http.post(f"/api/workflows/{run.id}/retry", headers=AS_OPERATOR)
        assert again.status_code == 200 and again.json()["state"] == "running"
        assert http.post("/api/workflows/999999/retry", headers=AS_OPERATOR).status_code == 404
    rows = audit_rows(dsn, like="workflow.%")
    assert [r[1:3] for r in rows] == [
        ("workflow.cancel", f"workflow:{run.id}"),
        ("workflow.retry", f"workflow:{run.id}"),
        ("workflow.retry", "workflow:999999"),  # a refusal is audited too (by the serve)
    ]
    assert [r[3] for r in rows][:2] == ["ok", "ok"] and rows[2][3] != "ok"
    assert all(r[0].startswith("serve:") for r in rows)
    assert len([r for r in rows if r[2] == f"workflow:{run.id}"]) == 2  # once each, never doubled


def test_viewer_and_read_only_are_refused(dsn: str) -> None:
    run = _insert(dsn)
    with serve(dsn) as http:
        for verb in ("cancel", "retry"):
            url = f"/api/workflows/{run.id}/{verb}"
            assert http.post(url, headers=AS_VIEWER).status_code == 403
        assert http.get("/api/workflows", headers=AS_VIEWER).status_code == 200
        assert http.post(f"/api/workflows/{run.id}/cancel").status_code in (401, 403)
    with serve(dsn, read_only=True) as http:
        response = http.post(f"/api/workflows/{run.id}/cancel", headers=AS_OPERATOR)
        assert response.status_code == 403 and "read-only" in response.json()["error"]


def test_the_workflow_pages_draw_the_graph_and_act_with_csrf(dsn: str) -> None:
    from tests.integration.serve.helpers import csrf_of, log_in

    wf = awa.Workflow("pages")
    a = wf.add("<extract>", Task(1))  # a name that must be escaped
    wf.add("load", Task(2), after=[a])
    with awa.Client(dsn) as client:
        run = client.insert_workflow(wf)
    with serve(dsn) as http:
        log_in(http, OPERATOR_TOKEN)
        listing = http.get("/workflows").text
        assert f'href="/workflows/{run.id}"' in listing and "pages" in listing
        page = http.get(f"/workflows/{run.id}").text
        assert "<svg" in page and 'class="wf-graph"' in page
        assert f'href="/jobs/{run.steps["load"].id}"' in page  # each step links to its job
        assert "&lt;extract&gt;" in page and "<extract>" not in page
        assert "marker-end" in page  # the edge extract -> load
        assert 'fill="#e8ebf0"' in page  # load is blocked: grey
        assert f'action="/workflows/{run.id}/cancel"' in page
        assert http.post(f"/workflows/{run.id}/cancel").status_code == 403  # no CSRF token
        done = http.post(f"/workflows/{run.id}/cancel", data={"csrf": csrf_of(http)})
        assert done.status_code == 303
        assert done.headers["location"] == f"/workflows/{run.id}?done=cancelled"
        assert "cancelled" in http.get(done.headers["location"]).text
        assert http.get("/workflows/424242").status_code == 404
