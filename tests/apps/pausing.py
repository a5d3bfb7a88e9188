"""A test app for real `awa worker` processes pausing and resuming queues: each job sleeps
for ``sleep`` seconds and completes."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

import awa_cli as awa

app = awa.App()


@dataclass
class Tick:
    n: int
    sleep: float = 0.0


@app.task(Tick)
async def tick(job: awa.Job) -> None:
    await asyncio.sleep(job.args.sleep)
