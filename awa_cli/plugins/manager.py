"""The plugin manager factory and the typed facade the rest of awa calls hooks through.

Load order: built-in plugins, then installed entry points (group ``awa_cli``), then the
modules named in ``[app] plugins``. A plugin that fails to load is reported by name and the
others still load. Nothing here runs at import time: every call of
:func:`build_plugin_host` builds a fresh manager.

awa never calls ``pm.hook.*`` (pluggy cannot await): :class:`PluginHost` calls each
implementation itself, in load order, with the semantics described in ``hookspecs.py``.
"""

from __future__ import annotations

import asyncio
import difflib
import functools
import importlib
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
HOOK_NAMES = tuple(name for name in vars(hookspecs) if name.startswith("awa_"))


@dataclass(frozen=True)
class LoadedPlugin:
    name: str
    origin: str  # "builtin", "entry point <distribution>" or "config"
    hooks: tuple[str, ...]

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "origin": self.origin, "hooks": list(self.hooks)}


@dataclass(frozen=True)
class FailedPlugin:
    name: str
    origin: str
    error: str

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "origin": self.origin, "error": self.error}


@dataclass
class PluginHost:
    """The plugin manager plus what was loaded and what failed."""

    pm: pluggy.PluginManager
    loaded: list[LoadedPlugin] = field(default_factory=list)
    failed: list[FailedPlugin] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)  # e.g. a misspelt hook name

    def implementations(self, hook_name: str) -> list[tuple[str, Callable[..., Any]]]:
        """(plugin name, callable taking the spec's keyword arguments), in call order.

        Call order is load order, ``tryfirst`` implementations first and ``trylast`` ones
        last (pluggy itself calls last-registered first). Hook wrappers are skipped.
        """
        return [(i.plugin_name, _bind(i)) for i in self._ordered(hook_name)]

    def _ordered(self, hook_name: str) -> list[Any]:
        impls = getattr(self.pm.hook, hook_name).get_hookimpls()
        plain = [i for i in impls if not (i.hookwrapper or getattr(i, "wrapper", False))]
        first = [i for i in plain if i.tryfirst]
        last = [i for i in plain if i.trylast]
        middle = [i for i in plain if not i.tryfirst and not i.trylast]
        return [*first, *middle, *last]

    def event_hooks(self) -> list[tuple[str, Callable[[Any], Any]]]:
        """``awa_job_event`` implementations as ``fn(event)``, for the dispatcher (an
        implementation taking exactly ``event`` is used as it is: no wrapper per call)."""
        hooks = []
        for impl in self._ordered("awa_job_event"):
            if tuple(impl.argnames) == ("event",):
                hooks.append((impl.plugin_name, impl.function))
            else:
                hooks.append((impl.plugin_name, _positional(_bind(impl), "event")))
        return hooks

    async def worker_started(self, worker: Any) -> None:
        """Call every ``awa_worker_started``; failures are logged, never raised."""
        await self._call_each("awa_worker_started", worker=worker)

    async def worker_stopping(self, worker: Any) -> None:
        """Call every ``awa_worker_stopping``; failures are logged, never raised."""
        await self._call_each("awa_worker_stopping", worker=worker)

    async def queue_depth(self, snapshot: Any) -> None:
        """Call every ``awa_queue_depth`` with the leader's snapshot; failures are logged."""
        await self._call_each("awa_queue_depth", snapshot=snapshot)

    async def limit_waiting(self, snapshot: Any) -> None:
        """Call every ``awa_limit_waiting`` with the leader's counts; failures are logged."""
        await self._call_each("awa_limit_waiting", snapshot=snapshot)

    async def _call_each(self, hook_name: str, **kwargs: Any) -> None:
        for name, fn in self.implementations(hook_name):
            try:
                if inspect.iscoroutinefunction(fn):
                    await fn(**kwargs)
                else:
                    result = await asyncio.to_thread(fn, **kwargs)
                    if inspect.isawaitable(result):
                        await result
            except asyncio.CancelledError:
                raise
            except BaseException as exc:
                log.error(
                    "plugin %s failed in %s: %s: %s",
                    name,
                    hook_name,
                    type(exc).__name__,
                    exc,
                    exc_info=exc,
                    extra={"action": "plugin_failed", "plugin": name},
                )


def _bind(impl: Any) -> Callable[..., Any]:
    """The implementation, called with only the arguments it declares (pluggy's rule)."""
    fn = impl.function
    wanted = tuple(impl.argnames)
    if inspect.iscoroutinefunction(fn):

        async def call_async(**kwargs: Any) -> Any:
            return await fn(**{k: kwargs[k] for k in wanted})

        return call_async

    def call(**kwargs: Any) -> Any:
        return fn(**{k: kwargs[k] for k in wanted})

    return call


def _positional(fn: Callable[..., Any], arg: str) -> Callable[[Any], Any]:
    """``fn`` callable with one positional value; its attributes (``awa_enabled``,
    ``awa_reads_args``) are kept for the dispatcher."""
    try:
        if list(inspect.signature(fn).parameters) == [arg]:
            return fn
    except (TypeError, ValueError):
        pass
    if inspect.iscoroutinefunction(fn):

        async def call_async(value: Any) -> Any:
            return await fn(**{arg: value})

        call = call_async
    else:

        def call(value: Any) -> Any:
            return fn(**{arg: value})

    call.__dict__.update(getattr(fn, "__dict__", {}))
    return call


def _tell(
    report: Callable[[str], None] | None, message: str, level: int, action: str, name: str
) -> None:
    """One problem, once: to ``report`` when the caller collects them, else the log."""
    if report is not None:
        report(f"warning: {message}")
    else:
        log.log(level, message, extra={"action": action, "plugin": name})


def _register(
    host: PluginHost,
    report: Callable[[str], None] | None,
    name: str,
    origin: str,
    load: Callable[[], Any],
) -> None:
    """Load one plugin and register it; a failure or a misspelt hook is reported once."""
    pm = host.pm
    try:
        plugin = load()
        if pm.is_registered(plugin):
            log.info(
                "plugin %s (%s) is already loaded as %s",
                name,
                origin,
                pm.get_name(plugin),
                extra={"action": "plugin_duplicate", "plugin": name},
            )
            return
        pm.register(plugin, name=name)
    except Exception as exc:
        text = f"{type(exc).__name__}: {exc}"  # one line, whatever the exception says
        error = " ".join(part.strip() for part in text.splitlines() if part.strip())
        host.failed.append(FailedPlugin(name, origin, error))
        message = f"plugin {name!r} ({origin}) failed to load: {error}"
        _tell(report, message, logging.ERROR, "plugin_load_failed", name)
        return
    host.loaded.append(LoadedPlugin(name, origin, _hook_names(pm, plugin)))
    for problem in _hook_name_problems(pm, plugin):
        message = f"plugin {name!r} ({origin}): {problem}"
        host.warnings.append(message)
        _tell(report, message, logging.WARNING, "plugin_unknown_hook", name)


def build_plugin_host(
    config_plugins: Iterable[str] = (),
    base_dir: Path | None = None,
    *,
    report: Callable[[str], None] | None = None,
    entry_points: bool = True,
    extra_builtins: Iterable[tuple[str, Callable[[], Any]]] = (),
) -> PluginHost:
    """Build a fresh plugin manager: built-ins, entry points, then ``[app] plugins``.

    ``config_plugins`` are ``module`` or ``module:attr`` specs, imported with ``base_dir``
    (the config file's folder) and the current directory on ``sys.path``. Each problem (a
    plugin that failed to load, an ``awa_`` name that is no hook) is reported once: to
    ``report`` when given, else logged. ``extra_builtins`` are ``(name, load)`` pairs of
    built-ins the config enabled (the Prometheus plugin), loaded after the always-on ones.
    """
    pm = pluggy.PluginManager("awa_cli")
    pm.add_hookspecs(hookspecs)
    host = PluginHost(pm)
    register = functools.partial(_register, host, report)
    for module_name in BUILTIN_PLUGINS:
        register(module_name, "builtin", functools.partial(importlib.import_module, module_name))
    for name, load in extra_builtins:
        register(name, "builtin", load)
    if entry_points:
        for ep in metadata.entry_points(group=ENTRY_POINT_GROUP):
            dist = ep.dist.name if ep.dist is not None else "unknown"
            register(ep.name, f"entry point {dist}", ep.load)
    from awa_cli.loading import import_target

    for spec in config_plugins:
        register(spec, "config", functools.partial(import_target, spec, base_dir, None))
    return host


def _hook_names(pm: pluggy.PluginManager, plugin: Any) -> tuple[str, ...]:
    """The hooks a registered plugin implements, in the order of ``hookspecs.py``."""
    implemented = {caller.name for caller in pm.get_hookcallers(plugin) or ()}
    return tuple(name for name in HOOK_NAMES if name in implemented)


def _hook_name_problems(pm: pluggy.PluginManager, plugin: Any) -> list[str]:
    """``awa_``-prefixed callables of a plugin that pluggy will never call: a name that is no
    hook (``awa_job_evnt``), or a hook's name without the ``@awa_cli.hookimpl`` marker."""
    implemented = {caller.name for caller in pm.get_hookcallers(plugin) or ()}
    problems = []
    for attr in sorted(dir(plugin)):
        if not attr.startswith("awa_") or (attr in implemented and attr in HOOK_NAMES):
            continue
        try:
            value = getattr(plugin, attr)
        except Exception:
            continue
        if not (inspect.isfunction(value) or inspect.ismethod(value)):
            continue
        if attr in HOOK_NAMES:
            problems.append(f"{attr} is not marked with @awa_cli.hookimpl and is never called")
            continue
        close = difflib.get_close_matches(attr, HOOK_NAMES, n=1)
        hint = f"did you mean {close[0]}?" if close else f"known hooks: {', '.join(HOOK_NAMES)}"
        problems.append(f"{attr} is not an awa hook ({hint})")
    return problems
