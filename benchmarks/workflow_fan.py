"""``workflow_fan``: a workflow with a 10,000-wide fan-out then a 10,000-to-1 fan-in
(architecture §16), drained by one ``awa worker`` at concurrency 10, against ``drain`` in the
same run.

One root step; ``width`` steps after it (``--jobs`` / 2, 10,000 at the default 20,000); one
join step after all of them. The root's completion makes the 10,000 available in its own
transaction (one statement); each finalising batch of the fan-out takes the join's pending
count down in its transaction. Timed as ``drain``: first claim → last durable completion, from
awa's own table; commits, WAL and PostgreSQL CPU per job from server snapshots.
"""

from __future__ import annotations

from typing import Any

import psycopg

import awa_cli as awa
from benchmarks.app import Noop
from benchmarks.measures import (
    drain_result,
    startup_cpu,
    table_stats,
    wait_for_state,
    worker_process,
)
from benchmarks.server import BenchServer
from benchmarks.server import tree_cpu


def graph(width: int) -> awa.Workflow:
    """root -> ``width`` steps -> join."""
    wf = awa.Workflow(f"fan-{width}")
    root = wf.add("root", Noop(0), queue="bench")
    middle = [wf.add(f"s{i}", Noop(i), after=[root], queue="bench") for i in range(width)]
    wf.add("join", Noop(-1), after=middle, queue="bench")
    return wf


def workflow_fan(server: BenchServer, dsn: str, jobs: int) -> dict[str, Any]:
    """A 10,000-wide fan-out then a 10,000-to-1 fan-in, as one workflow."""
    width = min(10_000, max(2, jobs // 2))
    total = width + 2
    with awa.Client(dsn) as client:
        run = client.insert_workflow(graph(width))
    before = server.snapshot(dsn)
    with worker_process(dsn, concurrency=10) as proc:
        startup = startup_cpu(dsn, proc.pid)
        wait_for_state(dsn, "completed", total, timeout=max(600, total / 200), queue="bench")
        worker_cpu = tree_cpu(proc.pid)
    after = server.snapshot(dsn)
    with psycopg.connect(dsn) as conn:
        span, state = conn.execute(
            "SELECT extract(epoch FROM max(j.finalized_at) - min(j.attempted_at)),"
            " (SELECT state FROM awa.workflows WHERE id = %s) FROM awa.jobs AS j"
            " WHERE j.state = 'completed' AND j.queue = 'bench'",
            (run.id,),
        ).fetchone()  # type: ignore[misc]
    assert state == "completed", state
    result = drain_result(server, total, float(span), before, after, worker_cpu, startup)
    return {**result, "width": width, **table_stats(dsn, total)}
