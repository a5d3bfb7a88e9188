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
* ``job_actions.py`` — the operator's cancel and retry of one job;
* ``periodic.py`` — firing the due periodic schedules (the leader's sweep), a worker's
  registration of its schedules, and pause, resume, trigger and delete;
* ``bulk.py`` — bulk retry, cancel and purge by filter in bounded batches, cancel by unique key;
* ``queues.py`` — pause and resume (the claim statements check the pause), queue registration;
* ``dead_letters.py`` — the move to the dead-letter queue inside the transitions that fail a
  job, the dead-letter queue's operator actions and its retention;
* ``audit.py`` — the audit log of operator actions;
* ``follow_ups.py`` — the specs' follow-ups and their one-statement insert.

The pure decision of what an attempt's result is lives below, in :mod:`awa_cli.attempts`.
Every statement is a named block of ``awa_cli/db/sql/*.sql``.

Transitions still to come get a module (or a block in one) of their own: limit-aware claims
as further statements behind ``claims.py``; each is one more thin method here, run in the
frame of ``transaction.py``.
"""

from __future__ import annotations

from collections.abc import Sequence

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
from awa_cli.events import JobEvent
from awa_cli.jobs import JobRow
from awa_cli.limits import ClaimPlan
from awa_cli.outcomes import (
    attempts,
    bulk,
    callbacks,
    claims,
    dead_letters,
    job_actions,
    periodic,
    queues,
    running,
)
from awa_cli.outcomes import rescue as rescues
from awa_cli.outcomes.bulk import BulkRun, Progress
from awa_cli.periodic import PeriodicJob
from awa_cli.errors import InvalidJobState
from awa_cli.outcomes.attempts import FinalizeGroup
from awa_cli.jobs import parse_callback_id
from awa_cli.outcomes.follow_ups import insert_follow_ups
from awa_cli.outcomes.periodic import PeriodicSweep, Registered
from awa_cli.outcomes.rescue import RESCUE_ERRORS
from awa_cli.outcomes.transaction import CoreState, StagedCounters

__all__ = [
    "MAX_BACKOFF_SECONDS",
    "RESCUE_ERRORS",
    "AttemptResult",
    "BulkRun",
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

    Each transition is the function of the module named after its concern, bound here as a
    method (``retry_jobs = bulk.retry_jobs``: one signature, one docstring, in that module);
    what is written out here is the little the core decides itself (grouping, claim plans).
    """

    # -- worker attempts (outcomes/attempts.py) --------------------------------------------
    needs_own_transaction = attempts.needs_own_transaction
    finalize_plan = attempts.plan

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

    finalize_batch = attempts.finalize_batch
    finalize_with_follow_ups = attempts.finalize_with_follow_ups

    # -- claims (outcomes/claims.py) ---------------------------------------------------------
    def plan_claims(self, queue: str, plan: ClaimPlan) -> None:
        """Claim ``queue`` under ``plan`` (its limits and priority aging); a plan that is not
        ``needed`` keeps the plain claim."""
        if plan.needed:
            self.claim_plans[queue] = plan
        else:
            self.claim_plans.pop(queue, None)

    async def claim(
        self,
        queue: str,
        limit: int,
        deadline: float | None = 0.0,
        parents: claims.Parents | None = None,
    ) -> list[JobRow]:
        """Claim up to ``limit`` runnable jobs of ``queue``: running, lease +1 (within the
        queue's limits, round-robin between keys, when it has a claim plan). The parents of
        the children claimed, read by the same statement, go to ``parents`` by child id."""
        plan = self.claim_plans.get(queue)
        if plan is not None:
            return await claims.claim_limited(self, queue, limit, deadline, plan, parents)
        return await claims.claim_by_queue(self, queue, limit, deadline, parents)

    def started(self, row: JobRow) -> None:
        """A claim committed and the handler is about to run: dispatch ``Started`` (detached;
        a fast job may finish before its Started hook does). The worker and the test harness
        both announce a claimed job through here."""
        self.dispatch(JobEvent.Started(row, row.args))

    claim_kind = claims.claim_by_kind

    # -- a running attempt (outcomes/running.py) ---------------------------------------------
    heartbeat = running.heartbeat
    register_callback = running.register_callback
    begin_wait = running.begin_wait

    # -- operator actions on one job (outcomes/job_actions.py) -----------------------------
    cancel = job_actions.cancel
    retry = job_actions.retry

    # -- callback resolution (outcomes/callbacks.py) ---------------------------------------
    resolve_external = callbacks.resolve_external
    resume_external = callbacks.resume_external
    waiting_job = callbacks.waiting_job
    heartbeat_callback = callbacks.heartbeat_callback

    # -- rescue and retention (outcomes/rescue.py) -----------------------------------------
    rescue = rescues.rescue
    rescue_follow_ups = rescues.rescue_follow_ups
    prune = rescues.prune

    # -- periodic jobs (outcomes/periodic.py) ----------------------------------------------
    fire_periodic = periodic.sweep
    prune_periodic_fires = periodic.prune_fires
    register_schedules = periodic.register

    async def pause_periodic(self, name: str, actor: str | None = None) -> PeriodicJob:
        return await periodic.set_paused(self, name, True, actor)

    async def resume_periodic(self, name: str, actor: str | None = None) -> PeriodicJob:
        """Resume: fire times while paused are skipped; the next one fires on time."""
        return await periodic.set_paused(self, name, False, actor)

    trigger_periodic = periodic.trigger
    delete_periodic = periodic.delete

    async def prune_audit(self, retention: float) -> int:
        """Delete audit entries older than ``retention`` seconds, in bounded batches."""
        from awa_cli.outcomes.bulk import no_progress, repeat_batches

        return await repeat_batches(self, "audit_prune", {"retention": retention}, 0, no_progress)

    prune_dlq = dead_letters.prune

    # -- queue controls (outcomes/queues.py) -------------------------------------------------
    set_paused = queues.set_paused
    register_queues = queues.register

    # -- bulk operator actions (outcomes/bulk.py) ------------------------------------------
    retry_jobs = bulk.retry_jobs
    cancel_jobs = bulk.cancel_jobs
    purge_jobs = bulk.purge_jobs
    cancel_by_unique_key = bulk.cancel_by_unique_key

    # -- the dead-letter queue (outcomes/dead_letters.py) ----------------------------------
    retry_dead_letter = dead_letters.retry_one
    retry_dead_letters = dead_letters.retry_many
    move_to_dlq = dead_letters.move_many
    purge_dead_letters = dead_letters.purge
