"""The cost of the periodic scheduler's sweep (architecture §9): 1,000 schedules, one transaction per
sweep as the maintenance leader runs it (``awa_cli.db.periodic.sweep`` and the next-due probe
of ``OutcomeCore.fire_periodic``), timed from the client.

``periodic_sweep_idle``: nothing is due (the leader's cost when it wakes for nothing; normally
it sleeps until the next fire time instead). ``periodic_sweep_100_due``: 100 of the 1,000 are
due and each enqueues one job.
"""

from __future__ import annotations

import asyncio
import statistics
import time
from typing import Any

import psycopg

from awa_cli.db import periodic as calls
from awa_cli.periodic import Schedule
from benchmarks.server import BenchServer

SCHEDULES = 1000
DUE = 100


async def _setup(conn: psycopg.AsyncConnection[Any]) -> None:
    schedules = [
        Schedule(
            f"bench.{i:04d}",
            "* * * * *",
            "noop",
            {"i": i},
            catch_up="all",
            options={"queue": "bench"},
        )
        for i in range(SCHEDULES)
    ]
    async with conn.transaction():
        await calls.upsert(conn, schedules)
        await conn.execute(
            "UPDATE awa.periodic_jobs SET active_since = '2026-01-01Z', next_fire_at = '2999-01-01Z'"
        )
    await conn.execute("ANALYZE awa.periodic_jobs")


async def _sweeps(dsn: str, sweeps: int, due: int) -> list[float]:
    timings: list[float] = []
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
        await _setup(conn)
        for n in range(sweeps):
            if due:  # untimed: make `due` other schedules due (each fires its next minute)
                first = (n * due) % SCHEDULES
                await conn.execute(
                    "UPDATE awa.periodic_jobs SET next_fire_at = '2999-01-01Z'"
                    " WHERE next_fire_at <= now()"
                )
                await conn.execute(
                    "UPDATE awa.periodic_jobs SET next_fire_at = '2000-01-01Z' WHERE name IN"
                    " (SELECT name FROM awa.periodic_jobs WHERE name >= %s ORDER BY name LIMIT %s)",
                    (f"bench.{first:04d}", due),
                )
            start = time.perf_counter()
            async with conn.transaction():  # what OutcomeCore.fire_periodic runs
                result = await calls.sweep(conn, limit=1)
                await calls.next_due_in(conn)
            timings.append(time.perf_counter() - start)
            assert result.inserted == due, (result.inserted, due)
    return timings


def _measure(dsn: str, sweeps: int, due: int) -> dict[str, Any]:
    ms = sorted(t * 1000 for t in asyncio.run(_sweeps(dsn, sweeps, due)))
    return {
        "p50_ms": statistics.median(ms),
        "p95_ms": ms[max(0, int(len(ms) * 0.95) - 1)],
        "sweeps": len(ms),
    }


def periodic_sweep_idle(server: BenchServer, dsn: str, jobs: int) -> dict[str, Any]:
    """1,000 schedules, none due: one sweep transaction (p50 ms)."""
    return _measure(dsn, sweeps=max(20, min(jobs // 10, 500)), due=0)


def periodic_sweep_100_due(server: BenchServer, dsn: str, jobs: int) -> dict[str, Any]:
    """1,000 schedules, 100 due: one sweep transaction enqueuing 100 jobs (p50 ms)."""
    return _measure(dsn, sweeps=max(20, min(jobs // 100, 200)), due=DUE)
