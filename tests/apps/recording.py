"""A test app for real `awa worker` processes: every execution is recorded by job id in a
side table (``awa_test.executions``), so tests can prove each job ran exactly once."""

from __future__ import annotations

import asyncio
import os


import awa_cli as awa
from tests.apps.base import NumberedJob, side_table
from tests.apps.side_pool import SidePool

app = awa.App()

SIDE_TABLE = side_table(
    "executions", "job_id bigint NOT NULL, run_lease bigint NOT NULL, pid int NOT NULL"
)

_pool = SidePool()


class Record(NumberedJob):
    """A job whose every execution is a row of awa_test.executions."""


@app.task(Record)
async def record(job: awa.Job) -> None:
    await _pool.execute(
        "INSERT INTO awa_test.executions (job_id, run_lease, pid) VALUES (%s, %s, %s)",
        (job.id, job.run_lease, os.getpid()),
    )
    if job.args.sleep:
        await asyncio.sleep(job.args.sleep)
