"""The one place awa talks to people: rich on a terminal, plain text when piped.

Data goes to stdout, status and errors to stderr. ``NO_COLOR`` and ``--no-color`` are honoured.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any

from rich.console import Console
from rich.table import Table


class Terminal:
    def __init__(self, *, no_color: bool = False, quiet: bool = False) -> None:
        no_color = no_color or "NO_COLOR" in os.environ
        self.out = Console(file=sys.stdout, no_color=no_color, highlight=False, soft_wrap=True)
        self.err = Console(file=sys.stderr, no_color=no_color, highlight=False, soft_wrap=True)
        self.quiet = quiet

    def data(self, text: str) -> None:
        """A line of data on stdout, printed verbatim."""
        self.out.print(text, markup=False)

    def status(self, text: str) -> None:
        """A status line on stderr (suppressed by ``-q``)."""
        if not self.quiet:
            self.err.print(text, markup=False)

    def error(self, text: str) -> None:
        self.err.print(f"Error: {text}", markup=False, style="red")

    def json(self, value: Any) -> None:
        sys.stdout.write(json.dumps(value, default=str, indent=2) + "\n")
        sys.stdout.flush()

    def table(
        self, columns: Sequence[str], rows: Iterable[Sequence[Any]], title: str | None = None
    ) -> None:
        """A rich table on a terminal; tab-separated lines when piped."""
        if self.out.is_terminal:
            table = Table(*columns, title=title)
            for row in rows:
                table.add_row(*("" if v is None else str(v) for v in row))
            self.out.print(table)
            return
        # Piped: plain tab-separated lines, written as they are (rich would expand tabs).
        lines = ["\t".join(columns)]
        lines += ["\t".join("" if v is None else str(v) for v in row) for row in rows]
        sys.stdout.write("\n".join(lines) + "\n")
        sys.stdout.flush()

    @contextlib.contextmanager
    def progress(self, description: str) -> Iterator[Callable[[int, int], None]]:
        """A progress bar on stderr while a long operation runs (``update(done, total)``);
        nothing when stderr is not a terminal or with ``-q``."""
        if self.quiet or not self.err.is_terminal:
            yield lambda done, total: None
            return
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TimeElapsedColumn

        with Progress(
            "[progress.description]{task.description}",
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            console=self.err,
            transient=True,
        ) as bar:
            task = bar.add_task(description, total=None)

            def update(done: int, total: int) -> None:
                bar.update(task, completed=done, total=total or None)

            yield update
