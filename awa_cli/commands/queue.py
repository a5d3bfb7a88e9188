"""`awa queue`."""

from __future__ import annotations

import click


@click.group(name="queue")
def command() -> None:
    """Not yet available."""
