"""`awa batch`: batches and their progress — list and show (architecture §16)."""

from __future__ import annotations

from typing import Any

import click

from awa_cli.batches import BatchRow
from awa_cli.commands.context import CliContext, json_option, pass_context, run_with_client
from awa_cli.commands.shared import limit_option, print_listing


@click.group(name="batch")
def command() -> None:
    """Batches: groups of jobs with callback jobs for when the group is done."""


COLUMNS = ["id", "state", "done", "completed", "failed", "cancelled", "pending", "created_at"]


def _at(row: BatchRow, name: str) -> str:
    value = getattr(row, name)
    return value.isoformat(timespec="seconds") if value is not None else "-"


def _summary(row: BatchRow) -> tuple[Any, ...]:
    counts = row.counts
    return (
        row.id,
        row.state,
        f"{counts.done}/{counts.total} ({counts.percent:g}%)",
        counts.completed,
        counts.failed,
        counts.cancelled,
        counts.pending,
        _at(row, "created_at"),
    )


@command.command(name="list")
@click.option(
    "--state",
    type=click.Choice(["open", "running", "completed"]),
    help="Only batches in this state (open: not sealed; running: sealed, members pending).",
)
@limit_option()
@json_option
@pass_context
def list_batches(ctx: CliContext, state: str | None, limit: int, json_flag: bool) -> None:
    """Batches, newest first, with their progress."""
    rows = run_with_client(ctx, lambda c: c.list_batches(state, limit))
    print_listing(ctx, json_flag, COLUMNS, rows, _summary, as_json=lambda r: r.to_dict())


@command.command(name="show")
@click.argument("batch_id", type=int)
@json_option
@pass_context
def show(ctx: CliContext, batch_id: int, json_flag: bool) -> None:
    """One batch: its counts, its members by state, its callbacks and the jobs they
    enqueued (exit 4 if there is no such batch)."""
    row = run_with_client(ctx, lambda c: c.get_batch(batch_id))
    if ctx.wants_json(json_flag):
        ctx.terminal.json(row.to_dict())
        return
    counts = row.counts
    ctx.terminal.data(f"id: {row.id}")
    ctx.terminal.data(f"state: {row.state}{' (succeeded)' if row.succeeded else ''}")
    ctx.terminal.data(f"progress: {counts.done}/{counts.total} ({counts.percent:g}%)")
    for name, value in counts.to_dict().items():
        ctx.terminal.data(f"{name}: {value}")
    if row.by_state:
        states = ", ".join(f"{state} {n}" for state, n in row.by_state.items())
        ctx.terminal.data(f"members in awa.jobs: {states}")
    for name in ("created_at", "sealed_at", "first_failed_at", "completed_at", "succeeded_at"):
        ctx.terminal.data(f"{name}: {_at(row, name)}")
    for name, kind in row.callbacks.items():
        job_id = row.callback_jobs.get(name)
        enqueued = f"job {job_id}" if job_id is not None else "not enqueued"
        ctx.terminal.data(f"{name}: {kind} ({enqueued})")
    if row.metadata:
        ctx.terminal.data(f"metadata: {row.metadata}")
