"""``python -m benchmarks.peer_workers.procrastinate_worker``: a procrastinate worker on queue
``bench`` with concurrency ``BENCH_CONCURRENCY`` (10), on ``BENCH_DSN``, until SIGTERM."""

from __future__ import annotations

import asyncio
import os

from benchmarks.peer_workers.procrastinate_app import make_app


async def main() -> None:
    app, _ = make_app(os.environ["BENCH_DSN"])
    async with app.open_async():
        # procrastinate installs its own SIGTERM/SIGINT handlers: a graceful stop.
        concurrency = int(os.environ.get("BENCH_CONCURRENCY", "10"))
        await app.run_worker_async(queues=["bench"], concurrency=concurrency, wait=True)


if __name__ == "__main__":
    asyncio.run(main())
