"""A test app for the Prometheus plugin against a real `awa worker`: one task of each fate.

``metrics_ok`` completes, ``metrics_fail`` raises (enqueue it with ``max_attempts=1``: it is
exhausted, and its Exhausted hook raises, counting one hook failure), ``metrics_stage`` stages
a unique ``metrics_follow`` follow-up (two with the same key: one inserted, one duplicate),
``metrics_park`` stages one and parks on a callback (discarded), ``metrics_slow`` runs until it
is taken away (enqueue it with a short ``deadline_duration``: rescued).
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

import awa_cli as awa

app = awa.App()


@dataclass
class MetricsOk:
    n: int


@dataclass
class MetricsFail:
    n: int


@dataclass
class MetricsStage:
    key: str


@dataclass
class MetricsFollow:
    key: str


@dataclass
class MetricsPark:
    n: int


@dataclass
class MetricsSlow:
    n: int


@app.task(MetricsOk)
async def ok(job: awa.Job) -> None:
    await asyncio.sleep(0.01)


@app.task(MetricsFail)
def fail(job: awa.Job) -> None:
    raise RuntimeError("metrics_fail always fails")


@app.on_event(MetricsFail)
def fail_hook(event: awa.JobEvent.Exhausted) -> None:
    if isinstance(event, awa.JobEvent.Exhausted):
        raise RuntimeError("this hook fails on purpose")


@app.task(MetricsStage)
async def stage(job: awa.Job) -> None:
    job.enqueue_on_completion(MetricsFollow(job.args.key), unique_opts=awa.UniqueOpts())


@app.task(MetricsFollow)
async def follow(job: awa.Job) -> None:
    pass


@app.task(MetricsPark)
async def park(job: awa.Job) -> awa.JobResult:
    job.enqueue_on_completion(MetricsFollow(f"parked-{job.args.n}"))  # discarded: it parks
    token = await job.register_callback(timeout=600)
    return awa.WaitForCallback(token)


@app.task(MetricsSlow)
async def slow(job: awa.Job) -> None:
    for _ in range(400):  # until rescued (the heartbeat flags it), at most 20 s
        if job.is_cancelled():
            return
        await asyncio.sleep(0.05)
