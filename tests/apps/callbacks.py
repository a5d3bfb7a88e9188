"""A test app whose jobs park on an external callback, plus a plugin that appends every event
it sees to the file named by ``$AWA_TEST_EVENTS`` (one ``<name> <job id>`` line each)."""

from __future__ import annotations

import os
from dataclasses import dataclass

import awa_cli as awa

app = awa.App()


@dataclass
class Park:
    order_id: int


@app.task(Park)
async def park(job: awa.Job) -> awa.JobResult:
    token = await job.register_callback(timeout=600)
    return awa.WaitForCallback(token)


@awa.hookimpl
def awa_job_event(event: awa.JobEvent.Started) -> None:
    path = os.environ.get("AWA_TEST_EVENTS")
    if path:
        with open(path, "a", encoding="utf-8") as f:
            f.write(f"{event.name} {event.job.id} pid={os.getpid()}\n")


@dataclass
class RescueAlert:
    job_id: int
    reason: str


@app.task(RescueAlert)
async def rescue_alert(job: awa.Job) -> None:
    return None


app.on_rescued_enqueue(
    Park, RescueAlert, lambda args, job, reason: RescueAlert(job.id, str(reason))
)
