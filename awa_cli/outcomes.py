"""THE transactional outcome core.

Every state change of a job — a worker's attempt result, a callback resolution, a rescue, an
operator's cancel or retry — is one call into this module, which in one transaction:

1. applies the guarded change (``id`` + ``run_lease`` or ``callback_id`` + expected state)
   and gets the committed row back, or learns the change is stale (then nothing else happens);
2. runs the registered follow-up specs for (kind, outcome) and, for a handler's completion,
   its staged follow-ups, inserting each (a held unique key skips the insert, not the commit);
3. commits, and only then hands the events to the dispatcher.

Attempts of kinds with no follow-up spec for their outcome that staged nothing are finalised
in batches: one statement for many jobs. The others are finalised many per transaction (one
statement for the transitions, one for every follow-up); if user code or an insert fails for
any of them, that transaction is rolled back and each gets a transaction of its own.
"""

from __future__ import annotations

import json
import logging
import random
import traceback
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, UTC
from typing import TYPE_CHECKING, Any, Literal
from uuid import UUID

import psycopg
from psycopg.rows import dict_row

from awa_cli.app import prepare_job
from awa_cli.db import queries
from awa_cli.db import transitions as sql
from awa_cli.events import OUTCOME_OF_EVENT, JobEvent, Outcome, RescueReason, context_of
from awa_cli.jobs import InsertOpts, JobRow, JobState, PreparedJob, rebuild_args
from awa_cli.metadata import following
from awa_cli.results import AwaError, CallbackNotFound, FollowUpError, ValidationError

if TYPE_CHECKING:
    from psycopg_pool import AsyncConnectionPool

    from awa_cli.app import App
    from awa_cli.dispatch import Dispatcher
    from awa_cli.events import AnyEvent

log = logging.getLogger("awa.outcomes")

MAX_BACKOFF_SECONDS = 24 * 3600.0

Action = Literal["complete", "retry", "fail", "cancel", "snooze", "park"]

_STATE_OF_ACTION: dict[Action, JobState] = {
    "complete": JobState.COMPLETED,
    "retry": JobState.RETRYABLE,
    "fail": JobState.FAILED,
    "cancel": JobState.CANCELLED,
    "snooze": JobState.SCHEDULED,
    "park": JobState.WAITING_EXTERNAL,
}

_OUTCOME_OF_ACTION: dict[Action, Outcome | None] = {
    "complete": Outcome.COMPLETED,
    "retry": Outcome.RETRIED,
    "fail": Outcome.EXHAUSTED,
    "cancel": Outcome.CANCELLED,
    "snooze": None,
    "park": Outcome.WAITING_FOR_CALLBACK,
}


def backoff_seconds(attempt: int) -> float:
    """Delay after failed attempt ``attempt``: 2**n s plus 0–25 % jitter, capped at 24 h."""
    base = 2.0 ** min(attempt, 62)
    return min(base * (1.0 + random.uniform(0.0, 0.25)), MAX_BACKOFF_SECONDS)


def error_entry(
    message: str, attempt: int, *, terminal: bool = False, tb: str | None = None
) -> dict[str, Any]:
    entry: dict[str, Any] = {
        "error": message,
        "attempt": attempt,
        "at": datetime.now(UTC).isoformat(),
    }
    if terminal:
        entry["terminal"] = True
    if tb:
        entry["traceback"] = tb
    return entry


def describe_exception(exc: BaseException, tail_lines: int = 6) -> tuple[str, str]:
    """``"<ExceptionType>: <message>"`` and a short traceback tail."""
    message = f"{type(exc).__name__}: {exc}"
    lines = traceback.format_exception(exc)
    tail = "".join(lines[-tail_lines:]).strip()
    return message, tail[-2000:]


@dataclass
class AttemptResult:
    """What one attempt of a claimed job decided; the core turns it into a transition."""

    job: JobRow  # the row as claimed (state running)
    action: Action
    args: Any = None  # the rebuilt args (or the dict), for events and specs
    delay: float | None = None  # retry / snooze
    error: str = ""  # for events; verbatim
    error_entry: dict[str, Any] | None = None  # appended to the errors column
    reason: str = ""  # cancel
    output: Any = None
    has_output: bool = False
    callback_id: UUID | None = None  # park
    duration: float = 0.0
    staged: list[PreparedJob] = field(default_factory=list)
    discarded: int = 0  # staged follow-ups dropped by a WaitForCallback park
    own_transaction: bool = False  # set by the finalizer from OutcomeCore.needs_own_transaction
    silent: bool = False  # no event (unknown kind)

    @property
    def outcome(self) -> Outcome | None:
        return None if self.silent else _OUTCOME_OF_ACTION[self.action]


@dataclass
class Finalized:
    """The result of applying one transition."""

    job_id: int
    row: JobRow | None  # the committed row; None when stale or rolled back
    stale: bool = False
    error: BaseException | None = None
    events: list[AnyEvent] = field(default_factory=list)
    follow_ups: list[int] = field(default_factory=list)  # ids inserted
    duplicates: int = 0
    staged_inserted: int = 0
    staged_duplicates: int = 0
    queues: set[str] = field(default_factory=set)  # queues that received follow-ups


def decide(
    job: JobRow,
    *,
    args: Any,
    result: Any,
    exc: BaseException | None,
    duration: float,
    output: Any = None,
    has_output: bool = False,
    registered_callback: UUID | None = None,
    staged: Sequence[PreparedJob] = (),
    staging_failure: BaseException | None = None,
) -> AttemptResult:
    """Map a handler's return value or exception to an attempt result (DESIGN §2 table)."""
    from awa_cli.results import Cancel, RetryAfter, Snooze, TerminalError, WaitForCallback, seconds

    base = AttemptResult(job=job, action="complete", args=args, duration=duration)
    last_attempt = job.attempt >= job.max_attempts
    if staging_failure is not None and not isinstance(exc, TerminalError):
        exc = staging_failure  # any failed stage fails the attempt terminally, even if swallowed
    if exc is not None:
        message, tb = describe_exception(exc)
        terminal = isinstance(exc, TerminalError) or last_attempt
        base.error, base.error_entry = (
            message,
            error_entry(message, job.attempt, terminal=terminal, tb=tb),
        )
        if terminal:
            base.action = "fail"
        else:
            base.action, base.delay = "retry", backoff_seconds(job.attempt)
        return base
    match result:
        case None:
            base.action, base.output, base.has_output, base.staged = (
                "complete",
                output,
                has_output,
                list(staged),
            )
        case RetryAfter(seconds=delay):
            entry = error_entry("", job.attempt, terminal=last_attempt)
            base.error_entry = entry
            if last_attempt:
                base.action = "fail"
            else:
                base.action, base.delay = "retry", seconds(delay, "RetryAfter.seconds")
        case Snooze(seconds=delay):
            base.action, base.delay = "snooze", seconds(delay, "Snooze.seconds")
        case Cancel(reason=reason):
            base.action, base.reason = "cancel", reason
        case WaitForCallback(token=token):
            if registered_callback is None or token.id != registered_callback:
                message = "WaitForCallback returned without a callback registered by job.register_callback()"
                base.action, base.error = "fail", message
                base.error_entry = error_entry(message, job.attempt, terminal=True)
            else:
                base.action, base.callback_id = "park", token.id
        case _:
            message = f"handler returned {type(result).__name__}; expected None or an awa outcome"
            base.action, base.error = "fail", message
            base.error_entry = error_entry(message, job.attempt, terminal=True)
    return base


def unknown_kind(job: JobRow) -> AttemptResult:
    message = f"unknown job kind: {job.kind}"
    return AttemptResult(
        job=job,
        action="fail",
        args=job.args,
        error=message,
        error_entry=error_entry(message, job.attempt, terminal=True),
        silent=True,
    )


def committed_row(result: AttemptResult, changed: dict[str, Any]) -> JobRow:
    """The row as committed: the claimed row plus the columns the finalisation changed."""
    claimed = result.job
    errors = claimed.errors if result.error_entry is None else [*claimed.errors, result.error_entry]
    state = JobState(changed["state"])
    output = (
        result.output if (result.has_output and state is JobState.COMPLETED) else claimed.output
    )
    return claimed.evolve(
        state=state,
        run_at=changed["run_at"],
        attempt=changed["attempt"],
        errors=errors,
        output=output,
        heartbeat_at=None,
        deadline_at=None,
        finalized_at=changed["finalized_at"],
        callback_id=changed["callback_id"],
        callback_timeout_at=changed["callback_timeout_at"],
    )


def _finalized(result: AttemptResult, changed: dict[str, Any] | None) -> Finalized:
    """A finalisation from FINALIZE_CHANGED's record of the job (None: stale)."""
    if changed is None:
        return Finalized(result.job.id, None, stale=True)
    row = committed_row(result, changed)
    event = event_for(result, row)
    return Finalized(result.job.id, row, events=[event] if event else [])


def finalize_params(results: Sequence[AttemptResult]) -> dict[str, Any]:
    return {
        "ids": [r.job.id for r in results],
        "leases": [r.job.run_lease for r in results],
        "states": [str(_STATE_OF_ACTION[r.action]) for r in results],
        "delays": [r.delay for r in results],
        "errors": [
            json.dumps(r.error_entry) if r.error_entry is not None else None for r in results
        ],
        "outputs": [
            json.dumps(r.output) if r.has_output and r.action == "complete" else None
            for r in results
        ],
        "refunds": [1 if r.action == "snooze" else 0 for r in results],
        "callback_ids": [r.callback_id for r in results],
    }


def event_for(result: AttemptResult, row: JobRow) -> AnyEvent | None:
    """The event a committed attempt result emits (none for snooze or a silent failure)."""
    if result.silent:
        return None
    args = result.args
    match result.action:
        case "complete":
            return JobEvent.Completed(row, args, result.duration, row.output)
        case "retry":
            return JobEvent.Retried(row, args, result.error, result.job.attempt, row.run_at)
        case "fail":
            return JobEvent.Exhausted(row, args, result.error, result.job.attempt)
        case "cancel":
            return JobEvent.Cancelled(row, args, result.reason)
        case "park":
            if row.state != JobState.WAITING_EXTERNAL:
                return None  # resumed before it parked: it re-enters execution instead
            return JobEvent.WaitingForCallback(row, args)
        case "snooze":
            return None


class OutcomeCore:
    """Applies transitions for one app (or none: bare transitions, no specs, no hooks)."""

    def __init__(
        self,
        pool: AsyncConnectionPool,
        app: App | None = None,
        dispatcher: Dispatcher | None = None,
        *,
        defer_notify: bool = False,
    ) -> None:
        self.pool = pool
        self.app = app
        self.dispatcher = dispatcher
        self.counters = StagedCounters()
        # With defer_notify, the pool's sessions set awa.defer_notify so the insert trigger
        # stays silent: a NOTIFY inside a transaction holds PostgreSQL's global notify lock
        # through the commit's WAL flush, serialising every transaction that inserts jobs. The queues
        # that received follow-ups are notified once per batch by flush_notifications().
        self.defer_notify = defer_notify
        self._pending_queues: set[str] = set()

    # -- worker attempts -----------------------------------------------------------------
    def needs_own_transaction(self, result: AttemptResult) -> bool:
        if result.staged:
            return True
        outcome = result.outcome
        return bool(self.app and outcome and self.app.has_specs(result.job.kind, outcome))

    async def finalize_attempts(self, results: Sequence[AttemptResult]) -> list[Finalized]:
        """Finalise many attempts: those without follow-ups in one statement, the others in
        one transaction of their own (see ``_finalize_with_follow_ups``)."""
        own = [self.needs_own_transaction(r) for r in results]
        batch = [r for r, alone in zip(results, own, strict=True) if not alone]
        with_follow_ups = [r for r, alone in zip(results, own, strict=True) if alone]
        done: list[Finalized] = []
        if batch:
            done.extend(await self._finalize_batch(batch))
        if with_follow_ups:
            done.extend(await self._finalize_with_follow_ups(with_follow_ups))
        return done

    async def _finalize_batch(self, results: Sequence[AttemptResult]) -> list[Finalized]:
        async with self.pool.connection() as conn:  # no follow-ups: one statement, no transaction
            finalized = await self._apply_attempts(conn, results)
        self._committed(results, finalized)
        return finalized

    async def _finalize_with_follow_ups(self, results: Sequence[AttemptResult]) -> list[Finalized]:
        """Attempts with follow-ups: every transition and every follow-up of the group in one
        transaction, so each job's transition commits together with its follow-ups.

        If user code or an insert fails for any job of the group, the transaction is rolled
        back and each job is applied in a transaction of its own: one job's failing spec
        never holds back another job's completion.
        """
        if len(results) > 1:
            try:
                async with self.pool.connection() as conn, conn.transaction():
                    finalized = await self._apply_attempts(conn, results)
            except (psycopg.OperationalError, psycopg.InterfaceError):
                raise  # connection trouble: the caller keeps the results and retries
            except Exception as exc:
                log.debug(
                    "a follow-up failed in a group of %d attempts; applying each on its own: %s",
                    len(results),
                    exc,
                )
            else:
                self._committed(results, finalized)
                return finalized
        return [await self._finalize_one(result) for result in results]

    async def _finalize_one(self, result: AttemptResult) -> Finalized:
        try:
            async with self.pool.connection() as conn, conn.transaction():
                [item] = await self._apply_attempts(conn, [result])
        except (psycopg.OperationalError, psycopg.InterfaceError):
            raise  # connection trouble: the caller keeps the result and retries
        except Exception as exc:
            log.error(
                "follow-up of job %s failed; the attempt was rolled back and is left for rescue: %s",
                result.job.id,
                exc,
                extra={"action": "follow_up_failed", "job_id": result.job.id, "error": str(exc)},
            )
            return Finalized(result.job.id, None, error=exc)
        self._committed([result], [item])
        return item

    async def _apply_attempts(
        self, conn: psycopg.AsyncConnection, results: Sequence[AttemptResult]
    ) -> list[Finalized]:
        """Transitions, spec follow-ups and staged follow-ups inside the caller's transaction:
        two statements however many jobs and follow-ups there are (one when none has a
        follow-up)."""
        async with conn.cursor(row_factory=dict_row) as cur:
            await cur.execute(sql.FINALIZE_CHANGED, finalize_params(results))
            changed = {r["id"]: r for r in await cur.fetchall()}
        finalized = []
        pending: list[tuple[Finalized, PreparedJob, bool]] = []
        for result in results:
            item = _finalized(result, changed.get(result.job.id))
            finalized.append(item)
            for event in item.events:
                pending.extend((item, prepared, False) for prepared in self._spec_follow_ups(event))
            if item.row is not None and result.action == "complete":
                pending.extend((item, prepared, True) for prepared in result.staged)
        await self._insert_follow_ups(conn, pending)
        return finalized

    def _committed(self, results: Sequence[AttemptResult], finalized: Sequence[Finalized]) -> None:
        for result, item in zip(results, finalized, strict=True):
            if item.row is not None and result.action == "complete" and result.staged:
                self.counters.committed(item.staged_inserted, item.staged_duplicates)
            self._count_discarded(result, item)
        self._after_commit(finalized)

    def _count_discarded(self, result: AttemptResult, item: Finalized) -> None:
        if result.discarded and item.row is not None:
            self.counters.discarded += result.discarded
            log.warning(
                "job %s parked on a callback: %d staged follow-ups discarded "
                "(stage them after wait_for_callback instead)",
                result.job.id,
                result.discarded,
                extra={"action": "staged_follow_ups_discarded", "job_id": result.job.id},
            )

    # -- operator actions ----------------------------------------------------------------
    async def cancel(self, job_id: int, reason: str = "cancelled by operator") -> JobRow:
        """Cancel a pending, running or waiting job; fires Cancelled and runs on_cancelled specs.

        A handler still running the job sees ``job.is_cancelled()``; its late result is fenced.
        """
        item = Finalized(job_id, None)
        async with self.pool.connection() as conn, conn.transaction():
            async with conn.cursor(row_factory=dict_row) as cur:
                await cur.execute(sql.CANCEL, {"id": job_id})
                record = await cur.fetchone()
                if record is None:
                    await _raise_missing_or_state(cur, job_id, "cancelled")
                row = JobRow.from_record(record)  # type: ignore[arg-type]
            event = JobEvent.Cancelled(row, row.args, reason)
            await self._run_specs(conn, event, item)
        item.row, item.events = row, [event]
        self._after_commit([item])
        return row

    async def retry(self, job_id: int) -> JobRow:
        """Make a failed, cancelled, retryable or scheduled job available now; fires nothing."""
        async with self.pool.connection() as conn, conn.transaction():
            async with conn.cursor(row_factory=dict_row) as cur:
                await cur.execute(sql.RETRY, {"id": job_id})
                record = await cur.fetchone()
                if record is None:
                    await _raise_missing_or_state(cur, job_id, "retried")
                row = JobRow.from_record(record)  # type: ignore[arg-type]
                await cur.execute(queries.NOTIFY_QUEUE, {"queue": row.queue})
        return row

    # -- callback resolution -------------------------------------------------------------
    async def resolve_external(
        self,
        callback_id: Any,
        action: Literal["complete", "fail", "retry"],
        *,
        payload: Any = None,
        error: str = "",
        run_lease: int | None = None,
    ) -> JobRow:
        """Resolve a waiting callback: one transaction with the app's follow-up specs.

        A spec that raises rolls the resolution back (the job keeps waiting under the same
        callback id) and raises :class:`FollowUpError` to the caller.
        """
        params = _callback_params(callback_id, run_lease)
        params.update(
            payload=_payload_json(payload),
            error=error,
            entry=json.dumps(error_entry(error, 0, terminal=True)),
        )
        item = Finalized(0, None)
        async with self.pool.connection() as conn, conn.transaction():
            async with conn.cursor(row_factory=dict_row) as cur:
                await cur.execute(sql.RESOLVE[action], params)
                record = await cur.fetchone()
                if record is None:
                    raise CallbackNotFound(f"no job is waiting on callback {params['callback_id']}")
                row = JobRow.from_record(record)
                parked_attempt = int(record["parked_attempt"])
                if action == "retry":
                    await cur.execute(queries.NOTIFY_QUEUE, {"queue": row.queue})
            event = _resolution_event(action, row, error, parked_attempt)
            await self._run_specs(conn, event, item)
        item.row, item.events = row, [event]
        self._after_commit([item])
        return row

    async def resume_external(self, callback_id: Any, payload: Any = None) -> JobRow:
        """Hand ``payload`` to the job: a handler waiting inside ``wait_for_callback`` continues;
        a job parked by ``WaitForCallback`` becomes claimable again. No event of its own."""
        params = _callback_params(callback_id, None)
        params["payload"] = _payload_json(payload)
        async with self.pool.connection() as conn, conn.transaction():
            async with conn.cursor(row_factory=dict_row) as cur:
                await cur.execute(sql.RESUME, params)
                record = await cur.fetchone()
                if record is None:
                    raise CallbackNotFound(f"no job is waiting on callback {params['callback_id']}")
                row = JobRow.from_record(record)
                if row.state == JobState.AVAILABLE:
                    await cur.execute(queries.NOTIFY_QUEUE, {"queue": row.queue})
                else:
                    await cur.execute(
                        "SELECT pg_notify('awa_callbacks', %(id)s)", {"id": str(row.id)}
                    )
        return row

    async def waiting_job(self, callback_id: Any, run_lease: int | None = None) -> JobRow:
        """The job waiting on ``callback_id`` (unchanged), or CallbackNotFound."""
        params = _callback_params(callback_id, run_lease)
        async with self.pool.connection() as conn, conn.cursor(row_factory=dict_row) as cur:
            await cur.execute(f"SELECT * FROM awa.jobs WHERE {sql.CALLBACK_GUARD}", params)
            record = await cur.fetchone()
        if record is None:
            raise CallbackNotFound(f"no job is waiting on callback {params['callback_id']}")
        return JobRow.from_record(record)

    async def heartbeat_callback(self, callback_id: Any, timeout: float) -> JobRow:
        """Extend a waiting callback's timeout to now + ``timeout`` seconds."""
        params = _callback_params(callback_id, None)
        params["timeout"] = timeout
        async with self.pool.connection() as conn, conn.cursor(row_factory=dict_row) as cur:
            await cur.execute(sql.HEARTBEAT_CALLBACK, params)
            record = await cur.fetchone()
        if record is None:
            raise CallbackNotFound(f"no job is waiting on callback {params['callback_id']}")
        return JobRow.from_record(record)

    # -- rescue --------------------------------------------------------------------------
    async def rescue(
        self,
        reason: RescueReason,
        *,
        staleness: float = 15.0,
        limit: int = 500,
        dry_run: bool = False,
    ) -> list[JobRow]:
        """One bounded rescue batch for ``reason``; commits, then dispatches ``Rescued``.

        Rows of kinds with ``on_rescued`` specs are marked ``rescue_pending`` in the same
        transaction; :meth:`rescue_follow_ups` inserts their follow-ups in a second one.
        """
        spec_kinds = [
            k for (k, o) in (self.app.follow_ups if self.app else {}) if o is Outcome.RESCUED
        ]
        params = {
            "staleness": staleness,
            "limit": limit,
            "message": RESCUE_ERRORS[reason],
            "reason": str(reason),
            "spec_kinds": spec_kinds,
        }
        async with self.pool.connection() as conn, conn.cursor(row_factory=dict_row) as cur:
            if dry_run:
                await cur.execute(sql.RESCUE_CANDIDATES[reason], params)
                return [JobRow.from_record(r) for r in await cur.fetchall()]
            await cur.execute(sql.RESCUE.format(candidates=sql.RESCUE_CANDIDATES[reason]), params)
            rows = [JobRow.from_record(r) for r in await cur.fetchall()]
        for row in rows:
            self.dispatch(JobEvent.Rescued(row, row.args, reason))
        return rows

    async def rescue_follow_ups(self, limit: int = 100) -> tuple[int, int]:
        """Insert the follow-ups of rescued jobs still marked pending, one transaction each.

        A spec that raises leaves the mark for a later sweep. Returns (done, failed).
        """
        if self.app is None:
            return (0, 0)
        done = failed = 0
        async with self.pool.connection() as conn, conn.cursor() as cur:
            await cur.execute(
                "SELECT id FROM awa.jobs WHERE rescue_pending IS NOT NULL ORDER BY id LIMIT %(limit)s",
                {"limit": limit},
            )
            ids = [r[0] for r in await cur.fetchall()]
        for job_id in ids:
            try:
                if await self._rescue_follow_up(job_id):
                    done += 1
            except (psycopg.OperationalError, psycopg.InterfaceError):
                raise
            except Exception as exc:
                failed += 1
                log.error(
                    "rescue follow-up of job %s failed; retried by a later sweep: %s",
                    job_id,
                    exc,
                    extra={"action": "rescue_follow_up_failed", "job_id": job_id},
                )
        return (done, failed)

    async def _rescue_follow_up(self, job_id: int) -> bool:
        item = Finalized(job_id, None)
        async with self.pool.connection() as conn, conn.transaction():
            async with conn.cursor(row_factory=dict_row) as cur:
                await cur.execute(
                    "SELECT * FROM awa.jobs WHERE id = %(id)s AND rescue_pending IS NOT NULL "
                    "FOR UPDATE SKIP LOCKED",
                    {"id": job_id},
                )
                record = await cur.fetchone()
                if record is None:
                    return False
                row = JobRow.from_record(record)
                if not self.app or not self.app.has_specs(row.kind, Outcome.RESCUED):
                    return False  # another deployment knows this kind's specs
                event = JobEvent.Rescued(row, row.args, RescueReason(record["rescue_pending"]))
                await self._run_specs(conn, event, item)
                await cur.execute(
                    "UPDATE awa.jobs SET rescue_pending = NULL WHERE id = %(id)s", {"id": job_id}
                )
        if self.defer_notify:
            self._pending_queues |= item.queues
        return True

    async def prune(
        self, completed_retention: float, failed_retention: float, limit: int = 1000
    ) -> int:
        """Delete terminal jobs past their retention, in a bounded batch (releases unique keys)."""
        async with self.pool.connection() as conn:
            cur = await conn.execute(
                sql.PRUNE,
                {"completed": completed_retention, "failed": failed_retention, "limit": limit},
            )
            return cur.rowcount

    # -- follow-ups ----------------------------------------------------------------------
    def _spec_follow_ups(self, event: AnyEvent) -> list[PreparedJob]:
        """The follow-ups the app's specs ask for on this event (runs user code)."""
        if self.app is None:
            return []
        specs = self.app.specs_for(event.job.kind, OUTCOME_OF_EVENT[type(event)])
        if not specs:
            return []
        row = event.job.without_output()
        prepare = following(row.metadata, self.prepare_follow_up)  # contributors see the trigger
        follow_ups = []
        for spec in specs:
            args = _args_for(spec.trigger_type, event)
            try:
                request = spec.build(args, row, context_of(event))
            except Exception as exc:
                raise FollowUpError(f"follow-up spec {spec.name} raised: {exc}") from exc
            if request is not None:
                follow_ups.append(prepare(request.args, request.opts))
        return follow_ups

    async def _run_specs(
        self, conn: psycopg.AsyncConnection, event: AnyEvent, item: Finalized
    ) -> None:
        await self._insert_follow_ups(
            conn, [(item, p, False) for p in self._spec_follow_ups(event)]
        )

    def prepare_follow_up(self, args: Any, opts: InsertOpts) -> PreparedJob:
        """Validate a follow-up for this core's app (see ``app.prepare_job``)."""
        return prepare_job(self.app, args, opts)

    async def _insert_follow_ups(
        self, conn: psycopg.AsyncConnection, pending: Sequence[tuple[Finalized, PreparedJob, bool]]
    ) -> None:
        """Insert follow-ups (item, job, staged?) in one statement and count them on their items."""
        if not pending:
            return
        ids = await insert_follow_ups(conn, [prepared for _, prepared, _ in pending])
        for (item, prepared, staged), new_id in zip(pending, ids, strict=True):
            if new_id is None:
                if staged:
                    item.staged_duplicates += 1
                else:
                    item.duplicates += 1
                continue
            if staged:
                item.staged_inserted += 1
            item.follow_ups.append(new_id)
            item.queues.add(prepared.queue)

    # -- after commit --------------------------------------------------------------------
    async def flush_notifications(self) -> None:
        """Wake the workers of queues that received follow-ups (defer_notify mode)."""
        if not self._pending_queues:
            return
        queues, self._pending_queues = sorted(self._pending_queues), set()
        try:
            async with self.pool.connection() as conn:
                await conn.execute(sql.NOTIFY_QUEUES, {"queues": queues})
        except (psycopg.Error, OSError) as exc:  # the poll backstop still finds the jobs
            log.warning(
                "waking queues %s failed: %s", queues, exc, extra={"action": "notify_failed"}
            )

    def _after_commit(self, finalized: Iterable[Finalized]) -> None:
        if self.defer_notify:
            for item in finalized:
                self._pending_queues |= item.queues
        if self.dispatcher is None:
            return
        for item in finalized:
            for event in item.events:
                self.dispatcher.dispatch(event)

    def dispatch(self, event: AnyEvent) -> None:
        if self.dispatcher is not None:
            self.dispatcher.dispatch(event)


RESCUE_ERRORS = {
    RescueReason.STALE_HEARTBEAT: "heartbeat stale: worker presumed dead",
    RescueReason.DEADLINE_EXCEEDED: "hard deadline exceeded",
    RescueReason.EXPIRED_CALLBACK: "callback timed out",
}


def parse_callback_id(value: Any) -> UUID:
    """A callback id as a UUID; anything else is a ValidationError naming ``callback_id``."""
    if isinstance(value, UUID):
        return value
    try:
        return UUID(str(value).strip())
    except (ValueError, AttributeError, TypeError):
        raise ValidationError(
            "callback_id", f"not a valid callback id: {str(value)[:80]!r}"
        ) from None


def _callback_params(callback_id: Any, run_lease: int | None) -> dict[str, Any]:
    if run_lease is not None and (isinstance(run_lease, bool) or not isinstance(run_lease, int)):
        raise ValidationError("run_lease", "expected an integer")
    return {"callback_id": parse_callback_id(callback_id), "lease": run_lease}


def _payload_json(payload: Any) -> str:
    from awa_cli.jobs import to_json

    return to_json(payload, "payload")


def _resolution_event(action: str, row: JobRow, error: str, parked_attempt: int) -> AnyEvent:
    match action:
        case "complete":
            return JobEvent.Completed(row, row.args, 0.0, row.output)
        case "fail":
            return JobEvent.Exhausted(row, row.args, error, parked_attempt)
        case _:
            return JobEvent.Retried(row, row.args, "", parked_attempt, row.run_at)


async def _raise_missing_or_state(cur: psycopg.AsyncCursor[Any], job_id: int, verb: str) -> None:
    from awa_cli.results import JobNotFound

    await cur.execute("SELECT state FROM awa.jobs WHERE id = %(id)s", {"id": job_id})
    found = await cur.fetchone()
    if found is None:
        raise JobNotFound(f"job {job_id} not found")
    state = found["state"] if isinstance(found, dict) else found[0]
    raise InvalidJobState(f"job {job_id} is {state} and cannot be {verb}")


def _args_for(args_type: type | None, event: AnyEvent) -> Any:
    """Args as the spec's trigger type, from the committed row."""
    if args_type is None:
        return dict(event.job.args)
    if isinstance(event.args, args_type):
        return event.args
    return rebuild_args(args_type, event.job.args)


async def insert_follow_ups(
    conn: psycopg.AsyncConnection, jobs: Sequence[PreparedJob]
) -> list[int | None]:
    """Insert jobs inside the caller's transaction in one statement: each one's new id, in
    order, or None where its unique key is held (by an existing job or an earlier one here)."""
    async with conn.cursor() as cur:
        await cur.execute(queries.INSERT_EACH, queries.insert_each_params(jobs))
        return [None if r[0] is None else int(r[0]) for r in await cur.fetchall()]


class StagedCounters:
    """In-process counters of handler-staged follow-ups of committed completions."""

    def __init__(self) -> None:
        self.inserted = 0
        self.duplicate = 0
        self.discarded = 0

    def committed(self, inserted: int, duplicate: int) -> None:
        self.inserted += inserted
        self.duplicate += duplicate

    def snapshot(self) -> dict[str, int]:
        return {"inserted": self.inserted, "duplicate": self.duplicate, "discarded": self.discarded}


class InvalidJobState(AwaError):
    """The job is not in a state the operation applies to."""
