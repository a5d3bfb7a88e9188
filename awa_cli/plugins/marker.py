"""The hook implementation marker, re-exported as ``awa_cli.hookimpl``."""

import pluggy

hookimpl = pluggy.HookimplMarker("awa_cli")
