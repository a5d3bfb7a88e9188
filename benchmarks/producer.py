"""The producer of ``sustained_load``, a process of its own:
``python -m benchmarks.producer --rate R --duration D OUT`` (database in ``AWA_DATABASE_URL``).

Offers ``R`` jobs/s for ``D`` s with ``AsyncClient.insert_many`` on a timer: every ``--tick``
(10 ms) it inserts, as one batch and one transaction, the jobs due by then (``R × elapsed``
minus those sent: 50 a tick at 5,000 jobs/s). An insert that runs late makes the next batch
larger, so the offered load is kept (open loop) rather than slowed down by the queue. Each job
(kind ``stamp``, ``benchmarks/latency_app.py``) carries its batch number in ``args.b``; the
wall-clock time each batch's insert returned (its commit) is written to ``OUT`` as JSON, with
what was actually sent.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import time
from pathlib import Path
from typing import Any

import awa_cli as awa


async def produce(dsn: str, rate: float, duration: float, tick: float) -> dict[str, Any]:
    total = int(rate * duration)
    commits: list[float] = []
    sizes: list[int] = []
    async with awa.AsyncClient(dsn) as client:
        await client.list_jobs(limit=1)  # the pool is up before the clock starts
        start = time.monotonic()
        sent = 0
        k = 0
        while sent < total:
            k += 1
            due = min(total, int(rate * (time.monotonic() - start)))
            if due > sent:
                batch = len(commits)
                await client.insert_many(
                    [{"b": batch} for _ in range(due - sent)], kind="stamp", queue="bench"
                )
                commits.append(time.time())
                sizes.append(due - sent)
                sent = due
            delay = start + k * tick - time.monotonic()
            if delay > 0:
                await asyncio.sleep(delay)
        elapsed = time.monotonic() - start
    return {
        "sent": sent,
        "seconds": elapsed,
        "batches": len(commits),
        "max_batch": max(sizes, default=0),
        "commit_times": commits,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.producer")
    parser.add_argument("out", type=Path)
    parser.add_argument("--rate", type=float, default=5000.0, help="jobs/s offered")
    parser.add_argument("--duration", type=float, default=60.0, help="seconds")
    parser.add_argument("--tick", type=float, default=0.01, help="seconds between batches")
    args = parser.parse_args(argv)
    result = asyncio.run(
        produce(os.environ["AWA_DATABASE_URL"], args.rate, args.duration, args.tick)
    )
    args.out.write_text(json.dumps(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
