"""Post-commit event dispatch: in-process and best-effort.

The outcome core hands an event here only after its transaction committed. Each event runs
in its own detached task, so hooks never hold a worker slot or block claiming, and shutdown
does not wait for them. Within one event the App's hooks for the job's kind run first, in
registration order, then the plugins' ``awa_job_event`` implementations; each runs after
the previous one finished, and an exception in one is logged with its name and the next
still runs. Sync hooks run in a thread so they cannot stall the event loop.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from awa_cli.jobs import rebuild_args

if TYPE_CHECKING:
    from awa_cli.app import App, Hook
    from awa_cli.events import AnyEvent

log = logging.getLogger("awa.dispatch")

EventHook = tuple[str, Callable[[Any], Any]]


class Dispatcher:
    def __init__(self, app: App | None = None, plugin_hooks: Sequence[EventHook] = ()) -> None:
        self.app = app
        self.plugin_hooks = list(plugin_hooks)
        self._tasks: set[asyncio.Task[None]] = set()
        self.failures = 0

    def dispatch(self, event: AnyEvent) -> None:
        """Schedule the hooks for a committed event; returns at once."""
        hooks = self.app.hooks.get(event.job.kind, []) if self.app else []
        if not hooks and not self.plugin_hooks:
            return
        task = asyncio.get_running_loop().create_task(self._run(event, list(hooks)))
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

    async def _run(self, event: AnyEvent, hooks: list[Hook]) -> None:
        for hook in hooks:
            try:
                typed = _event_for_hook(event, hook.args_type)
            except Exception as exc:  # noqa: BLE001
                log.warning(
                    "hook %s skipped: args of job %s do not rebuild as %s: %s",
                    hook.name, event.job.id, getattr(hook.args_type, "__name__", hook.args_type), exc,
                    extra={"action": "hook_skipped", "job_id": event.job.id},
                )
                continue
            await self._call(hook.name, hook.fn, typed)
        if self.plugin_hooks:
            untyped = _event_for_hook(event, None)
            for name, fn in self.plugin_hooks:
                await self._call(name, fn, untyped)

    async def _call(self, name: str, fn: Callable[[Any], Any], event: AnyEvent) -> None:
        try:
            if inspect.iscoroutinefunction(fn):
                await fn(event)
            else:
                result = await asyncio.to_thread(fn, event)
                if inspect.isawaitable(result):
                    await result
        except Exception as exc:  # noqa: BLE001 - a hook's failure is logged, never propagated
            self.failures += 1
            log.error(
                "hook %s failed on %s of job %s: %s: %s",
                name, event.name, event.job.id, type(exc).__name__, exc,
                extra={"action": "hook_failed", "job_id": event.job.id, "hook": name},
            )


def _event_for_hook(event: AnyEvent, args_type: type | None) -> AnyEvent:
    """The event with args as the hook wants them: typed, or the committed dict."""
    if args_type is None:
        if isinstance(event.args, dict):
            return event
        return event.with_args(dict(event.job.args))  # type: ignore[return-value]
    if isinstance(event.args, args_type):
        return event
    return event.with_args(rebuild_args(args_type, event.job.args))  # type: ignore[return-value]
