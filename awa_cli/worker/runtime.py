"""``awa.Worker``: claims jobs of its queues, runs their handlers, finalises in batches.

One asyncio loop per process. Each queue has a runner that claims up to its free slots in
one statement (``FOR UPDATE SKIP LOCKED``, priority → run_at → id), woken by ``LISTEN`` on
the queue's channel, by freed slots while the queue has work, by the next scheduled job
falling due, and by a polling backstop. A heartbeat loop touches every running job in one
statement; a job whose row was taken away (cancelled, rescued) is fenced so its handler's
``job.is_cancelled()`` turns true.

The worker builds and orders the parts and hands each what it uses (see
``worker/services.py``); nothing below it holds the worker.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import os
import socket
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import psycopg

from awa_cli import defaults
from awa_cli.config import MaintenanceConfig
from awa_cli.db import jobs
from awa_cli.app import prepare_job
from awa_cli.attempts import DEADLINE_EXCEEDED
from awa_cli.db.channels import limit_payload, notify_limits
from awa_cli.db.dsn import redact, with_options
from awa_cli.db.pools import POOL_WAIT_SECONDS, claim_pool, recheck, worker_pool
from awa_cli.db.retry import first_line
from awa_cli.dispatch import Dispatcher, EventHook
from awa_cli.errors import AwaError
from awa_cli.events import RescueReason
from awa_cli.limits import ClaimPlan, Limit, check_limits, limits_digest
from awa_cli.outcomes import AttemptResult, Finalized, OutcomeCore
from awa_cli.worker.callbacks import CallbackServices
from awa_cli.worker.executor import execute
from awa_cli.worker.finalizer import Finalizer
from awa_cli.worker.heartbeat import Heartbeat
from awa_cli.worker.progress import ProgressFlush
from awa_cli.worker.listener import Listener
from awa_cli.worker.presence import Presence
from awa_cli.worker.queues import QueueRunner, QueueSpec
from awa_cli.worker.refill import KeyPaths, Refill
from awa_cli.worker.services import RunnerContext, RunningJobs, WorkerStats
from awa_cli.worker.threads import DaemonThreads

if TYPE_CHECKING:
    from awa_cli.app import App
    from awa_cli.jobs import JobRow
    from awa_cli.maintenance import Maintenance

log = logging.getLogger("awa.worker")

__all__ = ["POOL_WAIT_SECONDS", "Timings", "Worker", "WorkerStats"]


@dataclass(frozen=True)
class Timings(MaintenanceConfig):
    """The ``[maintenance]`` timings (what :class:`~awa_cli.maintenance.Maintenance` reads) and
    the worker's own: how often it polls, how long it waits for running jobs at shutdown."""

    poll_interval: float = defaults.POLL_INTERVAL
    shutdown_timeout: float = defaults.SHUTDOWN_TIMEOUT


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
        limits: Sequence[Limit] = (),
        listen_dsn: str | None = None,
        accept_limits_change: bool = False,
        **timings: Any,
    ) -> None:
        self.app = app
        self.callback_base_url = callback_base_url  # CallbackToken.url(); see awa_cli.callbacks
        self.dsn = with_options(dsn, application_name="awa-worker")
        # The connections that need a session of their own (LISTEN, the leader's advisory
        # lock): [database] listen_url behind a transaction-mode pooler, else the same URL.
        self.session_dsn = (
            with_options(listen_dsn, application_name="awa-worker") if listen_dsn else self.dsn
        )
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
        self.schedules_registered = asyncio.Event()  # set once the app's schedules are stored
        self._stopped = asyncio.Event()
        self._tasks: list[asyncio.Task[Any]] = []
        self._one_shots: list[asyncio.Task[Any]] = []
        self._runner_tasks: list[asyncio.Task[Any]] = []
        self._failed = asyncio.Event()
        self._failure: str | None = None  # why a supervised task ended (run() raises it)
        self._deadline_rescue: asyncio.Task[None] | None = None
        self._deadline_again = False
        self.running = RunningJobs()
        self.unknown_kinds: dict[tuple[str, str], int] = {}  # (kind, queue) -> jobs failed
        total = sum(q.concurrency for q in self.queues.values())
        # Daemon threads: a def handler that never returns cannot keep the process alive.
        self._threads = DaemonThreads(max(4, total), thread_name_prefix="awa-handler")
        self.pool = worker_pool(self.dsn, len(self.queues), self._connected)
        self.claim_pool = claim_pool(self.dsn, len(self.queues), self._connected)
        self.core = OutcomeCore(
            self.pool, app, self.dispatcher, defer_notify=True, claim_pool=self.claim_pool
        )
        self.core.dead_letter_flags = {
            name: spec.dead_letter
            for name, spec in self.queues.items()
            if spec.dead_letter is not None
        }
        # [limits.NAME] (architecture §13): a queue they can select, or with priority aging,
        # claims with the limit-aware statements; the others keep the plain claim.
        self.limits = tuple(limits)
        self.accept_limits_change = accept_limits_change  # replace the fleet's (worker/fleet.py)
        check_limits(self.limits)
        for name, spec in self.queues.items():
            self.core.plan_claims(name, ClaimPlan.for_queue(name, self.limits, spec.priority_aging))
        self._assemble()
        self.maintenance: Maintenance | None = None

    def _assemble(self) -> None:
        """Wire the parts: callback services, finalizer, one runner per queue, the listener,
        the heartbeat."""
        self.services = CallbackServices(self.core, self.running, self.callback_base_url)
        self.finalizer = Finalizer(self.core, self._finalized)
        prepare = functools.partial(prepare_job, self.app)
        context = RunnerContext(
            claim=self._claim,
            seconds_until_due=self._seconds_until_due,
            started=self._started,
            execute=lambda row, waited: execute(
                self.app,
                row,
                self.services,
                self._threads,
                self.running,
                prepare=prepare,
                on_unknown=self._unknown_kind,
                on_deadline=self._deadline_passed,
                waited=waited,
            ),
            submit=self._submit_result,
            finalizing=lambda: self.finalizer.in_flight,
            lost=self.running.discard,
            is_stopping=self._stopping.is_set,
            recheck_claims=functools.partial(recheck, self.claim_pool),
            poll_interval=self.timings.poll_interval,
        )
        self.runners = {name: QueueRunner(spec, context) for name, spec in self.queues.items()}
        self.refill = Refill(self.runners, self.limits, self._notify_limits)
        self.key_paths = KeyPaths(self.limits)
        self.listener = Listener(
            self.session_dsn,
            self.runners,
            self.services,
            self.timings.poll_interval,
            on_cancel=self.cancel_job,
            on_limit=self._limit_freed if self.limits else None,
        )
        self.heartbeat = Heartbeat(
            self.core.heartbeat,
            self.running,
            self.timings.heartbeat_interval,
            functools.partial(recheck, self.claim_pool),
        )
        self.presence = Presence(
            self.pool,
            self.app,
            {name: spec.concurrency for name, spec in self.queues.items()},
            lambda: len(self.running),
            self.timings.heartbeat_interval,
            limits_digest(self.limits),
            claims=self.claim_failure,
        )
        self.progress = ProgressFlush(self.core.heartbeat, self.running)

    def claim_failure(self) -> tuple[float, str] | None:
        """Since when claims fail and why (the longest-failing queue), None while they work."""
        failing = [r for r in self.runners.values() if r.failing_since is not None]
        if not failing:
            return None
        first = min(failing, key=lambda r: r.failing_since or 0.0)
        return first.failing_since or 0.0, f"queue {first.spec.name}: {first.claim_error}"

    @property
    def stopping(self) -> bool:
        return self._stopping.is_set()

    async def _connected(self, conn: psycopg.AsyncConnection[Any]) -> None:
        """A pool opened a connection: after a failed heartbeat, beat on it at once."""
        self.heartbeat.reconnected()

    def stats(self) -> WorkerStats:
        """A snapshot for plugins and supervisors: queues, running jobs, counters."""
        staged = self.core.counters
        return WorkerStats(
            queues={name: spec.concurrency for name, spec in self.queues.items()},
            running=self.running.by_queue(),
            staged_inserted=staged.inserted,
            staged_duplicate=staged.duplicate,
            staged_discarded=staged.discarded,
            hook_failures=self.dispatcher.failures,
            listening=self.listener.connected.is_set(),
            stopping=self.stopping,
            ready=self.is_ready(),
            healthy=self.healthy(),
            unknown_kinds=dict(self.unknown_kinds),
        )

    async def _claim(self, queue: str, limit: int, deadline: float | None) -> list[JobRow]:
        """The core's claim, which reads the claimed children's parents too (architecture
        §16: ``job.parents`` and ``job.parent_outputs``), not one read per job."""
        return await self.core.claim(queue, limit, deadline, self.services.claimed_parents)

    def _deadline_passed(self, row: JobRow) -> None:
        """A running attempt reached its deadline: run the deadline rescue now (coalesced),
        so the job is rescued by the worker running it rather than by the next sweep."""
        if self._deadline_rescue is not None and not self._deadline_rescue.done():
            self._deadline_again = True
            return
        self._deadline_rescue = asyncio.get_running_loop().create_task(
            self._rescue_deadlines(), name="awa-deadline-rescue"
        )

    async def _rescue_deadlines(self) -> None:
        self._deadline_again = True
        while self._deadline_again:
            self._deadline_again = False
            try:
                rows = await self.core.rescue(
                    RescueReason.DEADLINE_EXCEEDED, staleness=self.timings.heartbeat_staleness
                )
            except (psycopg.Error, OSError) as exc:  # the attempt's own result still ends it
                log.error(
                    "deadline rescue failed: %s",
                    first_line(exc),
                    extra={"action": "deadline_rescue_failed"},
                )
                return
            if rows:
                log.warning(
                    "rescued %d jobs: %s",
                    len(rows),
                    RescueReason.DEADLINE_EXCEEDED,
                    extra={"action": "rescued", "reason": "deadline_exceeded"},
                )
                self.fence_rescued(rows)

    def _submit_result(self, result: AttemptResult) -> None:
        """To the finalizer; one stopped at its deadline after the rescue that started (a job
        it took gets ``Rescued`` and this result is stale; else this result counts)."""
        rescue = self._deadline_rescue
        if result.error == DEADLINE_EXCEEDED and rescue is not None and not rescue.done():
            return rescue.add_done_callback(lambda _task: self.finalizer.submit(result))
        self.finalizer.submit(result)

    def _unknown_kind(self, row: JobRow) -> None:
        key = (row.kind, row.queue)
        self.unknown_kinds[key] = self.unknown_kinds.get(key, 0) + 1

    async def wait_listening(self) -> None:
        """Return once the worker listens for new jobs (its LISTEN connection is up)."""
        await self.listener.connected.wait()

    async def wait_ready(self) -> None:
        """Return once the worker can claim: it listens, and every queue finished one
        successful claim round (systemd READY is sent then, architecture §18)."""
        await self.listener.connected.wait()
        for runner in self.runners.values():
            await runner.ready.wait()

    def is_ready(self) -> bool:
        return self.listener.connected.is_set() and all(
            r.ready.is_set() for r in self.runners.values()
        )

    def healthy(self) -> bool:
        """Whether the worker works as it should: no queue is in claim-error backoff for a
        reason other than an unreachable database, and no supervised task has ended (the
        systemd watchdog is pinged only while true). An outage or a failover leaves it
        healthy: a watchdog restart would kill the live handlers, whose jobs would then run
        again (architecture §18)."""
        return self._failure is None and not any(
            r.failing and not r.unreachable for r in self.runners.values()
        )

    def supervise(self, task: asyncio.Task[Any]) -> asyncio.Task[Any]:
        """Watch a long-lived task of this worker: if it ends (raises, is cancelled or just
        returns) while the worker is not stopping, the worker logs it at ERROR, shuts down,
        and :meth:`run` raises ``AwaError``. The worker's own loops are all watched; a plugin
        may hand its own background task here so that it cannot die silently either."""
        task.add_done_callback(self._task_ended)
        return task

    def _task_ended(self, task: asyncio.Task[Any]) -> None:
        if self._stopping.is_set():
            return
        exc = None if task.cancelled() else task.exception()
        why = "was cancelled" if task.cancelled() else ("returned" if exc is None else "failed")
        detail = f": {type(exc).__name__}: {first_line(exc)}" if exc is not None else ""
        log.error(
            "worker task %s %s unexpectedly%s: stopping the worker",
            task.get_name(),
            why,
            detail,
            exc_info=exc,
            extra={"action": "task_died", "task": task.get_name()},
        )
        if self._failure is None:
            self._failure = f"worker task {task.get_name()} {why} unexpectedly{detail}"
            self._failed.set()

    async def run(self) -> None:
        """Run until :meth:`shutdown` is called (or the task is cancelled).

        Raises ``AwaError`` at once when the app registers no handler (architecture §15.5), and
        after shutting down when a supervised task ended unexpectedly (architecture §18).
        """
        if not self.app.tasks:
            raise AwaError(
                "the app registers no handler: a worker would fail every job it claims "
                "(register tasks with @app.task, or check [app] modules)"
            )
        await self.pool.open(wait=False)
        await self.claim_pool.open(wait=False)
        await self._join_fleet()
        self.finalizer.start()
        loop = asyncio.get_running_loop()
        self._runner_tasks = [
            loop.create_task(r.run(), name=f"awa-queue-{r.spec.name}")
            for r in self.runners.values()
        ]
        self._tasks = [
            loop.create_task(self.listener.run(self._stopping), name="awa-listener"),
            loop.create_task(self.heartbeat.run(self._stopping), name="awa-heartbeat"),
            loop.create_task(self.presence.run(self._stopping), name="awa-presence"),
            loop.create_task(self.progress.run(self._stopping), name="awa-progress"),
        ]
        # One-shot tasks: they end once done (retrying while the database is away), so they
        # are not supervised as loops; they are cancelled at shutdown like the rest.
        self._one_shots = [
            loop.create_task(self._register_schedules(), name="awa-schedules"),
            loop.create_task(self._announce_queues(), name="awa-announce-queues"),
        ]
        if self.maintenance_enabled:
            self._tasks.append(
                loop.create_task(self._maintenance().run(self._stopping), name="awa-maintenance")
            )
        for task in [*self._runner_tasks, *self._tasks, *self.finalizer.tasks]:
            self.supervise(task)
        log.info(
            "worker %s started: queues %s, database %s",
            self.id,
            ", ".join(f"{q.name}={q.concurrency}" for q in self.queues.values()),
            redact(self.dsn),
            extra={"action": "worker_started"},
        )
        if self.plugins is not None:
            await self.plugins.worker_started(self)
        await self._until_stopped_or_failed()

    def _maintenance(self) -> Maintenance:
        from awa_cli.maintenance import Maintenance

        self.maintenance = Maintenance(
            self.session_dsn,
            self.pool,
            self.core,
            self.timings,
            on_rescued=self.fence_rescued,
            on_depth=self.plugins.queue_depth if self.plugins is not None else None,
            on_limits=(
                self.plugins.limit_waiting if self.plugins is not None and self.limits else None
            ),
        )
        return self.maintenance

    async def _until_stopped_or_failed(self) -> None:
        stopped = asyncio.ensure_future(self._stopped.wait())
        failed = asyncio.ensure_future(self._failed.wait())
        try:
            await asyncio.wait({stopped, failed}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            stopped.cancel()
            failed.cancel()
        if self._failure is not None and not self._stopped.is_set():
            await self.shutdown()
            raise AwaError(self._failure)

    async def _register_schedules(self) -> None:
        """Upsert the app's periodic schedules once (retried while the database is away);
        warn once about stored schedules this app does not define: they keep firing."""
        while not self._stopping.is_set():
            try:
                registered = await self.core.register_schedules(self.app.schedules.values())
                break
            except (psycopg.Error, OSError) as exc:
                log.error(
                    "registering the periodic schedules failed, retrying: %s",
                    exc,
                    extra={"action": "periodic_register_failed"},
                )
                try:
                    await asyncio.wait_for(
                        self._stopping.wait(), self.timings.leader_election_interval
                    )
                except TimeoutError:
                    pass
        else:
            return
        for name in registered.not_defined:
            log.warning(
                "periodic job %s is stored but not defined by this app: it keeps firing until "
                "`awa cron delete %s`",
                name,
                name,
                extra={"action": "periodic_not_defined", "schedule": name},
            )
        self.schedules_registered.set()

    async def _announce_queues(self) -> None:
        """Write this worker's dead-letter flags to awa.queues, so every process (a client's
        callback fail, the leader's rescue) dead-letters the queue's jobs alike. Retried in
        the background until it succeeds: the worker's own finalise knows its flags anyway."""
        delay = 1.0
        while not self._stopping.is_set():
            try:
                await self.core.register_queues(self.core.dead_letter_flags)
                return
            except (psycopg.Error, OSError) as exc:
                log.warning(
                    "announcing the queues failed (retrying in %.0fs): %s",
                    delay,
                    exc,
                    extra={"action": "queue_register_failed"},
                )
            try:
                await asyncio.wait_for(self._stopping.wait(), timeout=delay)
            except TimeoutError:
                delay = min(delay * 2, 30.0)

    async def _join_fleet(self) -> None:
        """Check the limits against the live fleet's, announce them and register presence
        (``worker/fleet.py``); refused (``ConfigError``): close and raise. A database error
        here is logged: presence registers later, the limits unchecked."""
        from awa_cli.worker.fleet import join_fleet

        try:
            await join_fleet(self.pool, self.presence, self.limits, self.accept_limits_change)
        except AwaError:
            await self.pool.close()
            await self.claim_pool.close()
            raise
        except psycopg.Error as exc:
            log.warning(
                "checking and announcing the limits failed: %s",
                first_line(exc),
                extra={"action": "limits_failed"},
            )

    async def shutdown(self, timeout: float | None = None) -> None:
        """Stop claiming, let in-flight handlers finish up to ``timeout``, flush, close."""
        if self._stopping.is_set():
            await self._stopped.wait()
            return
        timeout = self.timings.shutdown_timeout if timeout is None else timeout
        self._stopping.set()
        self.running.stop_all()  # every running handler's job.is_cancelled() turns true
        if self.plugins is not None:
            await self.plugins.worker_stopping(self)
        for runner in self.runners.values():
            runner.stop()
        # Let each runner finish the claim it may be in, so every claimed job is in flight.
        _, stuck = (
            await asyncio.wait(self._runner_tasks, timeout=10) if self._runner_tasks else ((), ())
        )
        for task in stuck:
            task.cancel()
        await self._drain(timeout)
        if self._deadline_rescue is not None:
            await asyncio.wait([self._deadline_rescue], timeout=5)
        await self.finalizer.stop()
        for task in [*self._tasks, *self._one_shots]:
            task.cancel()
        await asyncio.gather(*self._tasks, *self._one_shots, return_exceptions=True)
        await self.refill.close()
        await self.presence.leave()
        await self.pool.close()
        await self.claim_pool.close()
        self._threads.shutdown(wait=False, cancel_futures=True)
        log.info("worker %s stopped", self.id, extra={"action": "worker_stopped"})
        self._stopped.set()

    async def _drain(self, timeout: float) -> None:
        """Wait up to ``timeout`` for the running jobs and those claimed ahead (each starts as
        a slot frees); then cancel what still runs."""
        runners = list(self.runners.values())
        in_flight = [t for r in runners for t in r.tasks]
        if not in_flight:
            return
        log.info(
            "draining %d in-flight jobs, %d more claimed ahead (up to %.0fs)",
            len(in_flight),
            sum(len(r.ahead) for r in runners),
            timeout,
            extra={"action": "worker_draining"},
        )
        deadline = time.monotonic() + timeout
        pending: set[asyncio.Task[Any]] = set(in_flight)
        while pending and (left := deadline - time.monotonic()) > 0:
            await asyncio.wait(pending, timeout=left, return_when=asyncio.FIRST_COMPLETED)
            pending = {t for r in runners for t in r.tasks}
        for runner in runners:
            runner.abandon_ahead()  # never started: rescued as a stopped worker's jobs are
        for task in pending:
            task.cancel()  # the executor turns this into a retryable interrupted attempt
        if pending:
            await asyncio.wait(pending, timeout=5)

    # -- called by the finalizer ---------------------------------------------------------
    def submit(self, result: AttemptResult) -> None:
        self.finalizer.submit(result)

    async def _seconds_until_due(self, queue: str, since: float) -> float | None:
        """The next scheduled job's due time, or a rate-limited key's window freeing."""
        plan = self.core.claim_plans.get(queue)
        rated = plan.params if plan is not None and plan.rated else None
        return await jobs.seconds_until_due(self.core.pool, queue, rated, since)

    def _started(self, row: JobRow) -> None:
        self.key_paths.check(row.kind, row.queue, row.args, row.id)
        self.core.started(row)

    def _limit_freed(self, payload: str) -> None:
        sender, name = limit_payload(payload)
        if sender != self.id:  # our own runners were woken when our results committed
            self.refill.freed_elsewhere(name)

    async def _notify_limits(self, names: list[str]) -> None:
        async with self.pool.connection() as conn:
            await notify_limits(conn, self.id, names)

    def _finalized(self, result: AttemptResult, done: Finalized) -> None:
        self.running.discard(result.job.id)
        # a limited key's slot is free: claim again
        self.refill.finalized(result.job.kind, result.job.queue)
        if done.stale:
            log.info(
                "stale finalisation of job %s (run_lease %s) ignored",
                result.job.id,
                result.job.run_lease,
                extra={"action": "finalize_stale", "job_id": result.job.id},
            )

    # -- heartbeat (worker/heartbeat.py) --------------------------------------------------
    async def heartbeat_once(self) -> None:
        """Touch every running job in one statement; fence those no longer ours."""
        await self.heartbeat.once()

    def fence_rescued(self, rows: list[JobRow]) -> None:
        """Fence the attempts of rescued rows still running here, and drop those still
        waiting here, claimed ahead (``Maintenance``'s callback)."""
        for row in rows:
            runner = self.runners.get(row.queue)
            if runner is not None and runner.drop(row.id, row.run_lease):
                self.services.claimed_parents.pop(row.id, None)
        self.running.fence_rows(rows)

    def cancel_job(self, job_id: int) -> bool:
        """An operator cancelled job ``job_id``: drop it if it waits here, claimed ahead (its
        handler never starts), or fence it if it runs here."""
        if any(runner.drop(job_id) for runner in self.runners.values()):
            self.services.claimed_parents.pop(job_id, None)  # its handler never starts
            return True
        return self.running.cancel_job(job_id)
