"""The app of the outage, deploy and failover runs (tests/reliability/test_outages.py,
tests/integration/worker/test_interrupted.py): ``def`` jobs that work for ``seconds`` in
steps, needing no database, and append ``<id> <attempt> start|done <pid>`` to the file named
by ``AWA_TEST_RUNS``, so a test can count the runs of every job without the database (which
may be down while they run)."""

from __future__ import annotations

import os
import time
from dataclasses import dataclass

import awa_cli as awa

app = awa.App()


@dataclass
class Steady:
    """The recommended idiom: ``job.raise_if_cancelled()`` in the loop, resuming from the
    checkpoint an earlier (handed back) attempt left."""

    n: int
    seconds: float = 10.0


@dataclass
class Returner:
    """The old idiom: ``return`` once ``job.is_cancelled()`` (completes the job, with a
    WARNING at shutdown)."""

    n: int
    seconds: float = 10.0


def _record(job: awa.Job, what: str) -> None:
    path = os.environ.get("AWA_TEST_RUNS")
    if path:
        with open(path, "a") as f:
            f.write(f"{job.id} {job.attempt} {what} {os.getpid()}\n")


def _steps(seconds: float) -> int:
    return max(1, int(seconds / 0.1))


@app.task(Steady)
def steady(job: awa.Job) -> None:
    _record(job, "start")
    steps = _steps(job.args.seconds)
    start = (job.progress or {}).get("checkpoint", {}).get("step", 0)
    for step in range(start, steps):
        job.raise_if_cancelled()
        time.sleep(job.args.seconds / steps)
        job.set_progress(100 * (step + 1) / steps, step=step + 1)
    job.set_output({"n": job.args.n, "resumed_from": start})
    _record(job, "done")


@app.task(Returner)
def returner(job: awa.Job) -> None:
    _record(job, "start")
    steps = _steps(job.args.seconds)
    for step in range(steps):
        if job.is_cancelled():
            return
        time.sleep(job.args.seconds / steps)
        job.set_progress(100 * (step + 1) / steps, step=step + 1)
    _record(job, "done")


@dataclass
class Chain:
    """A short job with a durable follow-up on completion (the failover drain)."""

    n: int
    seconds: float = 0.05


@dataclass
class ChainDone:
    trigger_id: int


@dataclass
class Waiter:
    """Waits inside its handler for an external callback (a wait in flight at failover)."""

    n: int


@app.task(Chain)
def chain(job: awa.Job) -> None:
    _record(job, "start")
    time.sleep(job.args.seconds)


@app.task(ChainDone)
def chain_done(job: awa.Job) -> None:
    _record(job, "start")


@app.on_completed_enqueue(Chain, ChainDone)
def _chained(args: Chain, job: awa.JobRow) -> ChainDone:
    return ChainDone(trigger_id=job.id)


@app.task(Waiter)
async def waiter(job: awa.Job) -> None:
    _record(job, "start")
    token = await job.register_callback(timeout=600)
    payload = await job.wait_for_callback(token)
    job.set_output({"payload": payload})
