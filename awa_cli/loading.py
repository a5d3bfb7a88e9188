"""The one place awa imports user code: the ``[app] modules`` and ``[app] plugins`` of
``awa.toml``.

Importing a user module runs its code and may put the config's folder and the current
directory on ``sys.path``; that is why it lives here and not in the pure :mod:`awa_cli.app`.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from awa_cli.app import App
from awa_cli.errors import AppNotFound, AwaError


def import_target(spec: str, base_dir: Path | None, default_attr: str | None) -> Any:
    """Import ``module`` or ``module:attr`` with the config's folder and cwd on sys.path."""
    module_name, _, attr = spec.partition(":")
    for folder in (str(Path.cwd()), str(base_dir) if base_dir else None):
        if folder and folder not in sys.path:
            sys.path.insert(0, folder)
    module = importlib.import_module(module_name)
    attr = attr or default_attr or ""
    if not attr:
        return module
    try:
        return getattr(module, attr)
    except AttributeError:
        raise AppNotFound(f"[app] modules: {module_name!r} has no attribute {attr!r}") from None


def load_apps(modules: Iterable[str], base_dir: Path | None = None) -> App:
    """Import each ``[app] modules`` entry and merge their apps into one."""
    merged = App()
    for spec in modules:
        module_name = spec.partition(":")[0]
        try:
            target = import_target(spec, base_dir, "app")
        except ModuleNotFoundError as exc:
            missing = exc.name or ""
            if missing and (module_name == missing or module_name.startswith(missing + ".")):
                raise AppNotFound(f"[app] modules: no module named {missing!r} ({spec!r})") from exc
            raise AwaError(f"[app] modules: cannot import {spec!r}: {exc}") from exc
        except AwaError:
            raise
        except Exception as exc:  # the module was found but raised: the code's fault (exit 1)
            raise AwaError(
                f"[app] modules: {spec!r} raised while importing: {type(exc).__name__}: {exc}"
            ) from exc
        if not isinstance(target, App):
            raise AwaError(f"[app] modules: {spec!r} is {type(target).__name__}, not an awa App")
        merged.merge(target)
    return merged
