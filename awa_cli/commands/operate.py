"""What the operator commands share (`awa job retry|cancel|purge` by filter, `awa dlq ...`):
the filter options, running a counted action with a progress bar, and printing its count."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import click

from awa_cli.bulk import BULK_STATES, BulkOperation
from awa_cli.commands.context import CliContext, run_with_client
from awa_cli.durations import parse_duration

EXIT_USAGE = 2


def all_option(fn: Any) -> Any:
    return click.option(
        "--all", "all_", is_flag=True, help="Act on every match even with no filter given."
    )(fn)


def dry_run_option(fn: Any) -> Any:
    return click.option(
        "--dry-run", is_flag=True, help="Print how many would change; change nothing."
    )(fn)


def older_than_option(fn: Any) -> Any:
    return click.option(
        "--older-than", metavar="DURATION", help="Only those older than this (e.g. 7d, 12h)."
    )(fn)


def job_filter_options(operation: BulkOperation, lead: str, default: str) -> Callable[[Any], Any]:
    """``--state`` (one of the states ``operation`` acts on, repeatable), ``--kind`` and
    ``--queue`` of `awa job cancel|retry|purge`; each help starts with ``lead`` ("Bulk: only"
    or "Only"), and ``default`` names the states taken without ``--state``."""

    def decorate(fn: Any) -> Any:
        fn = click.option("--queue", help=f"{lead} jobs in this queue.")(fn)
        fn = click.option("--kind", help=f"{lead} jobs of this kind.")(fn)
        return click.option(
            "--state",
            "states",
            multiple=True,
            type=click.Choice(sorted(s.value for s in BULK_STATES[operation])),
            help=f"{lead} jobs in this state (repeatable; default: {default}).",
        )(fn)

    return decorate


def age(text: str | None) -> float | None:
    """``--older-than`` as seconds (a bad duration is exit 2 naming the option)."""
    return None if text is None else parse_duration(text, "--older-than")


EVENT_LOG_PLUGIN = "awa_cli.plugins.builtin_logging"


def bulk_event_hooks(ctx: CliContext) -> list[Any]:
    """The plugins' event hooks for a bulk action, without the one that logs each event: a
    bulk cancel of 100,000 jobs prints its count, not 100,000 INFO lines (``-v`` keeps them)."""
    hooks = ctx.plugins.event_hooks()
    if ctx.verbose:
        return hooks
    return [(name, fn) for name, fn in hooks if name != EVENT_LOG_PLUGIN]


def run_counted(
    ctx: CliContext,
    description: str,
    action: Callable[[Any, Any], Any],
    *,
    json_flag: bool,
    dry_run: bool,
    done_text: str,
    app: Any = None,
) -> None:
    """Run ``action(client, progress)`` (a bulk method returning a count) with a progress bar
    on a terminal, then print the count (``{"count": n}`` with --json)."""
    plugin_hooks = bulk_event_hooks(ctx) if app is not None else ()
    with ctx.terminal.progress(description) as progress:
        n = run_with_client(ctx, lambda c: action(c, progress), app=app, plugin_hooks=plugin_hooks)
    if ctx.wants_json(json_flag):
        ctx.terminal.json({"count": n})
        return
    if dry_run:  # "1500 jobs would be cancelled", "6 dead letters would be retried"
        noun, verb = done_text.rsplit(" ", 1)
        ctx.terminal.data(f"{n} {noun} would be {verb}")
    else:
        ctx.terminal.data(f"{n} {done_text}")


def refuse_mixed(job_id: Any, **filters: Any) -> None:
    """A positional ID means the single action; filters mean the bulk one, never both."""
    given = [f"--{name.replace('_', '-')}" for name, value in filters.items() if value]
    if job_id is not None and given:
        raise click.UsageError(f"give an ID or filters ({', '.join(given)}), not both")
