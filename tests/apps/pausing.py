"""A test app for real `awa worker` processes pausing and resuming queues: each job sleeps
for ``sleep`` seconds and completes."""

from __future__ import annotations

import asyncio

import awa_cli as awa
from tests.apps.base import NumberedJob

app = awa.App()


class Tick(NumberedJob):
    """A job that sleeps and completes."""


@app.task(Tick)
async def tick(job: awa.Job) -> None:
    await asyncio.sleep(job.args.sleep)
