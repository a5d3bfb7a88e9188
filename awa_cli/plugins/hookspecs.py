"""The plugin contract: every hook a plugin may implement.

Implement hooks with the public marker ``awa_cli.hookimpl`` in a module (or object) that is
installed as an entry point in the group ``awa_cli`` or listed in ``[app] plugins`` of
``awa.toml``::

    import awa_cli

    @awa_cli.hookimpl
    def awa_job_event(event):
        ...

How hooks are called. pluggy itself cannot await, so awa never uses ``pm.hook.*`` to call
them: the plugin host (:class:`awa_cli.plugins.manager.PluginHost`) calls each implementation
on its own, in plugin load order (built-ins, entry points, ``[app] plugins``; ``tryfirst`` /
``trylast`` are honoured, hook wrappers are not supported). An ``async def`` implementation
(or one returning an awaitable) is awaited on the worker's event loop; a plain function runs
in a thread. An implementation may declare fewer arguments than the spec, as with any pluggy
hook. One implementation's exception is logged with the plugin's name and never stops the
other implementations, the job, or the worker. No hook is ever called inside a database
transaction. Return values are ignored.
"""

from __future__ import annotations

from collections.abc import Awaitable, Mapping, Sequence
from typing import TYPE_CHECKING

import pluggy

if TYPE_CHECKING:
    from awa_cli.depth import QueueDepth
    from awa_cli.events import AnyEvent
    from awa_cli.worker.runtime import Worker

hookspec = pluggy.HookspecMarker("awa_cli")


@hookspec
def awa_job_event(event: AnyEvent) -> Awaitable[None] | None:
    """Every committed lifecycle event of every job kind (``awa_cli.JobEvent.*``).

    Fires after the transition's transaction committed, never inside a transaction, in the
    process that made the transition (a worker, a client with an app, ``awa callback``,
    ``awa job cancel``, ``awa rescue run``). ``Started`` fires when the claim commits, just
    before the handler runs, and is dispatched detached: a fast job may finish before its
    ``Started`` implementations do. The outcome events (``Completed``, ``Retried``,
    ``Exhausted``, ``Cancelled``, ``WaitingForCallback``, ``Rescued``) fire after the outcome
    commits; a stale finalisation fires nothing; a ``Snooze`` fires nothing. Runs after the
    App's hooks for the job's kind, in its own task: it never holds a worker slot, and
    ``Worker.shutdown()`` does not wait for it. ``event.job`` is the committed row,
    ``event.args`` a fresh copy of its args dict. May be async. Best-effort: lost if the
    process dies first. Return ignored.
    """


@hookspec
def awa_worker_started(worker: Worker) -> Awaitable[None] | None:
    """A worker process finished starting (pool open, queue runners claiming).

    Fires once in each worker process, never in the ``--processes`` supervisor, and never
    inside a database transaction. ``worker`` is the :class:`awa_cli.Worker`; read its state
    through ``worker.stats()`` (a :class:`~awa_cli.worker.services.WorkerStats` snapshot:
    queues, running jobs, staged follow-up counters, hook failures). May be async;
    ``Worker.run()`` awaits it (jobs are already being claimed meanwhile). Return ignored.
    """


@hookspec
def awa_worker_stopping(worker: Worker) -> Awaitable[None] | None:
    """A worker process began its graceful stop: no new claims from now on.

    Fires once in each worker process, at the start of ``Worker.shutdown()``, before the
    in-flight jobs are drained; never inside a database transaction. May be async;
    ``shutdown()`` awaits it before draining. Return ignored.
    """


@hookspec
def awa_limit_waiting(snapshot: Mapping[str, int]) -> Awaitable[None] | None:
    """The maintenance leader counted the jobs waiting on each concurrency limit.

    Fires once per maintenance interval, only in the leader's process and only when that
    worker has ``[limits.NAME]`` configured, never inside a database transaction.
    ``snapshot`` maps every announced limit's name to its due available jobs whose key is at
    ``max_running`` or out of rate budget (0 included). May be async; keep it quick (store
    the values; no I/O). Return ignored.
    """


@hookspec
def awa_queue_depth(snapshot: Sequence[QueueDepth]) -> Awaitable[None] | None:
    """The maintenance leader took its periodic queue-depth snapshot.

    Fires once per maintenance interval, only in the process holding the leader lock, after
    the snapshot's query finished and never inside a database transaction. ``snapshot`` lists
    every queue with available jobs (``awa_cli.depth.QueueDepth``: ``queue``, ``available``,
    ``oldest_available_age`` in seconds); a queue missing from it has none (keep a gauge at
    zero with ``awa_cli.depth.DepthGauges``). May be async; the leader awaits every implementation before its next sweep, so keep
    it quick (store the values; no I/O). Return ignored.
    """
