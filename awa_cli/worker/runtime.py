"""``awa.Worker``: claims jobs of its queues, runs their handlers, finalises in batches.

One asyncio loop per process. Each queue has a runner that claims up to its free slots in
one statement (``FOR UPDATE SKIP LOCKED``, priority → run_at → id), woken by ``LISTEN`` on
the queue's channel, by freed slots while the queue has work, by the next scheduled job
falling due, and by a polling backstop. A heartbeat loop touches every running job in one
statement; a job whose row was taken away (cancelled, rescued) is flagged so its handler's
``job.is_cancelled()`` turns true.
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from psycopg_pool import AsyncConnectionPool

from awa_cli import defaults
from awa_cli.db.dsn import redact, with_options
from awa_cli.dispatch import Dispatcher, EventHook
from awa_cli.outcomes import AttemptResult, Finalized, OutcomeCore
from awa_cli.worker.callbacks import CallbackServices
from awa_cli.worker.finalizer import Finalizer, recheck
from awa_cli.worker.listener import Listener
from awa_cli.worker.queues import QueueRunner, QueueSpec

if TYPE_CHECKING:
    from awa_cli.app import App
    from awa_cli.jobs import InsertOpts, PreparedJob
    from awa_cli.worker.job import Job

log = logging.getLogger("awa.worker")

# How long a claim, heartbeat or finalisation waits for a pooled connection before its
# retry loop tries again (see the pools in Worker.__init__).
POOL_WAIT_SECONDS = 3.0


@dataclass(frozen=True)
class Timings:
    heartbeat_interval: float = defaults.HEARTBEAT_INTERVAL
    heartbeat_staleness: float = defaults.HEARTBEAT_STALENESS
    rescue_interval: float = defaults.RESCUE_INTERVAL
    leader_election_interval: float = defaults.LEADER_ELECTION_INTERVAL
    poll_interval: float = defaults.POLL_INTERVAL
    shutdown_timeout: float = defaults.SHUTDOWN_TIMEOUT
    completed_retention: float = defaults.COMPLETED_RETENTION
    failed_retention: float = defaults.FAILED_RETENTION


@dataclass
class WorkerServices(CallbackServices):
    """What a running handler's ``Job`` may ask of its worker."""

    core: OutcomeCore = field(default=None)  # type: ignore[assignment]

    def prepare_follow_up(self, args: Any, opts: InsertOpts) -> PreparedJob:
        return self.core.prepare_follow_up(args, opts)


class Worker:
    """Runs the handlers of ``app`` for ``queues`` (name → concurrency, or a QueueSpec)."""

    def __init__(
        self,
        app: App,
        dsn: str,
        queues: Mapping[str, int | QueueSpec] | None = None,
        *,
        plugin_hooks: list[EventHook] | None = None,
        plugins: Any = None,
        maintenance: bool = True,
        callback_base_url: str | None = None,
        **timings: Any,
    ) -> None:
        self.app = app
        self.callback_base_url = callback_base_url  # CallbackToken.url(); see awa_cli.callbacks
        self.dsn = with_options(dsn, application_name="awa-worker")
        self.timings = Timings(**timings)
        self.queues = {
            name: spec if isinstance(spec, QueueSpec) else QueueSpec(name, int(spec))
            for name, spec in (queues or {"default": 10}).items()
        }
        self.plugins = plugins
        hooks = list(plugin_hooks or [])
        if plugins is not None:
            hooks.extend(plugins.event_hooks())
        self.dispatcher = Dispatcher(app, hooks)
        self.maintenance_enabled = maintenance
        self.id = f"{socket.gethostname()}:{os.getpid()}"
        self._stopping = asyncio.Event()
        self._stopped = asyncio.Event()
        self._tasks: list[asyncio.Task[Any]] = []
        self._runner_tasks: list[asyncio.Task[Any]] = []
        self.running: dict[int, Job] = {}
        total = sum(q.concurrency for q in self.queues.values())
        self._threads = ThreadPoolExecutor(
            max_workers=max(4, total), thread_name_prefix="awa-handler"
        )
        self.pool = AsyncConnectionPool(
            with_options(self.dsn, options="-c awa.defer_notify=on"),
            min_size=2,
            # finalising (2 flushers, each a batch statement and a follow-up transaction),
            # maintenance, callbacks, hooks' clients
            max_size=10 + len(self.queues),
            open=False,
            kwargs={"autocommit": True},
            reconnect_timeout=0,  # never give up: the database may be restarting
            # reconnect_timeout=0 makes the pool drop a failed reconnect at once; a getconn
            # queued behind it then waits out its whole timeout (30 s by default) before the
            # caller's retry grows the pool again. A short timeout resumes within seconds.
            timeout=POOL_WAIT_SECONDS,
        )
        # Claims and heartbeats need no durable commit: a claim lost in a server crash only
        # makes the job claimable again, and any completion's durable commit is ordered after
        # its claim in the WAL. Outcomes use the durable pool.
        self.claim_pool = AsyncConnectionPool(
            with_options(self.dsn, options="-c synchronous_commit=off"),
            min_size=1,
            max_size=len(self.queues) + 1,
            open=False,
            kwargs={"autocommit": True},
            reconnect_timeout=0,
            timeout=POOL_WAIT_SECONDS,
        )
        self.core = OutcomeCore(self.pool, app, self.dispatcher, defer_notify=True)
        self.services = WorkerServices(
            pool=self.pool, core=self.core, callback_base_url=callback_base_url
        )
        self.finalizer = Finalizer(self.core, self._finalized)
        self.runners = {name: QueueRunner(self, spec) for name, spec in self.queues.items()}
        self.listener = Listener(self.dsn, self.runners, self.services)
        self.maintenance: Any = None

    @property
    def stopping(self) -> bool:
        return self._stopping.is_set()

    async def run(self) -> None:
        """Run until :meth:`shutdown` is called (or the task is cancelled)."""
        await self.pool.open(wait=False)
        await self.claim_pool.open(wait=False)
        self.finalizer.start()
        loop = asyncio.get_running_loop()
        self._runner_tasks = [
            loop.create_task(r.run(), name=f"awa-queue-{r.spec.name}")
            for r in self.runners.values()
        ]
        self._tasks = [
            loop.create_task(self.listener.run(self._stopping), name="awa-listener"),
            loop.create_task(self._heartbeat_loop(), name="awa-heartbeat"),
        ]
        if self.maintenance_enabled:
            from awa_cli.maintenance import Maintenance

            self.maintenance = Maintenance(
                self.dsn, self.pool, self.core, self.timings, worker=self
            )
            self._tasks.append(
                loop.create_task(self.maintenance.run(self._stopping), name="awa-maintenance")
            )
        log.info(
            "worker %s started: queues %s, database %s",
            self.id,
            ", ".join(f"{q.name}={q.concurrency}" for q in self.queues.values()),
            redact(self.dsn),
            extra={"action": "worker_started"},
        )
        if self.plugins is not None:
            await self.plugins.worker_started(self)
        await self._stopped.wait()

    async def shutdown(self, timeout: float | None = None) -> None:
        """Stop claiming, let in-flight handlers finish up to ``timeout``, flush, close."""
        if self._stopping.is_set():
            await self._stopped.wait()
            return
        timeout = self.timings.shutdown_timeout if timeout is None else timeout
        self._stopping.set()
        if self.plugins is not None:
            await self.plugins.worker_stopping(self)
        for runner in self.runners.values():
            runner.wake()
        # Let each runner finish the claim it may be in, so every claimed job is in flight.
        _, stuck = (
            await asyncio.wait(self._runner_tasks, timeout=10) if self._runner_tasks else ((), ())
        )
        for task in stuck:
            task.cancel()
        in_flight = [t for r in self.runners.values() for t in r.tasks]
        if in_flight:
            log.info(
                "draining %d in-flight jobs (up to %.0fs)",
                len(in_flight),
                timeout,
                extra={"action": "worker_draining"},
            )
            _, pending = await asyncio.wait(in_flight, timeout=timeout)
            for task in pending:
                task.cancel()  # the executor turns this into a retryable interrupted attempt
            if pending:
                await asyncio.wait(pending, timeout=5)
        await self.finalizer.stop()
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        await self.pool.close()
        await self.claim_pool.close()
        self._threads.shutdown(wait=False, cancel_futures=True)
        log.info("worker %s stopped", self.id, extra={"action": "worker_stopped"})
        self._stopped.set()

    # -- called by the runners and the finalizer ----------------------------------------
    def submit(self, result: AttemptResult) -> None:
        self.finalizer.submit(result)

    def _finalized(self, result: AttemptResult, done: Finalized) -> None:
        self.running.pop(result.job.id, None)
        if done.stale:
            log.info(
                "stale finalisation of job %s (run_lease %s) ignored",
                result.job.id,
                result.job.run_lease,
                extra={"action": "finalize_stale", "job_id": result.job.id},
            )

    async def _heartbeat_loop(self) -> None:
        while not self._stopping.is_set():
            try:
                await asyncio.wait_for(
                    self._stopping.wait(), timeout=self.timings.heartbeat_interval
                )
                return
            except TimeoutError:
                pass
            try:
                await self.heartbeat_once()
            except Exception as exc:
                log.warning("heartbeat failed: %s", exc, extra={"action": "heartbeat_failed"})
                await recheck(self.claim_pool)

    async def heartbeat_once(self) -> None:
        """Touch every running job in one statement; flag those no longer ours."""
        jobs = [j for j in self.running.values() if not j._waiting_in_handler]
        if not jobs:
            return
        async with self.claim_pool.connection() as conn:
            cur = await conn.execute(
                _HEARTBEAT, {"ids": [j.id for j in jobs], "leases": [j.run_lease for j in jobs]}
            )
            alive = {row[0] for row in await cur.fetchall()}
        for job in jobs:
            if job.id not in alive and self.running.get(job.id) is job:
                job._cancel()


_HEARTBEAT = """
UPDATE awa.jobs AS j SET heartbeat_at = now()
FROM unnest(%(ids)s::bigint[], %(leases)s::bigint[]) AS v(id, lease)
WHERE j.id = v.id AND j.run_lease = v.lease AND j.state = 'running'
RETURNING j.id
"""
