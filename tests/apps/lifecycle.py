"""A test app for real `awa worker` processes exercising cancellation (issue 16 item 2): each
attempt records its start and end in ``awa_test.attempts``, so tests can prove by ordering
that two attempts of one job never overlapped, and how each ended."""

from __future__ import annotations

import asyncio
import os
import time
from dataclasses import dataclass

import psycopg

import awa_cli as awa

app = awa.App()

SIDE_TABLE = """
CREATE SCHEMA IF NOT EXISTS awa_test;
CREATE TABLE IF NOT EXISTS awa_test.attempts (
    job_id bigint NOT NULL, run_lease bigint NOT NULL, pid int NOT NULL,
    started_at timestamptz NOT NULL DEFAULT clock_timestamp(),
    ended_at timestamptz, how text)
"""


def _begin(job: awa.Job) -> None:
    with psycopg.connect(os.environ["AWA_DATABASE_URL"], autocommit=True) as conn:
        conn.execute(
            "INSERT INTO awa_test.attempts (job_id, run_lease, pid) VALUES (%s, %s, %s)",
            (job.id, job.run_lease, os.getpid()),
        )


def _end(job: awa.Job, how: str) -> None:
    with psycopg.connect(os.environ["AWA_DATABASE_URL"], autocommit=True) as conn:
        conn.execute(
            "UPDATE awa_test.attempts SET ended_at = clock_timestamp(), how = %s"
            " WHERE job_id = %s AND run_lease = %s",
            (how, job.id, job.run_lease),
        )


@dataclass
class Sleepy:
    """An async handler that sleeps ``seconds`` without looking at the flag."""

    seconds: float


@app.task(Sleepy)
async def sleepy(job: awa.Job) -> None:
    await asyncio.to_thread(_begin, job)
    try:
        await asyncio.sleep(job.args.seconds)
    except asyncio.CancelledError:
        _end(job, f"task cancelled, flag {job.is_cancelled()}")
        raise
    _end(job, "returned")


@dataclass
class Polite:
    """A ``def`` handler that works ``seconds`` unless ``job.is_cancelled()`` turns true."""

    seconds: float


@app.task(Polite)
def polite(job: awa.Job) -> None:
    _begin(job)
    until = time.monotonic() + job.args.seconds
    while time.monotonic() < until:
        if job.is_cancelled():
            _end(job, "saw the flag")
            raise RuntimeError("cancelled")
        time.sleep(0.05)
    _end(job, "returned")


@dataclass
class Stubborn:
    """A ``def`` handler that never returns (ignores the flag)."""

    n: int = 0


@app.task(Stubborn)
def stubborn(job: awa.Job) -> None:
    _begin(job)
    while True:
        time.sleep(0.1)
