"""The app of the outage and failover runs (tests/reliability/test_outages.py): a ``def`` job
that works for ``seconds`` in steps, needing no database, and appends ``<id> <attempt>`` to the
file named by ``AWA_TEST_RUNS`` each time its handler starts, so a test can count the runs of
every job without the database (which may be down while they run)."""

from __future__ import annotations

import os
import time
from dataclasses import dataclass

import awa_cli as awa

app = awa.App()


@dataclass
class Steady:
    n: int
    seconds: float = 10.0


def _record(job: awa.Job, what: str) -> None:
    path = os.environ.get("AWA_TEST_RUNS")
    if path:
        with open(path, "a") as f:
            f.write(f"{job.id} {job.attempt} {what} {os.getpid()}\n")


@app.task(Steady)
def steady(job: awa.Job) -> None:
    _record(job, "start")
    steps = max(1, int(job.args.seconds / 0.1))
    for step in range(steps):
        if job.is_cancelled():
            raise RuntimeError("cancelled")
        time.sleep(job.args.seconds / steps)
        job.set_progress(100 * (step + 1) / steps, checkpoint=step + 1)
    job.set_output({"n": job.args.n})
    _record(job, "done")
