"""The pickup-latency job: records when its handler started (wall clock, same host)."""

from __future__ import annotations

import time

import awa_cli as awa

app = awa.App()


@app.task(kind="stamp", queue="bench")
async def stamp(job: awa.Job) -> None:
    job.set_output({"started": time.time()})
