"""A test app for progress, waiting and history (issue 19), run by real `awa worker`
processes and by in-process workers."""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from pathlib import Path

import awa_cli as awa

app = awa.App()


@dataclass
class Steps:
    """Counts to ``total``, reporting a checkpoint at each step; attempt 1 fails after
    ``fail_after`` steps. The next attempt resumes from the checkpoint."""

    total: int
    fail_after: int = -1


@app.task(Steps)
def steps(job: awa.Job) -> None:
    progress = job.progress
    start = progress["checkpoint"]["done"] if progress else 0
    for i in range(start, job.args.total):
        if job.attempt == 1 and i == job.args.fail_after:
            raise RuntimeError(f"failed at step {i}")
        job.set_progress(100 * (i + 1) / job.args.total, f"step {i + 1}", done=i + 1)
    job.set_output({"resumed_from": start, "attempt": job.attempt})


@dataclass
class Spam:
    """Reports progress ``calls`` times over about ``seconds``."""

    calls: int
    seconds: float


@app.task(Spam)
async def spam(job: awa.Job) -> None:
    for i in range(job.args.calls):
        job.set_progress(100 * (i + 1) / job.args.calls, f"call {i + 1}", n=i + 1)
        await asyncio.sleep(job.args.seconds / job.args.calls)
    job.set_output({"calls": job.args.calls})


@dataclass
class BadProgress:
    pass


@app.task(BadProgress)
def bad_progress(job: awa.Job) -> None:
    fields = []
    for call in (
        lambda: job.set_progress(101),
        lambda: job.set_progress(True),
        lambda: job.set_progress(5, message=3),  # type: ignore[arg-type]
        lambda: job.set_progress(5, blob=object()),
        lambda: job.set_progress(5, blob="x" * 70_000),
    ):
        try:
            call()
        except awa.ValidationError as exc:
            fields.append(exc.field)
    job.set_progress(50, "fine")
    job.set_output({"refused": fields})


@dataclass
class Gate:
    """Completes (output ``{"opened": path}``) once the file ``path`` exists; fails if
    ``fail`` is set."""

    path: str
    fail: bool = False


@app.task(Gate)
async def gate(job: awa.Job) -> None:
    deadline = time.monotonic() + 60
    while not Path(job.args.path).exists() and time.monotonic() < deadline:
        await asyncio.sleep(0.02)
    if job.args.fail:
        raise awa.TerminalError("gate failed on purpose")
    job.set_output({"opened": job.args.path})


@dataclass
class Report:
    n: int


@app.on_completed_enqueue(Steps, Report)
def report_after_steps(args: Steps, job: awa.JobRow) -> Report:
    return Report(args.total)


@app.task(Report)
def report(job: awa.Job) -> None:
    return None
