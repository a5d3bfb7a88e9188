"""THE transactional outcome core: every state change of a job is one method of
:class:`OutcomeCore` (architecture §4).

Each transition, in one transaction:

1. applies the guarded change (``id`` + ``run_lease`` or ``callback_id`` + expected state)
   and gets the committed row back, or learns the change is stale (then nothing else happens);
2. runs the registered follow-up specs for (kind, outcome) and, for a handler's completion,
   its staged follow-ups, inserting each (a held unique key skips the insert, not the commit);
3. commits, and only then hands the events to the dispatcher.

Where each transition lives:

* ``transaction.py`` — the one frame (:func:`~awa_cli.outcomes.transaction.transition`) and
  the state a core shares (pools, app, dispatcher, counters, queues to wake);
* ``attempts.py`` — finalising worker attempts (plain batch, group with follow-ups, per-job
  fallback; the split is decided there, once);
* ``claims.py`` — claiming (by queue for a worker, by kind for the test harness);
* ``running.py`` — heartbeat, callback registration and the in-handler wait;
* ``callbacks.py`` — callback resolution (complete, fail, retry, resume, heartbeat, lookup);
* ``rescue.py`` — the rescue sweeps, rescued jobs' follow-ups, retention;
* ``admin.py`` — operator cancel and retry;
* ``periodic.py`` — firing the due periodic schedules (the leader's sweep), a worker's
  registration of its schedules, and pause, resume, trigger and delete;
* ``bulk.py`` — bulk retry, cancel and purge by filter in bounded batches, cancel by unique key;
* ``queues.py`` — pause and resume (the claim statements check the pause), queue registration;
* ``deadletters.py`` — the move to the dead-letter queue inside the transitions that fail a job;
* ``dlq.py`` — the dead-letter queue's operator actions and its retention;
* ``audit.py`` — the audit log of operator actions;
* ``follow_ups.py`` — the specs' follow-ups and their one-statement insert.

The pure decision of what an attempt's result is lives below, in :mod:`awa_cli.attempts`.
Every statement is a named block of ``awa_cli/db/sql/*.sql``.

Transitions still to come get a module (or a block in one) of their own: limit-aware claims
as further statements behind ``claims.py``; each is one more thin method here, run in the
frame of ``transaction.py``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime
from typing import Any
from uuid import UUID

from awa_cli import defaults
from awa_cli.attempts import (
    MAX_BACKOFF_SECONDS,
    AttemptResult,
    Finalized,
    backoff_seconds,
    committed_row,
    decide,
    describe_exception,
    error_entry,
    event_for,
    unknown_kind,
)
from awa_cli.admin import DeadLetterFilter, JobFilter, QueueInfo
from awa_cli.events import JobEvent, RescueReason
from awa_cli.jobs import JobRow
from awa_cli.limits import ClaimPlan
from awa_cli.outcomes import (
    admin,
    attempts,
    bulk,
    callbacks,
    claims,
    dlq,
    periodic,
    queues,
    rescue,
    running,
)
from awa_cli.outcomes.bulk import Progress
from awa_cli.periodic import PeriodicJob, Schedule
from awa_cli.errors import InvalidJobState
from awa_cli.outcomes.attempts import FinalizeGroup
from awa_cli.jobs import parse_callback_id
from awa_cli.outcomes.callbacks import ResolveAction
from awa_cli.outcomes.follow_ups import insert_follow_ups
from awa_cli.outcomes.periodic import PeriodicSweep, Registered
from awa_cli.outcomes.rescue import RESCUE_ERRORS
from awa_cli.outcomes.transaction import CoreState, StagedCounters

__all__ = [
    "MAX_BACKOFF_SECONDS",
    "RESCUE_ERRORS",
    "AttemptResult",
    "FinalizeGroup",
    "Finalized",
    "InvalidJobState",
    "OutcomeCore",
    "PeriodicSweep",
    "Progress",
    "Registered",
    "StagedCounters",
    "backoff_seconds",
    "committed_row",
    "decide",
    "describe_exception",
    "error_entry",
    "event_for",
    "insert_follow_ups",
    "parse_callback_id",
    "unknown_kind",
]


class OutcomeCore(CoreState):
    """Applies transitions for one app (or none: bare transitions, no specs, no hooks).

    One thin method per transition; the work is done by the module named after its concern.
    """

    # -- worker attempts (outcomes/attempts.py) --------------------------------------------
    def needs_own_transaction(self, result: AttemptResult) -> bool:
        """True when ``result`` has follow-ups to insert with its transition."""
        return attempts.needs_own_transaction(self, result)

    def finalize_plan(self, results: Sequence[AttemptResult]) -> list[FinalizeGroup]:
        """The groups ``results`` are finalised in (decided here, once)."""
        return attempts.plan(self, results)

    async def finalize_group(self, group: FinalizeGroup) -> list[Finalized]:
        """Finalise one planned group; after a group with follow-ups, wake their queues."""
        if not group.with_follow_ups:
            done = await self.finalize_batch(group.results)
            if any(r.action == "interrupt" for r in group.results):
                await self.flush_notifications()  # a job handed back is claimable at once
            return done
        done = await self.finalize_with_follow_ups(group.results)
        await self.flush_notifications()
        return done

    async def finalize_attempts(self, results: Sequence[AttemptResult]) -> list[Finalized]:
        """Finalise many attempts, group by group (no retry: see ``worker/finalizer.py``)."""
        done: list[Finalized] = []
        for group in self.finalize_plan(results):
            done.extend(await self.finalize_group(group))
        return done

    async def finalize_batch(self, results: Sequence[AttemptResult]) -> list[Finalized]:
        """Attempts without follow-ups: one statement for all of them."""
        return await attempts.finalize_batch(self, results)

    async def finalize_with_follow_ups(self, results: Sequence[AttemptResult]) -> list[Finalized]:
        """Attempts with follow-ups: one transaction, each job alone if any of them fails."""
        return await attempts.finalize_with_follow_ups(self, results)

    # -- claims (outcomes/claims.py) ---------------------------------------------------------
    def plan_claims(self, queue: str, plan: ClaimPlan) -> None:
        """Claim ``queue`` under ``plan`` (its limits and priority aging); a plan that is not
        ``needed`` keeps the plain claim."""
        if plan.needed:
            self.claim_plans[queue] = plan
        else:
            self.claim_plans.pop(queue, None)

    async def claim(self, queue: str, limit: int, deadline: float | None = 0.0) -> list[JobRow]:
        """Claim up to ``limit`` runnable jobs of ``queue``: running, lease +1 (within the
        queue's limits, round-robin between keys, when it has a claim plan)."""
        plan = self.claim_plans.get(queue)
        if plan is not None:
            return await claims.claim_limited(self, queue, limit, deadline, plan)
        return await claims.claim_by_queue(self, queue, limit, deadline)

    def started(self, row: JobRow) -> None:
        """A claim committed and the handler is about to run: dispatch ``Started`` (detached;
        a fast job may finish before its Started hook does). The worker and the test harness
        both announce a claimed job through here."""
        self.dispatch(JobEvent.Started(row, row.args))

    async def claim_kind(self, kind: str, queue: str | None = None) -> JobRow | None:
        """Claim one runnable job of ``kind`` (the test harness's claim)."""
        return await claims.claim_by_kind(self, kind, queue)

    # -- a running attempt (outcomes/running.py) ---------------------------------------------
    async def heartbeat(
        self,
        attempts: Sequence[tuple[int, int]],
        progress: Sequence[str | None] | None = None,
    ) -> set[int]:
        """Touch these (id, run_lease) running attempts, writing their reported progress
        (JSON, None: unchanged) in the same statement; the ids still ours."""
        return await running.heartbeat(self, attempts, progress)

    async def register_callback(
        self, job_id: int, run_lease: int, callback_id: UUID, timeout: float
    ) -> bool:
        """Give the running attempt a callback id; False when it is no longer running."""
        return await running.register_callback(self, job_id, run_lease, callback_id, timeout)

    async def begin_wait(
        self, job_id: int, run_lease: int, callback_id: UUID
    ) -> tuple[bool, Any] | None:
        """running -> waiting_external while the handler waits in place."""
        return await running.begin_wait(self, job_id, run_lease, callback_id)

    # -- operator actions (outcomes/admin.py) ----------------------------------------------
    async def cancel(self, job_id: int, reason: str = "cancelled by operator") -> JobRow:
        """Cancel a pending, running or waiting job; fires Cancelled and runs on_cancelled specs.

        A handler still running the job sees ``job.is_cancelled()``; its late result is fenced.
        """
        return await admin.cancel(self, job_id, reason)

    async def retry(self, job_id: int) -> JobRow:
        """Make a failed, cancelled, retryable or scheduled job available now; fires nothing."""
        return await admin.retry(self, job_id)

    # -- callback resolution (outcomes/callbacks.py) ---------------------------------------
    async def resolve_external(
        self,
        callback_id: Any,
        action: ResolveAction,
        *,
        payload: Any = None,
        error: str = "",
        run_lease: int | None = None,
    ) -> JobRow:
        """Resolve a waiting callback in one transaction with the app's follow-up specs."""
        return await callbacks.resolve_external(
            self, callback_id, action, payload=payload, error=error, run_lease=run_lease
        )

    async def resume_external(self, callback_id: Any, payload: Any = None) -> JobRow:
        """Hand ``payload`` to the job waiting on ``callback_id`` (no event of its own)."""
        return await callbacks.resume_external(self, callback_id, payload)

    async def waiting_job(self, callback_id: Any, run_lease: int | None = None) -> JobRow:
        """The job waiting on ``callback_id`` (unchanged), or CallbackNotFound."""
        return await callbacks.waiting_job(self, callback_id, run_lease)

    async def heartbeat_callback(self, callback_id: Any, timeout: float) -> JobRow:
        """Extend a waiting callback's timeout to now + ``timeout`` seconds."""
        return await callbacks.heartbeat_callback(self, callback_id, timeout)

    # -- rescue and retention (outcomes/rescue.py) -----------------------------------------
    async def rescue(
        self,
        reason: RescueReason,
        *,
        staleness: float = defaults.HEARTBEAT_STALENESS,
        limit: int = 500,
        dry_run: bool = False,
    ) -> list[JobRow]:
        """One bounded rescue batch for ``reason``; commits, then dispatches ``Rescued``."""
        return await rescue.rescue(self, reason, staleness=staleness, limit=limit, dry_run=dry_run)

    async def rescue_follow_ups(self, limit: int = 100) -> tuple[int, int]:
        """Insert the follow-ups of rescued jobs still marked pending. Returns (done, failed)."""
        return await rescue.rescue_follow_ups(self, limit)

    async def prune(
        self, completed_retention: float, failed_retention: float, limit: int = 1000
    ) -> int:
        """Delete terminal jobs past their retention, in a bounded batch."""
        return await rescue.prune(self, completed_retention, failed_retention, limit)

    # -- periodic jobs (outcomes/periodic.py) ----------------------------------------------
    async def fire_periodic(self) -> PeriodicSweep:
        """Fire every due schedule in one transaction (exactly one job per fire time), then
        wake the queues that got jobs; says when the next schedule is due."""
        return await periodic.sweep(self)

    async def prune_periodic_fires(self) -> int:
        """Forget recorded fires well behind their schedule's last fire."""
        return await periodic.prune_fires(self)

    async def register_schedules(self, schedules: Iterable[Schedule]) -> Registered:
        """Upsert a worker's schedules (the definitions; paused flag and fire state kept)."""
        return await periodic.register(self, schedules)

    async def pause_periodic(self, name: str, actor: str | None = None) -> PeriodicJob:
        return await periodic.set_paused(self, name, True, actor)

    async def resume_periodic(self, name: str, actor: str | None = None) -> PeriodicJob:
        """Resume: fire times while paused are skipped; the next one fires on time."""
        return await periodic.set_paused(self, name, False, actor)

    async def trigger_periodic(self, name: str, actor: str | None = None) -> JobRow:
        """Enqueue the schedule's job now; the schedule is unchanged."""
        return await periodic.trigger(self, name, actor)

    async def delete_periodic(self, name: str, actor: str | None = None) -> PeriodicJob:
        """Drop the schedule and its recorded fires; the row as it was."""
        return await periodic.delete(self, name, actor)

    async def prune_audit(self, retention: float) -> int:
        """Delete audit entries older than ``retention`` seconds, in bounded batches."""
        from awa_cli.outcomes.bulk import no_progress, repeat_batches

        return await repeat_batches(self, "audit_prune", {"retention": retention}, 0, no_progress)

    async def prune_dlq(self, retention: float) -> int:
        """Delete dead letters older than ``retention`` seconds, in bounded batches."""
        return await dlq.prune(self, retention)

    # -- queue controls (outcomes/queues.py) -------------------------------------------------
    async def set_paused(self, queue: str, paused: bool, actor: str | None = None) -> QueueInfo:
        """Pause (no worker claims from it) or resume a queue; audited with ``actor``."""
        return await queues.set_paused(self, queue, paused, actor)

    async def register_queues(self, dead_letter: Mapping[str, bool]) -> None:
        """A worker's queues and their dead-letter flags, announced in awa.queues."""
        await queues.register(self, dead_letter)

    # -- bulk operator actions (outcomes/bulk.py) ------------------------------------------
    async def retry_jobs(
        self,
        where: JobFilter,
        *,
        dry_run: bool = False,
        actor: str | None = None,
        progress: Progress | None = None,
    ) -> int:
        """Operator retry of every matching failed or cancelled job, in bounded batches; the
        number retried (with ``dry_run``: the number that would be)."""
        return await bulk.retry_jobs(self, where, dry_run=dry_run, actor=actor, progress=progress)

    async def cancel_jobs(
        self,
        where: JobFilter,
        *,
        dry_run: bool = False,
        actor: str | None = None,
        progress: Progress | None = None,
    ) -> int:
        """Operator cancel of every matching unfinished job (Cancelled fires, specs run)."""
        return await bulk.cancel_jobs(self, where, dry_run=dry_run, actor=actor, progress=progress)

    async def purge_jobs(
        self,
        where: JobFilter,
        *,
        dry_run: bool = False,
        actor: str | None = None,
        progress: Progress | None = None,
    ) -> int:
        """Delete every matching finished job, in bounded batches."""
        return await bulk.purge_jobs(self, where, dry_run=dry_run, actor=actor, progress=progress)

    async def cancel_by_unique_key(
        self, unique_key: bytes, actor: str | None = None
    ) -> JobRow | None:
        return await bulk.cancel_by_unique_key(self, unique_key, actor)

    # -- the dead-letter queue (outcomes/dlq.py) -------------------------------------------
    async def retry_dead_letter(
        self,
        job_id: int,
        *,
        queue: str | None = None,
        priority: int | None = None,
        run_at: datetime | None = None,
        actor: str | None = None,
    ) -> JobRow:
        return await dlq.retry_one(
            self, job_id, queue=queue, priority=priority, run_at=run_at, actor=actor
        )

    async def retry_dead_letters(
        self,
        where: DeadLetterFilter,
        *,
        dry_run: bool = False,
        actor: str | None = None,
        progress: Progress | None = None,
    ) -> int:
        """Put every matching dead letter back into ``awa.jobs``, in bounded batches."""
        return await dlq.retry_many(self, where, dry_run=dry_run, actor=actor, progress=progress)

    async def move_to_dlq(
        self,
        where: DeadLetterFilter,
        *,
        reason: str | None = None,
        dry_run: bool = False,
        actor: str | None = None,
        progress: Progress | None = None,
    ) -> int:
        """Move matching failed jobs into the dead-letter queue (reason ``manual``)."""
        return await dlq.move_failed(
            self, where, reason=reason, dry_run=dry_run, actor=actor, progress=progress
        )

    async def purge_dead_letters(
        self,
        where: DeadLetterFilter,
        *,
        dry_run: bool = False,
        actor: str | None = None,
        progress: Progress | None = None,
    ) -> int:
        """Delete matching dead letters (one ``id``, or by filter), in bounded batches."""
        return await dlq.purge(self, where, dry_run=dry_run, actor=actor, progress=progress)
