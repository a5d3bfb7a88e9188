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


# The one no-op handler of every kind whose work is not measured, only awa's own cost (no
# docstring: a worker publishes a handler's doc with its kinds, and these had none).
async def do_nothing(job: awa.Job) -> None:
    return None


for _args_type, _queue in (
    (Noop, "bench"),
    (NoopWithFollowUp, "bench"),
    (Tenanted, "bench"),
    (FollowUp, "follow_ups"),
    (BatchDone, "batch_callbacks"),
):
    app.task(_args_type, queue=_queue)(do_nothing)


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
