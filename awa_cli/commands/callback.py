"""`awa callback`."""

from __future__ import annotations

import click


@click.group(name="callback")
def command() -> None:
    """Not yet available."""
