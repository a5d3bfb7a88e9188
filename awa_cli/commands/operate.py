"""What the operator commands share (`awa job retry|cancel|purge` by filter, `awa dlq ...`):
the filter options, running a counted action with a progress bar, and printing its count."""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import click

from awa_cli.bulk import BULK_STATES, BulkOperation
from awa_cli.commands.context import CliContext, json_option, pass_context, run_with_client
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


@dataclass(frozen=True)
class JobSelection:
    """The ``--state``, ``--kind`` and ``--queue`` of `awa job cancel|retry|purge`."""

    states: tuple[str, ...]
    kind: str | None
    queue: str | None

    @property
    def filters(self) -> tuple[list[str] | None, str | None, str | None]:
        """The first three arguments of the client's bulk methods: states, kind, queue."""
        return list(self.states) or None, self.kind, self.queue


def job_filter_options(operation: BulkOperation, lead: str, default: str) -> Callable[[Any], Any]:
    """``--state`` (one of the states ``operation`` acts on, repeatable), ``--kind`` and
    ``--queue`` of `awa job cancel|retry|purge`, handed to the command as one
    ``where: JobSelection``; each help starts with ``lead`` ("Bulk: only" or "Only"), and
    ``default`` names the states taken without ``--state``."""

    def decorate(fn: Any) -> Any:
        @functools.wraps(fn)
        def selecting(*args: Any, states: Any, kind: Any, queue: Any, **kwargs: Any) -> Any:
            return fn(*args, where=JobSelection(states, kind, queue), **kwargs)

        selecting = click.option("--queue", help=f"{lead} jobs in this queue.")(selecting)
        selecting = click.option("--kind", help=f"{lead} jobs of this kind.")(selecting)
        return click.option(
            "--state",
            "states",
            multiple=True,
            type=click.Choice(sorted(s.value for s in BULK_STATES[operation])),
            help=f"{lead} jobs in this state (repeatable; default: {default}).",
        )(selecting)

    return decorate


@dataclass(frozen=True)
class Counted:
    """The flags of a counted operator command: ``--all``, ``--dry-run`` and ``--json``."""

    all: bool
    dry_run: bool
    json: bool

    def bulk(self, progress: Any) -> dict[str, Any]:
        """The keyword arguments a bulk client method takes from these flags."""
        return {"all": self.all, "dry_run": self.dry_run, "progress": progress}


def counted_options(fn: Any) -> Any:
    """``--all``, ``--dry-run`` and ``--json`` (after the options above it) and the CliContext:
    ``fn(ctx, ..., counted=Counted(...))``."""

    @functools.wraps(fn)
    def counting(
        ctx: CliContext, *args: Any, all_: bool, dry_run: bool, json_flag: bool, **kwargs: Any
    ) -> Any:
        return fn(ctx, *args, counted=Counted(all_, dry_run, json_flag), **kwargs)

    return all_option(dry_run_option(json_option(pass_context(counting))))


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
    counted: Counted,
    done_text: str,
    app: Any = None,
) -> None:
    """Run ``action(client, progress)`` (a bulk method returning a count) with a progress bar
    on a terminal, then print the count (``{"count": n}`` with --json)."""
    plugin_hooks = bulk_event_hooks(ctx) if app is not None else ()
    with ctx.terminal.progress(description) as progress:
        n = run_with_client(ctx, lambda c: action(c, progress), app=app, plugin_hooks=plugin_hooks)
    if ctx.wants_json(counted.json):
        ctx.terminal.json({"count": n})
        return
    if counted.dry_run:  # "1500 jobs would be cancelled", "6 dead letters would be retried"
        noun, verb = done_text.rsplit(" ", 1)
        ctx.terminal.data(f"{n} {noun} would be {verb}")
    else:
        ctx.terminal.data(f"{n} {done_text}")


def refuse_mixed(job_id: Any, **filters: Any) -> None:
    """A positional ID means the single action; filters mean the bulk one, never both."""
    given = [f"--{name.replace('_', '-')}" for name, value in filters.items() if value]
    if job_id is not None and given:
        raise click.UsageError(f"give an ID or filters ({', '.join(given)}), not both")
