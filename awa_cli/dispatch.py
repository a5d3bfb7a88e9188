"""Post-commit event dispatch: in-process and best-effort.

The outcome core hands an event here only after its transaction committed. Each event runs
in its own detached task, so hooks never hold a worker slot or block claiming, and shutdown
does not wait for them. Within one event the App's hooks for the job's kind run first, in
registration order, then the plugins' ``awa_job_event`` implementations in load order; each
runs after the previous one finished, and an exception in one is logged with its name and the
next still runs.

Every hook gets its own copy of the args, rebuilt from the committed row (never the object
the handler saw, which it may have mutated): typed hooks get the registered type, untyped
hooks and plugins a dict. Async hooks are awaited on the loop; sync hooks run on a small
thread pool of their own (one per process, shared by every worker and client in it), so a
slow one stalls neither the event loop nor the handlers' threads nor the loop's default
executor (which psycopg uses to resolve hosts).
"""

from __future__ import annotations

import asyncio
import copy
import inspect
import logging
import os
import threading
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any

from awa_cli.attempts import not_an_object
from awa_cli.jsonvalues import rebuild_args

if TYPE_CHECKING:
    from awa_cli.app import App, Hook
    from awa_cli.events import AnyEvent

log = logging.getLogger("awa.dispatch")

EventHook = tuple[str, Callable[[Any], Any]]

HOOK_THREADS = 16

_pool_lock = threading.Lock()
_hook_threads: ThreadPoolExecutor | None = None


def hook_threads() -> ThreadPoolExecutor:
    """The process-wide pool sync hooks run on (created on first use)."""
    global _hook_threads
    with _pool_lock:
        if _hook_threads is None:
            _hook_threads = ThreadPoolExecutor(HOOK_THREADS, thread_name_prefix="awa-hook")
        return _hook_threads


def _forget_pool_in_child() -> None:
    global _hook_threads, _pool_lock
    _hook_threads, _pool_lock = None, threading.Lock()  # the parent's threads do not exist here


os.register_at_fork(after_in_child=_forget_pool_in_child)


class Dispatcher:
    def __init__(self, app: App | None = None, plugin_hooks: Sequence[EventHook] = ()) -> None:
        self.app = app
        self.plugin_hooks = list(plugin_hooks)
        self._tasks: set[asyncio.Task[None]] = set()
        self.failures = 0

    def dispatch(self, event: AnyEvent) -> None:
        """Schedule the hooks for a committed event; returns at once (never raises)."""
        hooks = self.app.hooks_for(event.job.kind) if self.app else []
        plugins = [h for h in self.plugin_hooks if _enabled(h[1], event)]
        if not hooks and not plugins:
            return
        try:
            task = asyncio.get_running_loop().create_task(
                self._run(event, hooks, plugins), name=f"awa-hooks-{event.name}-{event.job.id}"
            )
        except RuntimeError as exc:  # no running loop: nothing to run the hooks on
            log.error(
                "event %s of job %s dropped: %s",
                event.name,
                event.job.id,
                exc,
                extra={"action": "event_dropped", "job_id": event.job.id},
            )
            return
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    @property
    def pending(self) -> int:
        return len(self._tasks)

    async def drain(self, timeout: float) -> bool:
        """Wait up to ``timeout`` for dispatched hooks (used by one-shot CLI commands)."""
        tasks = [t for t in self._tasks if not t.done()]
        if not tasks:
            return True
        _, pending = await asyncio.wait(tasks, timeout=timeout)
        return not pending

    async def _run(self, event: AnyEvent, hooks: list[Hook], plugins: list[EventHook]) -> None:
        for hook in hooks:
            name = hook_name(hook.fn)
            try:
                typed = event_for_hook(event, hook.args_type)
            except Exception as exc:
                log.warning(
                    "hook %s skipped: args of job %s do not rebuild as %s: %s",
                    name,
                    event.job.id,
                    getattr(hook.args_type, "__name__", hook.args_type),
                    exc,
                    extra={"action": "hook_skipped", "job_id": event.job.id, "hook": name},
                )
                continue
            await self._call(name, hook.fn, typed)
        for name, fn in plugins:
            reads_args = getattr(fn, "awa_reads_args", True)
            await self._call(name, fn, event_for_hook(event, None) if reads_args else event)

    async def _call(self, name: str, fn: Callable[[Any], Any], event: AnyEvent) -> None:
        try:
            if inspect.iscoroutinefunction(fn):
                await fn(event)
            else:
                result = await asyncio.get_running_loop().run_in_executor(hook_threads(), fn, event)
                if inspect.isawaitable(result):
                    await result
        except asyncio.CancelledError:
            raise
        except BaseException as exc:
            self.failures += 1
            log.error(
                "hook %s failed on %s of job %s: %s: %s",
                name,
                event.name,
                event.job.id,
                type(exc).__name__,
                exc,
                exc_info=exc,
                extra={"action": "hook_failed", "job_id": event.job.id, "hook": name},
            )


def _enabled(fn: Callable[..., Any], event: AnyEvent) -> bool:
    """A hook may carry an ``awa_enabled(event)`` predicate (the built-in logger's level check),
    so events nobody would see cost no task."""
    predicate = getattr(fn, "awa_enabled", None)
    return predicate is None or bool(predicate(event))


def hook_name(fn: Callable[..., Any]) -> str:
    """``module.qualname`` of a hook, for logs."""
    qualname = getattr(fn, "__qualname__", None) or type(fn).__qualname__
    module = getattr(fn, "__module__", None)
    return f"{module}.{qualname}" if module else qualname


def event_for_hook(event: AnyEvent, args_type: type | None) -> AnyEvent:
    """The event with a fresh copy of the committed args: as ``args_type``, or a dict (the
    bare JSON value for args that are not an object, which no typed hook can take)."""
    data: Any = copy.deepcopy(event.job.args)
    if args_type is None:
        args = dict(data) if isinstance(data, Mapping) else data
    elif not isinstance(data, Mapping):
        raise TypeError(not_an_object(data))
    else:
        args = rebuild_args(args_type, data)
    return event.with_args(args)  # type: ignore[return-value]
