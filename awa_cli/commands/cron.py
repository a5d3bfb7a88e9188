"""`awa cron`: list, pause, resume, trigger and delete periodic jobs (architecture §9).

Every change is recorded in ``awa.audit_log`` with actor ``cli:<os user>``. An unknown name
exits 4.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import Any

import click

from awa_cli.audit import cli_actor
from awa_cli.commands.context import CliContext, json_option, pass_context, run_with_client
from awa_cli.commands.shared import print_listing, target_command
from awa_cli.commands.job import show_row
from awa_cli.periodic import PeriodicJob

COLUMNS = [
    "name",
    "cron",
    "timezone",
    "paused",
    "last_fire_at",
    "next_fire_at",
    "last_job_id",
    "last_job_state",
]


def _when(value: datetime | None) -> str:
    return "-" if value is None else value.isoformat(timespec="seconds")


def _summary(job: PeriodicJob) -> tuple[Any, ...]:
    return (
        job.name,
        job.cron,
        job.timezone,
        "yes" if job.paused else "no",
        _when(job.last_fire_at),
        _when(job.next_fire_at),
        "-" if job.last_job_id is None else job.last_job_id,
        job.last_job_state or "-",
    )


def _show(ctx: CliContext, jobs: list[PeriodicJob], json_flag: bool) -> None:
    print_listing(ctx, json_flag, COLUMNS, jobs, _summary)


def _one(ctx: CliContext, job: PeriodicJob, json_flag: bool, verb: str) -> None:
    if ctx.wants_json(json_flag):
        ctx.terminal.json(job.to_json())
        return
    ctx.terminal.status(f"periodic job {job.name} {verb}")
    ctx.terminal.table(COLUMNS, [_summary(job)])


@click.group(name="cron")
def command() -> None:
    """List and operate the periodic jobs stored in the database.

    Schedules are defined in code (App.periodic) or in awa.toml ([periodic.NAME]); each
    worker stores its app's schedules when it starts. Pausing survives restarts and
    redeploys. A schedule removed from the code keeps firing until `awa cron delete NAME`.
    """


def schedule_command(verb: str) -> Callable[[Any], Any]:
    """`awa cron VERB NAME [--json]`."""
    return target_command(command, verb, click.argument("name"))


@command.command(name="list")
@json_option
@pass_context
def list_schedules(ctx: CliContext, json_flag: bool) -> None:
    """Every schedule: cron, time zone, paused, last and next fire time, last job and its state."""
    _show(ctx, run_with_client(ctx, lambda c: c.list_periodic()), json_flag)


@schedule_command("pause")
def pause(ctx: CliContext, name: str, json_flag: bool) -> None:
    """Stop firing NAME until it is resumed (no fire times are caught up)."""
    job = run_with_client(ctx, lambda c: c.pause_periodic(name, actor=cli_actor()))
    _one(ctx, job, json_flag, "paused")


@schedule_command("resume")
def resume(ctx: CliContext, name: str, json_flag: bool) -> None:
    """Fire NAME again from its next fire time (the times while paused are skipped)."""
    job = run_with_client(ctx, lambda c: c.resume_periodic(name, actor=cli_actor()))
    _one(ctx, job, json_flag, "resumed")


@schedule_command("trigger")
def trigger(ctx: CliContext, name: str, json_flag: bool) -> None:
    """Enqueue NAME's job now (metadata awa.fire_at = now); the schedule is unchanged."""
    row = run_with_client(ctx, lambda c: c.trigger_periodic(name, actor=cli_actor()))
    show_row(ctx, row, json_flag, verb=f"enqueued for periodic job {name}")


@schedule_command("delete")
def delete(ctx: CliContext, name: str, json_flag: bool) -> None:
    """Drop NAME and its fire history. A worker whose app still defines it stores it again
    when it starts: remove it from the code or awa.toml first."""
    job = run_with_client(ctx, lambda c: c.delete_periodic(name, actor=cli_actor()))
    if ctx.wants_json(json_flag):
        ctx.terminal.json(job.to_json())
        return
    ctx.terminal.status(f"periodic job {name} deleted")
