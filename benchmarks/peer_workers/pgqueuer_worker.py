"""``python -m benchmarks.peer_workers.pgqueuer_worker``: a pgqueuer QueueManager with one no-op
entrypoint ``noop``, at most ``BENCH_CONCURRENCY`` (10) jobs in flight, on ``BENCH_DSN``, until
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

    # The entrypoint's limit is enforced in SQL across workers; with one worker it is the
    # same cap as awa's per-queue concurrency. The default batch size (10) is kept.
    @qm.entrypoint("noop", concurrency_limit=concurrency)
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
        await qm.run()
    finally:
        await conn.close()


if __name__ == "__main__":
    asyncio.run(main())
