"""Example jobs: what an application's ``[app] modules`` entry looks like.

Enqueue them with::

    awa job enqueue send_email --args '{"to": "ada@example.com", "subject": "Hello"}'
    awa job enqueue generate_report --args '{"report_id": 7}'
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass

import awa_cli as awa

app = awa.App()
log = logging.getLogger("examples.jobs")


@dataclass
class SendEmail:
    to: str
    subject: str = ""


@dataclass
class GenerateReport:
    report_id: int


@dataclass
class NotifyReportReady:
    report_id: int


@dataclass
class SyncAccount:
    tenant_id: str
    account: int = 0


@app.task(SendEmail, queue="email")
async def send_email(job: awa.Job) -> None:
    """An async handler: it runs on the worker's event loop."""
    await asyncio.sleep(0.01)  # pretend to talk to an SMTP server
    log.info("sent %r to %s", job.args.subject, job.args.to)
    job.set_output({"delivered_to": job.args.to})


@app.task(GenerateReport)
def generate_report(job: awa.Job) -> None:
    """A plain function: it runs in the worker's thread pool. It checks for a shutdown (or
    a cancel) between chunks: ``raise_if_cancelled`` hands the job back at a deploy, and the
    next attempt resumes from the checkpoint."""
    chunks = 10
    total = (job.progress or {}).get("checkpoint", {}).get("total", 0)
    start = (job.progress or {}).get("checkpoint", {}).get("chunk", 0)
    for chunk in range(start, chunks):
        job.raise_if_cancelled()
        total += sum(
            range(chunk * 1_000 * job.args.report_id, (chunk + 1) * 1_000 * job.args.report_id)
        )
        job.set_progress(100 * (chunk + 1) / chunks, chunk=chunk + 1, total=total)
    job.set_output({"total": total})


@app.task(NotifyReportReady)
async def notify_report_ready(job: awa.Job) -> None:
    log.info("report %s is ready", job.args.report_id)


@app.task(SyncAccount)
async def sync_account(job: awa.Job) -> None:
    """Sync one account of a tenant: awa.toml.example's [limits.per_tenant] bounds these."""
    await asyncio.sleep(0.05)  # pretend to call the tenant's API


# A durable follow-up: inserted in the same transaction as the report's completion.
@app.on_completed_enqueue(GenerateReport, NotifyReportReady)
def report_ready(args: GenerateReport, job: awa.JobRow) -> NotifyReportReady:
    return NotifyReportReady(report_id=args.report_id)


# A best-effort hook: runs after the transition committed.
@app.on_event(SendEmail)
def email_events(event: awa.JobEvent.Started) -> None:
    match event:
        case awa.JobEvent.Exhausted(error=error):
            log.error("giving up on email to %s: %s", event.args.to, error)
        case _:
            pass
