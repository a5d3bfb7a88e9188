"""The one transaction frame of the outcome core, and the state every transition shares.

:func:`transition` is the frame every single-row transition runs in (operator cancel and
retry, callback resolution, resume, heartbeat and lookup of a callback, a rescued job's
follow-ups):

1. the guarded statement, which returns the committed row, or nothing when the change does
   not apply (then ``missing`` raises, or the frame returns None and nothing else happens);
2. the follow-ups the app's specs ask for on the event, then the statements that belong
   with it (``then``: wake a queue, clear a mark), all in the same transaction;
3. commit, and only then the event goes to the dispatcher.

Worker attempts (``outcomes/attempts.py``) and rescue batches (``outcomes/rescue.py``) are
many rows per statement and keep their own shape, built from the same pieces.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, LiteralString

import psycopg
from psycopg.rows import DictRow, dict_row

from awa_cli.attempts import Finalized
from awa_cli.db.statements import SQL
from awa_cli.jobs import JobRow
from awa_cli.limits import Candidates, ClaimPlan
from awa_cli.outcomes import settle
from awa_cli.outcomes.follow_ups import insert_counted, spec_follow_ups

if TYPE_CHECKING:
    from psycopg_pool import AsyncConnectionPool

    from awa_cli.app import App
    from awa_cli.dispatch import Dispatcher
    from awa_cli.events import AnyEvent

log = logging.getLogger("awa.outcomes")

Cursor = psycopg.AsyncCursor[DictRow]


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


class CoreState:
    """What every transition of one core shares: the pools, the app, the dispatcher, the
    counters and the queues to wake after commit."""

    def __init__(
        self,
        pool: AsyncConnectionPool,
        app: App | None = None,
        dispatcher: Dispatcher | None = None,
        *,
        defer_notify: bool = False,
        claim_pool: AsyncConnectionPool | None = None,
    ) -> None:
        self.pool = pool
        # Claims and heartbeats may use a pool without durable commits (see db/pools.py).
        self.claim_pool = claim_pool if claim_pool is not None else pool
        self.app = app
        self.dispatcher = dispatcher
        self.counters = StagedCounters()
        # queue -> its limit-aware claim plan (OutcomeCore.plan_claims); none: the plain claim
        self.claim_plans: dict[str, ClaimPlan] = {}
        self.claim_candidates: dict[str, Candidates] = {}  # each limited queue's last scan
        # With defer_notify, the pool's sessions set awa.defer_notify so the insert trigger
        # stays silent: a NOTIFY inside a transaction holds PostgreSQL's global notify lock
        # through the commit's WAL flush, serialising every transaction that inserts jobs. The
        # queues that received follow-ups are notified once per batch by flush_notifications().
        self.defer_notify = defer_notify
        self._pending_queues: set[str] = set()
        # Dead-lettering of the queues this core knows from its config (a worker's own queues);
        # for any other queue the flag announced in awa.queues decides (outcomes/dead_letters.py).
        self.dead_letter_flags: dict[str, bool] = {}
        # Who operator actions are recorded as in awa.audit_log (None: not recorded): the CLI
        # sets cli:<os user>, awa serve serve:<token name>.
        self.actor: str | None = None

    # -- follow-ups ------------------------------------------------------------------------
    async def run_specs(
        self, conn: psycopg.AsyncConnection[Any], event: AnyEvent, item: Finalized
    ) -> None:
        """Insert the follow-ups the app's specs ask for on ``event``, counted on ``item``."""
        await insert_counted(conn, [(item, p, False) for p in spec_follow_ups(self.app, event)])

    # -- after commit ----------------------------------------------------------------------
    def after_commit(self, finalized: Iterable[Finalized]) -> None:
        """Remember the queues to wake (defer_notify) and dispatch the committed events."""
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

    async def flush_notifications(self) -> None:
        """Wake the workers of queues that received follow-ups (defer_notify mode)."""
        if not self._pending_queues:
            return
        queues, self._pending_queues = sorted(self._pending_queues), set()
        try:
            async with self.pool.connection() as conn:
                await conn.execute(SQL["notify_queues"], {"queues": queues})
        except (psycopg.Error, OSError) as exc:  # the poll backstop still finds the jobs
            log.warning(
                "waking queues %s failed: %s", queues, exc, extra={"action": "notify_failed"}
            )


Missing = Callable[[Cursor], Awaitable[None]]
"""Called when the guarded statement matched nothing: raises (or returns: no change)."""


@dataclass(frozen=True)
class Transition:
    """One guarded single-row transition, run by :func:`transition`."""

    statement: LiteralString  # the guarded statement's name in db/sql/
    params: Mapping[str, Any]
    missing: Missing
    # The event the committed row emits (None: no event, no specs).
    event: Callable[[JobRow, DictRow], AnyEvent | None] | None = None
    # Statements that belong in the same transaction, after the guarded one and the specs.
    then: Callable[[Cursor, JobRow, AnyEvent | None], Awaitable[None]] | None = None
    dispatch: bool = True  # False: run the specs, but the event was dispatched before
    atomic: bool = True  # False: one statement, no transaction (lookups, timeouts)
    # True: the guarded statement changed the row's state, so its children and workflow are
    # settled in this transaction (outcomes/settle.py); False for a row already settled.
    settles: bool = True


async def transition(core: CoreState, change: Transition) -> JobRow | None:
    """Run ``change`` in one transaction; the committed row, or None if ``missing`` returned."""
    item = Finalized(0, None)
    async with core.pool.connection() as conn, _atomic(conn, change.atomic):
        async with conn.cursor(row_factory=dict_row) as cur:
            await cur.execute(SQL[change.statement], change.params)
            record = await cur.fetchone()
            if record is None:
                await change.missing(cur)
                return None
            row = JobRow.from_record(record)
            item.job_id = row.id  # the trigger its follow-ups name (awa.trigger_id)
            event = change.event(row, record) if change.event is not None else None
            if event is not None:
                await core.run_specs(conn, event, item)
            if change.then is not None:
                await change.then(cur, row, event)
            more = await settle.settle(core, conn, [record]) if change.settles else []
    item.row = row
    if event is not None and change.dispatch:
        item.events = [event]
    core.after_commit([item, *more])
    return row


@contextlib.asynccontextmanager
async def _atomic(conn: psycopg.AsyncConnection[Any], atomic: bool) -> AsyncIterator[None]:
    if not atomic:
        yield
        return
    async with conn.transaction():
        yield


async def notify_queue(cur: Cursor, row: JobRow, event: AnyEvent | None = None) -> None:
    """``then`` for transitions that make a job available: wake its queue's workers."""
    await cur.execute(SQL["notify_queue"], {"queue": row.queue})
