"""A test app for the concurrency-limit tests: each attempt of ``tenant_work`` records its
start and its end (``clock_timestamp()``, over its own connection, so every row commits at
once) in ``awa_test.intervals``; overlapping intervals of one tenant prove how many ran at
once, whatever the timing. ``hold = true`` keeps the handler running until a row for its
job appears in ``awa_test.release`` (the kill -9 test)."""

from __future__ import annotations

import asyncio
import os
from dataclasses import dataclass

import psycopg

import awa_cli as awa
from tests.apps.side_pool import SidePool

app = awa.App()

SIDE_TABLES = """
CREATE SCHEMA IF NOT EXISTS awa_test;
CREATE TABLE IF NOT EXISTS awa_test.intervals (
    job_id bigint NOT NULL, run_lease bigint NOT NULL, tenant text NOT NULL,
    priority int NOT NULL, pid int NOT NULL,
    started_at timestamptz NOT NULL DEFAULT clock_timestamp(), ended_at timestamptz,
    PRIMARY KEY (job_id, run_lease));
CREATE TABLE IF NOT EXISTS awa_test.release (job_id bigint PRIMARY KEY);
"""

# How many ran at once, per tenant: the most intervals of one tenant open at any start.
MAX_OVERLAP = """
SELECT a.tenant, max(n) FROM (
    SELECT a.tenant, a.started_at,
           (SELECT count(*) FROM awa_test.intervals b
            WHERE b.tenant = a.tenant AND b.started_at <= a.started_at
              AND (b.ended_at IS NULL OR b.ended_at > a.started_at)) AS n
    FROM awa_test.intervals a) a
GROUP BY a.tenant ORDER BY a.tenant
"""

_pool = SidePool(max_size=8)


@dataclass
class TenantWork:
    tenant: str
    n: int = 0
    sleep: float = 0.0
    hold: bool = False


@app.task(TenantWork)
async def tenant_work(job: awa.Job) -> None:
    await _pool.execute(
        "INSERT INTO awa_test.intervals (job_id, run_lease, tenant, priority, pid)"
        " VALUES (%s, %s, %s, %s, %s)",
        (job.id, job.run_lease, job.args.tenant, job.row.priority, os.getpid()),
    )
    if job.args.sleep:
        await asyncio.sleep(job.args.sleep)
    while job.args.hold and not await _pool.execute(
        "SELECT 1 FROM awa_test.release WHERE job_id = %s", (job.id,)
    ):
        await asyncio.sleep(0.05)
    await _pool.execute(
        "UPDATE awa_test.intervals SET ended_at = clock_timestamp()"
        " WHERE job_id = %s AND run_lease = %s",
        (job.id, job.run_lease),
    )


def connect(dsn: str) -> psycopg.Connection:
    return psycopg.connect(dsn, autocommit=True)


@app.task(kind="loose_work")
async def loose_work(job: awa.Job) -> None:
    """A kind with dict args: any limit key path is accepted when the limits are checked."""
    return None
