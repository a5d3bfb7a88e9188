"""THE transactional outcome core: every state change of a job is one method of
:class:`OutcomeCore` (DESIGN §4).

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
* ``follow_ups.py`` — the specs' follow-ups and their one-statement insert.

The pure decision of what an attempt's result is lives below, in :mod:`awa_cli.attempts`.
Every statement is a named block of ``awa_cli/db/sql/*.sql``.

Transitions still to come get a module (or a block in one) of their own: dead-lettering and
bulk operator actions beside ``admin.py``, pause-aware and limit-aware claims as further
statements behind ``claims.py``, periodic firing as ``periodic.py``; each is one more thin
method here, run in the frame of ``transaction.py``.
"""

from __future__ import annotations

from collections.abc import Sequence
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
from awa_cli.events import JobEvent, RescueReason
from awa_cli.jobs import JobRow
from awa_cli.outcomes import admin, attempts, callbacks, claims, rescue, running
from awa_cli.errors import InvalidJobState
from awa_cli.outcomes.attempts import FinalizeGroup
from awa_cli.outcomes.callbacks import ResolveAction, parse_callback_id
from awa_cli.outcomes.follow_ups import insert_follow_ups
from awa_cli.outcomes.rescue import RESCUE_ERRORS
from awa_cli.outcomes.running import WaitState
from awa_cli.outcomes.transaction import CoreState, StagedCounters

__all__ = [
    "MAX_BACKOFF_SECONDS",
    "RESCUE_ERRORS",
    "AttemptResult",
    "FinalizeGroup",
    "Finalized",
    "InvalidJobState",
    "OutcomeCore",
    "StagedCounters",
    "WaitState",
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
            return await self.finalize_batch(group.results)
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
    async def claim(self, queue: str, limit: int, deadline: float | None = 0.0) -> list[JobRow]:
        """Claim up to ``limit`` runnable jobs of ``queue``: running, lease +1."""
        return await claims.claim_by_queue(self, queue, limit, deadline)

    def started(self, row: JobRow) -> None:
        """A claim committed and the handler is about to run: dispatch ``Started`` (detached;
        a fast job may finish before its Started hook does). The worker and the test harness
        both announce a claimed job through here."""
        self.dispatch(JobEvent.Started(row, row.args))

    async def claim_kind(self, kind: str, queue: str | None = None) -> JobRow | None:
        """Claim one runnable job of ``kind`` (the test harness's claim)."""
        return await claims.claim_by_kind(self, kind, queue)

    async def seconds_until_due(self, queue: str) -> float | None:
        """Seconds until the queue's next scheduled or retryable job falls due."""
        return await claims.seconds_until_due(self, queue)

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

    async def wait_state(self, job_id: int) -> WaitState:
        """What a waiting handler checks on each wake-up."""
        return await running.wait_state(self, job_id)

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
