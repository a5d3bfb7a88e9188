"""`awa plugins`."""

from __future__ import annotations

import click


@click.group(name="plugins")
def command() -> None:
    """Not yet available."""
