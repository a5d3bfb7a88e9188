"""The command shapes several groups share: a listing (`awa job|dlq|batch|workflow|cron list`,
`awa audit`: the ``--limit`` option, the rows as a JSON list or a table) and a
``GROUP VERB TARGET [--json]`` command (`awa cron pause NAME`, `awa workflow cancel ID`)."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any

import click

from awa_cli.commands.context import CliContext, json_option, pass_context


def limit_option(most: int = 100000, default: int = 50) -> Callable[[Any], Any]:
    """``--limit``: how many rows a listing shows (1 to ``most``)."""
    return click.option("--limit", type=click.IntRange(1, most), default=default, show_default=True)


def print_listing(
    ctx: CliContext,
    json_flag: bool,
    columns: Sequence[str],
    rows: Iterable[Any],
    summary: Callable[[Any], Sequence[Any]],
    as_json: Callable[[Any], Any] = lambda row: row.to_json(),
) -> None:
    """A listing: a JSON list of ``as_json(row)`` with --json, else a table of
    ``summary(row)`` under ``columns``."""
    if ctx.wants_json(json_flag):
        ctx.terminal.json([as_json(row) for row in rows])
        return
    ctx.terminal.table(columns, [summary(row) for row in rows])


def target_command(
    group: click.Group, verb: str, argument: Callable[[Any], Any]
) -> Callable[[Any], Any]:
    """A ``GROUP VERB TARGET [--json]`` command: ``group``'s command ``verb``, its one
    ``argument`` and --json; the function takes the CliContext first."""

    def decorate(fn: Any) -> Any:
        return group.command(name=verb)(argument(json_option(pass_context(fn))))

    return decorate
