"""Terminal.progress: a rich bar on a terminal, nothing when piped or quiet."""

from __future__ import annotations

import io

from rich.console import Console

from awa_cli.terminal import Terminal


def test_a_bar_on_a_terminal() -> None:
    terminal = Terminal(no_color=True)
    buffer = io.StringIO()
    terminal.err = Console(file=buffer, force_terminal=True, width=100)
    with terminal.progress("retrying") as update:
        update(0, 3000)
        update(1000, 3000)
    assert "retrying" in buffer.getvalue() and "1000/3000" in buffer.getvalue()


def test_nothing_when_piped_or_quiet() -> None:
    for quiet, forced in ((False, False), (True, True)):
        terminal = Terminal(no_color=True, quiet=quiet)
        buffer = io.StringIO()
        terminal.err = Console(file=buffer, force_terminal=forced)
        with terminal.progress("retrying") as update:
            update(5, 10)
        assert buffer.getvalue() == ""
