"""The plugin manager factory and the typed facade the rest of awa calls hooks through.

Load order: built-in plugins, then installed entry points (group ``awa_cli``), then the
modules named in ``[app] plugins``. A plugin that fails to load is reported by name and the
others still load.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path
from typing import Any

import pluggy

from awa_cli.plugins import hookspecs

log = logging.getLogger("awa.plugins")

ENTRY_POINT_GROUP = "awa_cli"
BUILTIN_PLUGINS = ("awa_cli.plugins.builtin_logging",)


@dataclass(frozen=True)
class LoadedPlugin:
    name: str
    origin: str  # "builtin", "entry point <distribution>" or "config"
    hooks: tuple[str, ...]

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "origin": self.origin, "hooks": list(self.hooks)}


@dataclass
class PluginHost:
    """The plugin manager plus what was loaded and what failed."""

    pm: pluggy.PluginManager
    loaded: list[LoadedPlugin] = field(default_factory=list)
    failed: list[tuple[str, str, str]] = field(default_factory=list)  # (name, origin, error)

    def _impls(self, hook_name: str) -> list[tuple[str, Callable[..., Any]]]:
        caller = getattr(self.pm.hook, hook_name)
        # pluggy lists implementations last-registered first; call in load order.
        return [(impl.plugin_name, impl.function) for impl in reversed(caller.get_hookimpls())]

    def event_hooks(self) -> list[tuple[str, Callable[[Any], Any]]]:
        """``awa_job_event`` implementations, for the dispatcher."""
        return self._impls("awa_job_event")

    async def worker_started(self, worker: Any) -> None:
        await self._call_each("awa_worker_started", worker=worker)

    async def worker_stopping(self, worker: Any) -> None:
        await self._call_each("awa_worker_stopping", worker=worker)

    async def _call_each(self, hook_name: str, **kwargs: Any) -> None:
        for name, fn in self._impls(hook_name):
            try:
                if inspect.iscoroutinefunction(fn):
                    await fn(**kwargs)
                else:
                    result = await asyncio.to_thread(fn, **kwargs)
                    if inspect.isawaitable(result):
                        await result
            except Exception as exc:  # noqa: BLE001 - a plugin never takes the worker down
                log.error("plugin %s failed in %s: %s: %s", name, hook_name, type(exc).__name__, exc,
                          extra={"action": "plugin_failed", "plugin": name})


def _hook_names(plugin: Any) -> tuple[str, ...]:
    return tuple(
        name for name in dir(hookspecs)
        if name.startswith("awa_") and callable(getattr(plugin, name, None))
    )


def build_plugin_host(
    config_plugins: Iterable[str] = (),
    base_dir: Path | None = None,
    *,
    report: Callable[[str], None] | None = None,
    entry_points: bool = True,
) -> PluginHost:
    """Build a fresh plugin manager: built-ins, entry points, then ``[app] plugins``."""
    pm = pluggy.PluginManager("awa_cli")
    pm.add_hookspecs(hookspecs)
    host = PluginHost(pm)

    def register(name: str, origin: str, load: Callable[[], Any]) -> None:
        try:
            plugin = load()
            pm.register(plugin, name=name)
        except Exception as exc:  # noqa: BLE001 - report by name, keep loading the rest
            message = f"plugin {name!r} ({origin}) failed to load: {type(exc).__name__}: {exc}"
            host.failed.append((name, origin, f"{type(exc).__name__}: {exc}"))
            log.error(message, extra={"action": "plugin_load_failed", "plugin": name})
            if report is not None:
                report(f"warning: {message}")
            return
        host.loaded.append(LoadedPlugin(name, origin, _hook_names(plugin)))

    import importlib

    for module_name in BUILTIN_PLUGINS:
        register(module_name, "builtin", lambda m=module_name: importlib.import_module(m))
    if entry_points:
        for ep in metadata.entry_points(group=ENTRY_POINT_GROUP):
            dist = ep.dist.name if ep.dist is not None else "unknown"
            register(ep.name, f"entry point {dist}", ep.load)
    from awa_cli.app import import_target

    for spec in config_plugins:
        register(spec, "config", lambda s=spec: import_target(s, base_dir, None))
    return host
