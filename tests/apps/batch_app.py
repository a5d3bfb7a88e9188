"""A test app for batches (architecture §16), run by real `awa worker` processes and by
in-process workers: members that succeed, fail, linger or extend their own batch, and a
callback that records what its ``job.batch`` said."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

import awa_cli as awa

app = awa.App()


@dataclass
class Member:
    """Sleeps ``sleep`` seconds; fails terminally when ``fail``; adds ``extend`` members to
    its own batch first."""

    n: int
    fail: bool = False
    sleep: float = 0.0
    extend: int = 0


@app.task(Member)
async def member(job: awa.Job) -> None:
    batch = job.batch
    assert batch is not None and batch.callback is None
    for i in range(job.args.extend):
        await batch.insert(Member(n=job.args.n * 1000 + i))
    if job.args.sleep:
        await asyncio.sleep(job.args.sleep)
    if job.args.fail:
        raise awa.TerminalError(f"member {job.args.n} fails")
    job.set_output({"batch": batch.id})


@dataclass
class Done:
    """A callback: records which one it is and the counts it was given."""

    label: str


@app.task(Done)
def done(job: awa.Job) -> None:
    batch = job.batch
    assert batch is not None and batch.counts is not None
    job.set_output(
        {
            "label": job.args.label,
            "batch": batch.id,
            "callback": batch.callback,
            "counts": batch.counts.to_dict(),
        }
    )
