"""A test app for real `awa worker` processes: every execution is recorded by job id in a
side table (``awa_test.executions``), so tests can prove each job ran exactly once."""

from __future__ import annotations

import asyncio
import os
from dataclasses import dataclass


import awa_cli as awa
from tests.apps.side_pool import SidePool

app = awa.App()

SIDE_TABLE = """
CREATE SCHEMA IF NOT EXISTS awa_test;
CREATE TABLE IF NOT EXISTS awa_test.executions (
    job_id bigint NOT NULL, run_lease bigint NOT NULL, pid int NOT NULL,
    at timestamptz NOT NULL DEFAULT now())
"""

_pool = SidePool()


@dataclass
class Record:
    n: int
    sleep: float = 0.0


@app.task(Record)
async def record(job: awa.Job) -> None:
    await _pool.execute(
        "INSERT INTO awa_test.executions (job_id, run_lease, pid) VALUES (%s, %s, %s)",
        (job.id, job.run_lease, os.getpid()),
    )
    if job.args.sleep:
        await asyncio.sleep(job.args.sleep)
