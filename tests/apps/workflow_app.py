"""A test app for real `awa worker` processes running dependent jobs: each execution records
its job id, lease, process and how many of its parents were not completed when it started
(``awa_test.wf_runs``), so tests can prove each step ran once and never before its parents."""

from __future__ import annotations

import asyncio
import os
import random

import awa_cli as awa
from tests.apps.base import NumberedJob, side_table
from tests.apps.side_pool import SidePool

app = awa.App()

SIDE_TABLE = side_table(
    "wf_runs",
    "job_id bigint NOT NULL, run_lease bigint NOT NULL, pid int NOT NULL,"
    " unfinished_parents int NOT NULL, parents_seen int NOT NULL",
    at_default="clock_timestamp()",
)

_pool = SidePool()


class Node(NumberedJob):
    """A step of a workflow, recorded in awa_test.wf_runs; its output is ``n``."""


@app.task(Node)
async def node(job: awa.Job) -> None:
    await _pool.execute(
        "INSERT INTO awa_test.wf_runs (job_id, run_lease, pid, unfinished_parents, parents_seen)"
        " SELECT %s, %s, %s, count(*) FILTER (WHERE p.state IS DISTINCT FROM 'completed'), %s"
        " FROM awa.job_dependencies d LEFT JOIN awa.jobs p ON p.id = d.parent_id"
        " WHERE d.child_id = %s",
        (job.id, job.run_lease, os.getpid(), len(job.parent_outputs), job.id),
    )
    await asyncio.sleep(job.args.sleep or random.random() * 0.002)
    job.set_output(job.args.n)
