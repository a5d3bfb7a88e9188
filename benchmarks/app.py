"""The jobs the benchmarks run: no-op handlers, one with a completed follow-up spec."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

import awa_cli as awa

app = awa.App()


@dataclass
class Noop:
    n: int = 0


@dataclass
class NoopWithFollowUp:
    n: int = 0


@dataclass
class Tenanted:
    n: int = 0
    tenant: str = ""


@dataclass
class BatchDone:
    """A batch's callback (queue batch_callbacks, not worked by the benchmarks)."""

    label: str = ""


@dataclass
class FollowUp:
    n: int = 0


@app.task(Noop, queue="bench")
async def noop(job: awa.Job) -> None:
    return None


@app.task(NoopWithFollowUp, queue="bench")
async def noop_with_follow_up(job: awa.Job) -> None:
    return None


@app.task(Tenanted, queue="bench")
async def tenanted(job: awa.Job) -> None:
    return None


@app.task(FollowUp, queue="follow_ups")
async def follow_up(job: awa.Job) -> None:
    return None


@app.task(BatchDone, queue="batch_callbacks")
async def batch_done(job: awa.Job) -> None:
    return None


app.on_completed_enqueue(NoopWithFollowUp, FollowUp, lambda args, job: FollowUp(args.n))


@dataclass
class TenantSleep:
    n: int = 0
    tenant: str = ""
    sleep: float = 0.0


@app.task(TenantSleep, queue="bench")
async def tenant_sleep(job: awa.Job) -> None:
    """limited_one_key: a job of one key that sleeps (50 ms)."""
    if job.args.sleep:
        await asyncio.sleep(job.args.sleep)
