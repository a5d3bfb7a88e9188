"""`awa job`: enqueue, list, show, wait for, cancel and retry jobs; retry, cancel and purge in
bulk."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta, UTC
from typing import Any

import click

from awa_cli.commands.context import CliContext, json_option, pass_context, run_with_client
from awa_cli.commands.shared import limit_option, print_listing
from awa_cli.commands.operate import (
    Counted,
    JobSelection,
    age,
    counted_options,
    job_filter_options,
    older_than_option,
    refuse_mixed,
    run_counted,
)
from awa_cli.history import show_json
from awa_cli.jobs import JobRow, JobState
from awa_cli.results import ValidationError

STATES = [s.value for s in JobState]
SHOWN_RELATIVES = 1000  # parents and children `awa job show` lists (the counts say the rest)


@click.group(name="job")
def command() -> None:
    """Enqueue, inspect and operate on jobs."""


def parse_json_option(text: str, option: str) -> Any:
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise ValidationError(
            option, f"invalid JSON: {exc.msg} at line {exc.lineno} column {exc.colno}"
        ) from None
    except RecursionError:
        raise ValidationError(option, "JSON nested too deeply") from None


def parse_run_at(text: str) -> datetime:
    """ISO 8601 (UTC when no offset is given) or ``+DURATION`` from now (``+30s``, ``+5m``)."""
    if text.startswith("+"):
        from awa_cli.config import ConfigError, parse_duration

        try:
            return datetime.now(UTC) + timedelta(seconds=parse_duration(text[1:], "--run-at"))
        except ConfigError as exc:  # its message already starts with "--run-at: "
            raise ValidationError("--run-at", exc.message.removeprefix("--run-at: ")) from None
    try:
        value = datetime.fromisoformat(text)
    except ValueError:
        raise ValidationError("--run-at", f"expected ISO 8601 or +DURATION, got {text!r}") from None
    return value if value.tzinfo else value.replace(tzinfo=UTC)


def check_against_app(app: Any, kind: str, args: dict[str, Any]) -> None:
    """Refuse a kind the app does not register, and args its registered type cannot take."""
    task = app.tasks.get(kind)
    if task is None:
        known = ", ".join(sorted(app.tasks)) or "none"
        raise ValidationError(
            "kind",
            f"{kind!r} is not registered in the loaded app (registered: {known}); "
            "use --force to enqueue it anyway",
        )
    from awa_cli.jobs import rebuild_args

    try:
        rebuild_args(task.args_type, args)
    except Exception as exc:
        name = getattr(task.args_type, "__name__", str(task.args_type))
        raise ValidationError("--args", f"{name}: {_rebuild_problem(exc)}") from None


_MISSING = re.compile(r"missing \d+ required (?:positional|keyword-only) arguments?: (.*)$")
_UNEXPECTED = re.compile(r"unexpected keyword argument '([^']*)'")


def _rebuild_problem(exc: Exception) -> str:
    """What is wrong with the args, naming the field where the error says which."""
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    if isinstance(exc, TypeError):
        if match := _MISSING.search(text):
            fields = re.findall(r"'([^']*)'", match.group(1))
            label = "field" if len(fields) == 1 else "fields"
            return f"missing {label} {', '.join(repr(f) for f in fields)}"
        if match := _UNEXPECTED.search(text):
            return f"unknown field {match.group(1)!r}"
    errors = getattr(exc, "errors", None)  # pydantic's ValidationError
    if callable(errors):
        try:
            first = errors()[0]
            where = ".".join(str(part) for part in first.get("loc", ()))
            return f"field {where!r}: {first.get('msg', text)}" if where else str(first["msg"])
        except Exception:
            pass
    return f"args do not fit: {type(exc).__name__}: {text}"


def show_row(ctx: CliContext, row: JobRow, json_flag: bool, verb: str | None = None) -> None:
    if ctx.wants_json(json_flag):
        ctx.terminal.json(row.to_json())
        return
    if verb:
        ctx.terminal.status(f"job {row.id} {verb}")
    ctx.terminal.table(["id", "kind", "queue", "state", "attempt", "run_at"], [_summary(row)])


def _summary(row: JobRow) -> tuple[Any, ...]:
    return (
        row.id,
        row.kind,
        row.queue,
        row.state,
        f"{row.attempt}/{row.max_attempts}",
        row.run_at.isoformat(timespec="seconds"),
    )


@command.command(name="enqueue")
@click.argument("kind")
@click.option(
    "--args", "args_json", default="{}", metavar="JSON", help="The job's args as a JSON object."
)
@click.option("--queue", help="Queue (default: the kind's registered queue, else 'default').")
@click.option("--priority", type=int, help="1 (most urgent) to 4; default 2.")
@click.option("--max-attempts", type=int, help="1 to 1000; default 25.")
@click.option("--run-at", help="ISO 8601 time or +DURATION (e.g. +5m).")
@click.option(
    "--unique", is_flag=True, help="Deduplicate by kind and args (default unique options)."
)
@click.option(
    "--concurrency-key",
    metavar="KEY",
    help="The key of the job's [limits.NAME] (instead of the one the limit computes).",
)
@click.option(
    "--force",
    is_flag=True,
    help="Enqueue even if the loaded app does not register KIND or --args do not fit its type.",
)
@json_option
@pass_context
def enqueue(
    ctx: CliContext,
    kind: str,
    args_json: str,
    queue: str | None,
    priority: int | None,
    max_attempts: int | None,
    run_at: str | None,
    unique: bool,
    concurrency_key: str | None,
    force: bool,
    json_flag: bool,
) -> None:
    """Enqueue one job of KIND.

    With [app] modules configured, KIND must be registered in the loaded app and --args must
    rebuild as its registered args type (exit 2 naming the field, nothing written); --force
    skips both checks. A queue that no [queues] table configures is enqueued with a warning.
    """
    args = parse_json_option(args_json, "--args")
    if not isinstance(args, dict):
        raise ValidationError("--args", "must be a JSON object")
    options: dict[str, Any] = {
        "kind": kind,
        "queue": queue,
        "priority": priority,
        "max_attempts": max_attempts,
        "run_at": parse_run_at(run_at) if run_at else None,
    }
    if unique:
        options["unique_opts"] = {}
    if concurrency_key is not None:
        options["concurrency_key"] = concurrency_key
    app = ctx.app if ctx.config.app.modules else None
    if app is not None and not force:
        check_against_app(app, kind, args)
    if queue is None and app is not None:
        options["queue"] = app.queue_for(kind)
    from awa_cli.client import prepare_insert

    prepare_insert(args, options)  # validate before connecting: nothing is written on bad input
    target = options["queue"] or "default"
    if target not in ctx.config.queues:
        ctx.terminal.status(unconfigured_queue_warning(target, ctx.config.queues))
    tracing = ctx.config.telemetry.otlp_endpoint is not None
    if tracing:
        ctx.plugins  # noqa: B018 - builds the OpenTelemetry plugin: the insert stores awa.traceparent
    row = run_with_client(ctx, lambda c: c.insert(args, **options))
    if tracing:
        from awa_cli.plugins.otel import flush_active

        flush_active(timeout=1.0)  # send the enqueue span; a collector that is down costs 1 s
    show_row(ctx, row, json_flag, verb="enqueued")


def unconfigured_queue_warning(queue: str, configured: Any) -> str:
    """The warning for an enqueue to a queue no [queues] table names, with the configured
    queue it most likely meant ("emial" -> "email")."""
    import difflib

    names = sorted(configured)
    close = difflib.get_close_matches(queue, names, n=1, cutoff=0.6)
    hint = f"; did you mean {close[0]!r}?" if close else ""
    return (
        f"warning: queue {queue!r} is not configured ([queues] has {', '.join(names)}{hint}): "
        f"a worker must be started with --queue {queue} to run this job"
    )


@command.command(name="list")
@click.option("--state", type=click.Choice(STATES), help="Only jobs in this state.")
@click.option("--kind", help="Only jobs of this kind.")
@click.option("--queue", help="Only jobs in this queue.")
@limit_option()
@json_option
@pass_context
def list_jobs(
    ctx: CliContext,
    state: str | None,
    kind: str | None,
    queue: str | None,
    limit: int,
    json_flag: bool,
) -> None:
    """List jobs, newest first."""
    rows = run_with_client(
        ctx, lambda c: c.list_jobs(state=state, kind=kind, queue=queue, limit=limit)
    )
    print_listing(
        ctx, json_flag, ["id", "kind", "queue", "state", "attempt", "run_at"], rows, _summary
    )


@command.command(name="show")
@click.argument("job_id", type=int)
@json_option
@pass_context
def show(ctx: CliContext, job_id: int, json_flag: bool) -> None:
    """Show one job: args, errors, output, progress, callback state, its timeline, and why an
    available job is not running (scheduled, queue paused, its key at a limit's max_running or
    rate) or a blocked one waits (blocked on parents 12 (running), ...).

    Its place in the graph: the workflow and step it is part of, the batch it belongs to
    (member, or which callback), and its parents and children (id, kind, state; the first
    1,000 of each). The timeline lists each attempt (start, worker, outcome, error, rescue
    reason), the callback it waits on, its output and progress, the follow-ups it produced
    and the job that produced it. --json prints the row with the same under "timeline",
    and, for a job in a graph or a batch, "parents", "children", "parent_count",
    "child_count", "workflow" and "batch"."""

    async def fetch(client: Any) -> tuple[Any, dict[str, Any], Any, list[Any]]:
        history = await client.job_history(job_id)
        status = await client.limit_status(job_id)
        relations = await client.job_relations(job_id, limit=SHOWN_RELATIVES)
        runnable = history.job.state in (JobState.AVAILABLE, JobState.RETRYABLE)
        return history, status, relations, (await client.list_workers()) if runnable else []

    history, status, relations, workers = run_with_client(ctx, fetch)
    row = history.job
    shown = show_json(history, status, relations)
    failing = [
        {
            "worker": f"{w.host}:{w.pid}",
            "since": w.claim_failing_since.isoformat(),
            "error": w.claim_error,
        }
        for w in workers
        if row.queue in w.queues and w.claim_failing_since is not None
    ]
    limit = shown["limit"]
    if ctx.wants_json(json_flag):
        ctx.terminal.json(shown)
        return
    print_fields(ctx, row)
    if status["concurrency_key"] is not None:
        ctx.terminal.data(f"concurrency_key: {status['concurrency_key']}")
    if limit is not None:
        ctx.terminal.data(
            f"limit: {limit['name']} key {limit['key']!r} "
            f"({limit['running']}/{limit['max_running']} running)"
        )
    if status["reason"] is not None:
        ctx.terminal.data(f"waiting: {status['reason']}")
    for f in failing:
        ctx.terminal.data(
            f"waiting: claims of worker {f['worker']} on queue {row.queue} fail "
            f"since {f['since']}: {f['error']}"
        )
    for line in relations.lines():
        ctx.terminal.data(line)
    ctx.terminal.data("timeline:")
    for line in history.lines():
        ctx.terminal.data(f"  {line}")


_SHOWN_FIELDS = (
    "id",
    "kind",
    "queue",
    "state",
    "priority",
    "attempt",
    "max_attempts",
    "run_at",
    "run_lease",
    "created_at",
    "attempted_at",
    "attempted_by",
    "finalized_at",
    "heartbeat_at",
    "deadline_at",
    "callback_id",
    "callback_timeout_at",
    "tags",
    "ordering_key",
)


def print_fields(ctx: CliContext, row: JobRow) -> None:
    """The row's fields, one ``name: value`` line each (``awa job show``, ``awa job wait``)."""
    from awa_cli.history import format_progress

    data = row.to_json()
    for key in _SHOWN_FIELDS:
        value = data[key]
        if value not in (None, [], ""):
            ctx.terminal.data(
                f"{key}: {value if not isinstance(value, list) else ', '.join(value)}"
            )
    ctx.terminal.data(f"args: {json.dumps(row.args, sort_keys=True)}")
    if row.metadata:
        ctx.terminal.data(f"metadata: {json.dumps(row.metadata, sort_keys=True)}")
    if row.progress is not None:
        ctx.terminal.data(f"progress: {format_progress(row.progress)}")
    if row.output is not None:
        ctx.terminal.data(f"output: {json.dumps(row.output, sort_keys=True)}")
    if row.callback_result is not None:
        ctx.terminal.data(f"callback_result: {json.dumps(row.callback_result, sort_keys=True)}")
    print_errors(ctx, row.errors)


def print_errors(ctx: CliContext, errors: list[dict[str, Any]]) -> None:
    """One ``error attempt N at T: ...`` line per error entry (a job's or a dead letter's)."""
    for entry in errors:
        terminal = " (terminal)" if entry.get("terminal") else ""
        ctx.terminal.data(
            f"error attempt {entry.get('attempt')} at {entry.get('at')}{terminal}: {entry.get('error')}"
        )


def _no_id_no_filter(job_id: int | None, where: JobSelection, counted: Counted) -> bool:
    """True when the single action is asked for (an ID, no filter)."""
    filters = {"state": where.states, "kind": where.kind, "queue": where.queue}
    refuse_mixed(job_id, all=counted.all, **filters, dry_run=counted.dry_run)
    return job_id is not None


@dataclass(frozen=True)
class JobAction:
    """``awa job cancel`` or ``retry``: the client call on job ID and the verb its row is shown
    with; the bulk method (``bulk(client)``), its progress description and the count's text;
    the app the action runs with and, for the single one, its plugin hooks (when it runs:
    loading the plugins may report on stderr)."""

    one: Callable[[Any], Any]
    verb: str
    bulk: Callable[[Any], Any]
    doing: str
    done_text: str
    app: Any = None
    plugin_hooks: Callable[[], Any] = tuple


def _one_or_bulk(
    ctx: CliContext, job_id: int | None, where: JobSelection, counted: Counted, action: JobAction
) -> None:
    """The action on job ID, shown as its row, or on every job the filters match, counted
    (an ID and filters never together)."""
    if _no_id_no_filter(job_id, where, counted):
        row = run_with_client(ctx, action.one, app=action.app, plugin_hooks=action.plugin_hooks())
        show_row(ctx, row, counted.json, verb=action.verb)
        return
    run_counted(
        ctx,
        action.doing,
        lambda c, progress: action.bulk(c)(*where.filters, **counted.bulk(progress)),
        counted,
        action.done_text,
        app=action.app,
    )


EXIT_TIMED_OUT = 124  # as timeout(1)


@command.command(name="wait")
@click.argument("job_id", type=int)
@click.option(
    "--timeout", metavar="DURATION", help="Give up after this long (e.g. 30s, 5m); default never."
)
@json_option
@pass_context
def wait(ctx: CliContext, job_id: int, timeout: str | None, json_flag: bool) -> None:
    """Wait until job JOB_ID is completed, failed or cancelled, then print it.

    Exit 0 completed, 1 failed or cancelled, 124 timed out, 4 no such job. Woken by a
    notification from the transaction that finishes the job (any worker, any host)."""
    limit = None
    if timeout is not None:
        from awa_cli.config import ConfigError, parse_duration

        try:
            limit = parse_duration(timeout, "--timeout")
        except ConfigError as exc:
            raise ValidationError("--timeout", exc.message.removeprefix("--timeout: ")) from None
    try:
        row = run_with_client(ctx, lambda c: c.wait_for_job(job_id, limit))
    except TimeoutError:
        ctx.terminal.error(f"job {job_id} did not finish within {timeout}")
        click.get_current_context().exit(EXIT_TIMED_OUT)
    if ctx.wants_json(json_flag):
        ctx.terminal.json(row.to_json())
    else:
        print_fields(ctx, row)
    if row.state is not JobState.COMPLETED:
        click.get_current_context().exit(1)


@command.command(name="cancel")
@click.argument("job_id", type=int, required=False)
@job_filter_options("cancel", "Bulk: only", "all four")
@counted_options
def cancel(ctx: CliContext, job_id: int | None, where: JobSelection, counted: Counted) -> None:
    """Cancel job ID (pending, running or waiting), or every job matching the filters
    (available, scheduled, retryable, waiting_external; running jobs are not bulk-cancelled).

    With the loaded app, Cancelled fires and on_cancelled specs run, each job's cancel atomic
    with its follow-ups. Bulk: a filter or --all is required (exit 2); prints the count.
    """
    app = ctx.app if ctx.config.app.modules else None
    cancelling = JobAction(
        lambda c: c.cancel(job_id),
        "cancelled",
        lambda c: c.cancel_jobs,
        "cancelling",
        "jobs cancelled",
        app,
        lambda: ctx.plugins.event_hooks(),
    )
    _one_or_bulk(ctx, job_id, where, counted, cancelling)


@command.command(name="retry")
@click.argument("job_id", type=int, required=False)
@job_filter_options("retry", "Bulk: only", "failed and cancelled")
@counted_options
def retry(ctx: CliContext, job_id: int | None, where: JobSelection, counted: Counted) -> None:
    """Make job ID available again, attempts reset (fires nothing), or every failed or
    cancelled job matching the filters. Bulk: a filter or --all is required (exit 2)."""
    retrying = JobAction(
        lambda c: c.retry(job_id),
        "made available",
        lambda c: c.retry_jobs,
        "retrying",
        "jobs retried",
    )
    _one_or_bulk(ctx, job_id, where, counted, retrying)


@command.command(name="purge")
@job_filter_options("purge", "Only", "completed, failed and cancelled")
@older_than_option
@counted_options
def purge(ctx: CliContext, where: JobSelection, older_than: str | None, counted: Counted) -> None:
    """Delete finished jobs (completed, failed, cancelled) matching the filters, finished
    more than --older-than ago. A filter or --all is required (exit 2); prints the count."""
    seconds = age(older_than)
    run_counted(
        ctx,
        "purging",
        lambda c, progress: c.purge_jobs(*where.filters, seconds, **counted.bulk(progress)),
        counted,
        "jobs purged",
    )
