"""``python -m benchmarks.peer_workers.pgqueuer_worker``: a pgqueuer QueueManager with one no-op
entrypoint ``noop``, at most ``BENCH_CONCURRENCY`` (10) jobs picked at once, on ``BENCH_DSN``, until
SIGTERM."""

from __future__ import annotations

import asyncio
import os
import signal
import time

import psycopg
from pgqueuer import Job, QueueManager
from pgqueuer.queries import Queries


async def main() -> None:
    concurrency = int(os.environ.get("BENCH_CONCURRENCY", "10"))
    conn = await psycopg.AsyncConnection.connect(os.environ["BENCH_DSN"], autocommit=True)
    qm = QueueManager(Queries.from_psycopg_connection(conn))
    first_job: list[float] = []

    @qm.entrypoint("noop")
    async def noop(job: Job) -> None:
        if not first_job:  # the fallback timing: wall clock of the first job
            first_job.append(time.time())
            if path := os.environ.get("BENCH_FIRST_JOB_FILE"):
                with open(path, "w") as f:
                    f.write(repr(first_job[0]))

    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, qm.shutdown.set)
    try:
        # max_concurrent_tasks is pgqueuer's hard cap on this worker's picked jobs: awa's
        # per-worker concurrency. It must be at least twice the batch size, hence batches of 5.
        # (An entrypoint concurrency_limit=10 with the default batch of 10 instead drained at
        # about 5 jobs/s here, and batches of 5 under that limit ran slower than this.)
        await qm.run(batch_size=max(1, concurrency // 2), max_concurrent_tasks=concurrency)
    finally:
        await conn.close()


if __name__ == "__main__":
    asyncio.run(main())
