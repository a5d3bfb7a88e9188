"""`awa dlq`: the dead-letter queue — list, show, depth, retry, move and purge (architecture §10)."""

from __future__ import annotations

import json
from typing import Any

import click

from awa_cli.commands.context import CliContext, json_option, pass_context, run_with_client
from awa_cli.commands.shared import limit_option, print_listing
from awa_cli.commands.job import parse_run_at, print_errors
from awa_cli.commands.operate import (
    Counted,
    age,
    counted_options,
    older_than_option,
    refuse_mixed,
    run_counted,
)
from awa_cli.dead_letters import DeadLetter


@click.group(name="dlq")
def command() -> None:
    """The dead-letter queue: exhausted jobs of queues with dead_letter = true."""


def _summary(dead: DeadLetter) -> tuple[Any, ...]:
    return (
        dead.id,
        dead.kind,
        dead.queue,
        str(dead.dead_reason),
        f"{dead.attempt}/{dead.max_attempts}",
        dead.dead_at.isoformat(timespec="seconds"),
        _last_error(dead),
    )


def _last_error(dead: DeadLetter) -> str:
    if not dead.errors:
        return ""
    text = str(dead.errors[-1].get("error", ""))
    line = text.splitlines()[0] if text else ""
    return line[:80]


COLUMNS = ["id", "kind", "queue", "reason", "attempt", "dead_at", "last error"]


@command.command(name="list")
@click.option("--queue", help="Only dead letters of this queue.")
@click.option("--kind", help="Only dead letters of this kind.")
@limit_option()
@json_option
@pass_context
def list_dead(
    ctx: CliContext, queue: str | None, kind: str | None, limit: int, json_flag: bool
) -> None:
    """Dead letters, newest first."""
    rows = run_with_client(ctx, lambda c: c.list_dlq(queue, kind, limit))
    print_listing(ctx, json_flag, COLUMNS, rows, _summary)


@command.command(name="show")
@click.argument("job_id", type=int)
@json_option
@pass_context
def show(ctx: CliContext, job_id: int, json_flag: bool) -> None:
    """One dead letter: the job as it failed, when and why it moved (exit 4 if none)."""
    dead = run_with_client(ctx, lambda c: c.get_dlq_job(job_id))
    if ctx.wants_json(json_flag):
        ctx.terminal.json(dead.to_json())
        return
    data = dead.to_json()
    for key in ("id", "kind", "queue", "state", "dead_reason", "dead_at", "priority"):
        ctx.terminal.data(f"{key}: {data[key]}")
    ctx.terminal.data(f"attempt: {dead.attempt}/{dead.max_attempts}")
    for key in ("created_at", "attempted_at", "finalized_at", "tags", "ordering_key"):
        if data.get(key) not in (None, [], ""):
            ctx.terminal.data(f"{key}: {data[key]}")
    ctx.terminal.data(f"args: {json.dumps(dead.args, sort_keys=True)}")
    if dead.metadata:
        ctx.terminal.data(f"metadata: {json.dumps(dead.metadata, sort_keys=True)}")
    if dead.output is not None:
        ctx.terminal.data(f"output: {json.dumps(dead.output, sort_keys=True)}")
    print_errors(ctx, dead.errors)


@command.command(name="depth")
@click.option("--queue", help="Only this queue.")
@json_option
@pass_context
def depth(ctx: CliContext, queue: str | None, json_flag: bool) -> None:
    """How many dead letters there are, per queue and in total."""
    result = run_with_client(ctx, lambda c: c.dlq_depth(queue))
    if ctx.wants_json(json_flag):
        ctx.terminal.json(result.to_json())
        return
    rows = [(name, n) for name, n in sorted(result.queues.items())]
    ctx.terminal.table(["queue", "dead letters"], [*rows, ("total", result.total)])


@command.command(name="retry")
@click.argument("job_id", type=int, required=False)
@click.option("--queue", help="By filter: the dead letters of this queue.")
@click.option("--kind", help="By filter: the dead letters of this kind.")
@click.option("--to-queue", help="ID only: put it back into this queue instead.")
@click.option("--priority", type=int, help="ID only: with this priority (1-4).")
@click.option("--run-at", help="ID only: run at this ISO 8601 time or +DURATION.")
@counted_options
def retry(
    ctx: CliContext,
    job_id: int | None,
    queue: str | None,
    kind: str | None,
    to_queue: str | None,
    priority: int | None,
    run_at: str | None,
    counted: Counted,
) -> None:
    """Put dead letter ID (or every one matching --queue / --kind / --all) back into the job
    table under the same id: available, attempt 0, errors kept plus 'retried from the
    dead-letter queue'. Exit 4 for an unknown ID; exit 1 when its unique key is held again."""
    refuse_mixed(job_id, queue=queue, kind=kind, all=counted.all)
    if job_id is not None:
        when = parse_run_at(run_at) if run_at else None
        if counted.dry_run:
            dead = run_with_client(ctx, lambda c: c.get_dlq_job(job_id))
            _print_count(ctx, 1 if dead else 0, counted.json, "would be retried")
            return
        row = run_with_client(
            ctx,
            lambda c: c.retry_from_dlq(job_id, queue=to_queue, priority=priority, run_at=when),
        )
        if ctx.wants_json(counted.json):
            ctx.terminal.json(row.to_json())
            return
        ctx.terminal.data(f"job {row.id} retried from the dead-letter queue ({row.state})")
        return
    if to_queue is not None or priority is not None or run_at is not None:
        raise click.UsageError("--to-queue, --priority and --run-at go with an ID")
    run_counted(
        ctx,
        "retrying dead letters",
        lambda c, progress: c.bulk_retry_from_dlq(queue, kind, **counted.bulk(progress)),
        counted,
        "dead letters retried",
    )


def _print_count(ctx: CliContext, n: int, json_flag: bool, text: str) -> None:
    if ctx.wants_json(json_flag):
        ctx.terminal.json({"count": n})
    else:
        ctx.terminal.data(f"{n} {text}")


@command.command(name="move")
@click.option("--queue", help="The failed jobs of this queue.")
@click.option("--kind", help="The failed jobs of this kind.")
@click.option("--reason", help="A note kept in the moved jobs' errors.")
@counted_options
def move(
    ctx: CliContext, queue: str | None, kind: str | None, reason: str | None, counted: Counted
) -> None:
    """Move failed jobs into the dead-letter queue (reason 'manual'); a filter or --all is
    required (exit 2)."""
    run_counted(
        ctx,
        "moving failed jobs",
        lambda c, progress: c.move_failed_to_dlq(
            queue=queue, kind=kind, reason=reason, **counted.bulk(progress)
        ),
        counted,
        "failed jobs moved to the dead-letter queue",
    )


@command.command(name="purge")
@click.argument("job_id", type=int, required=False)
@click.option("--queue", help="The dead letters of this queue.")
@click.option("--kind", help="The dead letters of this kind.")
@older_than_option
@counted_options
def purge(
    ctx: CliContext,
    job_id: int | None,
    queue: str | None,
    kind: str | None,
    older_than: str | None,
    counted: Counted,
) -> None:
    """Delete dead letter ID, or those matching the filters (--older-than: dead longer than
    this). A filter, an ID or --all is required (exit 2); an ID that is not a dead letter
    exits 4."""
    seconds = age(older_than)

    async def purging(c: Any, progress: Any) -> int:
        n: int = await c.purge_dlq(
            id=job_id, queue=queue, kind=kind, older_than=seconds, **counted.bulk(progress)
        )
        if job_id is not None and n == 0:  # as every one-id command: exit 4
            from awa_cli.errors import JobNotFound

            raise JobNotFound(f"dead letter {job_id} not found")
        return n

    run_counted(ctx, "purging dead letters", purging, counted, "dead letters purged")
