"""What the listing commands share (`awa job|dlq|batch|workflow|cron list`, `awa audit`): the
``--limit`` option and printing the rows as a JSON list or a table."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any

import click

from awa_cli.commands.context import CliContext


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
