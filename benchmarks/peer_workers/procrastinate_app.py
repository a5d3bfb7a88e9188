"""The procrastinate app of the comparison: one no-op task on queue ``bench``."""

from __future__ import annotations

import os
import time
from typing import Any

import procrastinate

_first_job: list[float] = []


def note_first_job() -> None:
    """Write the wall clock of the first job to ``BENCH_FIRST_JOB_FILE`` (the fallback timing)."""
    if not _first_job:
        _first_job.append(time.time())
        if path := os.environ.get("BENCH_FIRST_JOB_FILE"):
            with open(path, "w") as f:
                f.write(repr(_first_job[0]))


def make_app(dsn: str) -> tuple[procrastinate.App, Any]:
    # One connection per sub-worker plus the listener, as procrastinate's docs advise (psycopg
    # pool's default of 4 would make 10 sub-workers wait for connections).
    size = int(os.environ.get("BENCH_CONCURRENCY", "10")) + 1
    connector = procrastinate.PsycopgConnector(conninfo=dsn, min_size=size, max_size=size)
    app = procrastinate.App(connector=connector)

    @app.task(name="noop", queue="bench")
    async def noop(n: int = 0) -> None:
        if not _first_job:
            note_first_job()

    return app, noop
