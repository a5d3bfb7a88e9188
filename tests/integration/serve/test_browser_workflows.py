"""A workflow in a real headless Chromium against a real ``awa serve`` process (architecture
§16): the workflow page draws the graph as SVG, each step coloured by its state and linked
to its job; at 375 px the graph scrolls inside its own box, never the page; clicking a step
opens its job page, which lists its parents and children (linked, with kind and state), the
workflow and step it belongs to, and for a blocked step "blocked on parents ..."; nothing is
asked of another host."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pytest

import awa_cli as awa
from awa_cli.testing import AwaTestClient
from tests.integration.serve.browser import (
    signed_in,
    VIEWER_TOKEN,
    claim,
    no_horizontal_scroll,
)

from tests.integration.workflows.test_workflows import Extract

pytestmark = [pytest.mark.integration]


@dataclass
class Transform:
    part: str


@dataclass
class Load:
    table: str = "orders"


@dataclass
class Report:
    to: str = "ops@example.com"


def _app() -> awa.App:
    app = awa.App()

    @app.task(Extract)
    async def extract(job: awa.Job) -> None:
        job.set_output({"rows": 3})

    return app


def _seed(dsn: str) -> tuple[awa.WorkflowRun, dict[str, int]]:
    """extract -> (clean, enrich) -> load -> report, four columns wide (wider than 375 px):
    extract completed through the core (which unblocked clean and enrich), clean claimed by a
    worker's claim (running), enrich available, load and report blocked."""
    wf = awa.Workflow("etl-2026-12-01")
    e = wf.add("extract", Extract())
    clean = wf.add("clean", Transform("clean"), after=[e], queue="transform")
    enrich = wf.add("enrich", Transform("enrich"), after=[e], queue="enrich")
    load = wf.add("load", Load(), after=[clean, enrich])
    wf.add("report", Report(), after=[load])
    with AwaTestClient(dsn, _app()) as harness:
        run = harness.client.insert_workflow(wf)
        assert harness.work_one(Extract).outcome == "completed"
    steps = {name: row.id for name, row in run.steps.items()}
    assert claim(dsn, "transform") == [steps["clean"]]
    return run, steps


FILLS = {"completed": "#dcf2e3", "running": "#dde7fa", "available": "#dde7fa", "blocked": "#e8ebf0"}


@pytest.mark.parametrize("width", [375, 1440])
def test_the_workflow_graph_links_steps_to_job_pages_with_parents_and_children(
    dsn: str, tmp_path: Path, width: int
) -> None:
    run, steps = _seed(dsn)
    states = {
        "extract": "completed",
        "clean": "running",
        "enrich": "available",
        "load": "blocked",
        "report": "blocked",
    }
    browsing = signed_in(dsn, tmp_path, VIEWER_TOKEN, f"/workflows/{run.id}", size=(width, 800))
    with browsing as (served, page):
        assert "etl-2026-12-01" in page.locator("main h1").inner_text()
        graph = page.locator(".wf-graph")
        assert graph.locator("svg").count() == 1
        assert graph.locator("a.wf-step").count() == 5
        for name, state in states.items():
            node = graph.locator(f"a[href='/jobs/{steps[name]}']")
            assert node.get_attribute("class") == f"wf-step state-{state}", name
            assert node.locator("rect").get_attribute("fill") == FILLS[state], name
            assert f"{state} · {steps[name]}" in node.locator("text").all_text_contents()
        assert graph.locator("line[marker-end]").count() == 5  # one arrow per edge
        assert page.evaluate("document.scrollingElement.scrollWidth <= window.innerWidth")
        assert no_horizontal_scroll(page), f"/workflows/{run.id} scrolls sideways at {width} px"
        if width == 375:  # too wide for the screen: the graph's own box scrolls, not the page
            assert graph.evaluate("el => el.scrollWidth > el.clientWidth")
            graph.evaluate("el => { el.scrollLeft = 300; }")
            assert graph.evaluate("el => el.scrollLeft") > 0
            assert page.evaluate("document.scrollingElement.scrollLeft") == 0
        # a step opens its job page: the blocked load waits on clean and enrich
        graph.locator(f"a[href='/jobs/{steps['load']}']").click()
        page.wait_for_url(f"**/jobs/{steps['load']}")
        why = page.inner_text("#why-not-running")
        assert (
            f"blocked on parents {steps['clean']} (running), {steps['enrich']} (available)" in why
        )
        workflow = page.locator("#workflow a")
        assert workflow.get_attribute("href") == f"/workflows/{run.id}"
        assert "step load" in page.inner_text("#workflow")
        parents = page.locator("ul.parents li")
        assert parents.count() == 2
        first = parents.nth(0).inner_text()
        assert f"job {steps['clean']}" in first and "transform" in first and "running" in first
        assert "available" in parents.nth(1).inner_text()
        child = page.locator(f"ul.children a[data-child='{steps['report']}']")
        assert child.get_attribute("href") == f"/jobs/{steps['report']}"
        assert no_horizontal_scroll(page), f"/jobs/{steps['load']} scrolls sideways at {width} px"
        # follow a parent: clean's page lists extract (completed) above and load below
        page.click(f"ul.parents a[data-parent='{steps['clean']}']")
        page.wait_for_url(f"**/jobs/{steps['clean']}")
        assert "completed" in page.inner_text(
            f"ul.parents li:has([data-parent='{steps['extract']}'])"
        )
        assert page.locator(f"ul.children a[data-child='{steps['load']}']").count() == 1
        assert page.locator("#why-not-running").count() == 0  # running: nothing holds it back
        page.click("#workflow a")
        page.wait_for_url(f"**/workflows/{run.id}")
    assert served.foreign() == []
