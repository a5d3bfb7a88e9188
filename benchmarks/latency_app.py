"""The latency job: records when its handler started (wall clock, same host) and which event
loop ran it (so ``--loop uvloop`` is checked, not assumed)."""

from __future__ import annotations

import asyncio
import time

import awa_cli as awa

app = awa.App()


@app.task(kind="stamp", queue="bench")
async def stamp(job: awa.Job) -> None:
    job.set_output({"started": time.time(), "loop": type(asyncio.get_running_loop()).__module__})
