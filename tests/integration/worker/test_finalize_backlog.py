"""While finalising stalls, a worker stops claiming (worker/queues.py, FINALIZE_BACKLOG).

A slot frees when its handler returns, before its result commits. Before this bound, a stall
of the finalising statements (here: the workflow end check's advisory lock, held by another
session) let the runners claim on without limit: every claimed job stayed ``running`` and
heartbeated, the heartbeat of all of them outlasted the staleness, and the leader rescued
jobs that had already run (a 1,000,000-job drain held 380,000 of them)."""

from __future__ import annotations

import asyncio
import logging
from collections import Counter

import psycopg
import pytest

import awa_cli as awa
from awa_cli.worker.queues import FINALIZE_BACKLOG
from tests.helpers import running_worker, wait_until
from tests.integration.workflows.test_dependencies import Step, step_app

pytestmark = [pytest.mark.integration]

STEPS = FINALIZE_BACKLOG * 3
WF_LOCK_CLASS = 1635213682  # awa.workflow_finish's advisory lock class (migration 0017)


def _states(dsn: str) -> Counter[str]:
    with psycopg.connect(dsn) as conn:
        return Counter(
            {s: n for s, n in conn.execute("SELECT state::text, count(*) FROM awa.jobs GROUP BY 1")}
        )


@pytest.mark.asyncio
async def test_a_stalled_finaliser_stops_the_claims_and_nothing_runs_twice(
    dsn: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="awa.worker")
    log: list[object] = []
    wf = awa.Workflow("stall")
    for i in range(STEPS):
        wf.add(f"s{i}", Step(f"s{i}"))  # independent steps: all runnable at once
    async with awa.AsyncClient(dsn) as client:
        run = await client.insert_workflow(wf)
    with psycopg.connect(dsn, autocommit=True) as blocker:
        # every finalising transaction of these steps waits for this lock (the end check)
        blocker.execute("SELECT pg_advisory_lock(%s, %s)", (WF_LOCK_CLASS, run.id % 2147483647))
        async with running_worker(step_app(log), dsn, shutdown_timeout=30) as worker:
            try:
                await wait_until(lambda: len(log) >= FINALIZE_BACKLOG, timeout=60)
                await asyncio.sleep(1.0)  # ample time to claim every step, were claims unbounded
                held = _states(dsn)["running"]
                ran_while_stalled = len(log)
            finally:
                blocker.execute(
                    "SELECT pg_advisory_unlock(%s, %s)", (WF_LOCK_CLASS, run.id % 2147483647)
                )
            # the backlog, plus what was claimed or running when it was reached
            assert held <= FINALIZE_BACKLOG + 3 * 10, held
            assert ran_while_stalled <= FINALIZE_BACKLOG + 2 * 10, ran_while_stalled
            assert "claiming paused" in caplog.text
            await wait_until(lambda: _states(dsn)["completed"] == STEPS, timeout=120)
            assert worker.stats().healthy
    ran = Counter(name for name, *_ in log)  # type: ignore[misc]
    assert len(ran) == STEPS and max(ran.values()) == 1  # each step ran once
    async with awa.AsyncClient(dsn) as client:
        assert (await client.get_workflow(run.id)).state == "completed"
    assert any(
        r.levelno == logging.INFO and "claiming again" in r.getMessage() for r in caplog.records
    )
