"""The plugin contract: every hook a plugin may implement.

Implement hooks with the public marker ``awa_cli.hookimpl``::

    import awa_cli

    @awa_cli.hookimpl
    def awa_job_event(event):
        ...

How hooks are called. pluggy itself cannot await, so awa calls each implementation on its
own: a plain function is run in a worker thread, an ``async def`` (or any implementation
returning an awaitable) is awaited on the worker's event loop. One implementation's exception
is logged with the plugin's name and never stops the others, the job, or the worker. No hook
is ever called inside a database transaction. Return values are ignored.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pluggy

if TYPE_CHECKING:
    from awa_cli.events import AnyEvent

hookspec = pluggy.HookspecMarker("awa_cli")


@hookspec
def awa_job_event(event: AnyEvent) -> Any:
    """Every committed lifecycle event of every job kind (``awa_cli.JobEvent.*``).

    Fires after the transition's transaction committed, in the process that made the
    transition (a worker, a client with an app, ``awa callback``, ``awa job cancel``,
    ``awa rescue run``); ``Started`` is dispatched detached. ``event.args`` is the committed
    args dict. May be async. Best-effort: lost if the process dies first. Return ignored.
    """


@hookspec
def awa_worker_started(worker: Any) -> Any:
    """A worker process finished starting (pool open, runners claiming).

    Fires once in each worker process, never in the ``--processes`` supervisor. ``worker``
    is the :class:`awa_cli.Worker`. May be async. Return ignored.
    """


@hookspec
def awa_worker_stopping(worker: Any) -> Any:
    """A worker process began its graceful stop (no new claims from now on).

    Fires once in each worker process, before in-flight jobs are drained. May be async.
    Return ignored.
    """
