"""`awa rescue`."""

from __future__ import annotations

import click


@click.group(name="rescue")
def command() -> None:
    """Not yet available."""
