"""``python -m benchmarks.peer_workers.pgqueuer_worker``: a pgqueuer QueueManager with one no-op
entrypoint ``noop`` on ``BENCH_DSN``, until SIGTERM, set up as pgqueuer's README and ``pgq run``
set it up: one asyncpg connection, on uvloop.

``BENCH_PGQ_BATCH`` is the dequeue batch size (``pgq run``'s default: 10) and ``BENCH_PGQ_CAP``
the hard cap on picked jobs (``max_concurrent_tasks``; empty: none, ``pgq run``'s default).
"""

from __future__ import annotations

import asyncio
import os
import signal
import time

from typing import Any

import asyncpg
import uvloop
from psycopg.conninfo import conninfo_to_dict
from pgqueuer import Job, QueueManager
from pgqueuer.queries import Queries


def asyncpg_params(dsn: str) -> dict[str, Any]:
    """asyncpg.connect() keywords for a libpq DSN (``key=value`` or a URL)."""
    params = conninfo_to_dict(dsn)
    names = {"host": "host", "port": "port", "user": "user", "password": "password"}
    out: dict[str, Any] = {new: params[old] for old, new in names.items() if params.get(old)}
    if params.get("dbname"):
        out["database"] = params["dbname"]
    return out


async def connect(dsn: str) -> asyncpg.Connection:
    return await asyncpg.connect(**asyncpg_params(dsn))


async def main() -> None:
    batch = int(os.environ.get("BENCH_PGQ_BATCH", "10"))
    cap = int(os.environ["BENCH_PGQ_CAP"]) if os.environ.get("BENCH_PGQ_CAP") else None
    conn = await connect(os.environ["BENCH_DSN"])
    qm = QueueManager(Queries.from_asyncpg_connection(conn))
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
        await qm.run(batch_size=batch, max_concurrent_tasks=cap)
    finally:
        await conn.close()


if __name__ == "__main__":
    uvloop.run(main())
