"""Rescue: the three sweeps (stale heartbeat, deadline, expired callback), the deferred
follow-ups of rescued jobs, and retention.

Rescue is the one exception to "follow-ups in the transition's transaction": the rescue
commits first and its follow-ups run in a second transaction, so user code can never keep a
dead job stuck.
"""

from __future__ import annotations

import logging
from typing import LiteralString

import psycopg
from psycopg.rows import DictRow, dict_row

from awa_cli import defaults
from awa_cli.attempts import BACKOFF_JITTER, MAX_BACKOFF_EXPONENT, MAX_BACKOFF_SECONDS
from awa_cli.db.statements import SQL
from awa_cli.dead_letters import DeadReason
from awa_cli.events import AnyEvent, JobEvent, Outcome, RescueReason
from awa_cli.jobs import JobRow
from awa_cli.outcomes import settle
from awa_cli.outcomes.dead_letters import move_failed
from awa_cli.outcomes.transaction import CoreState, Cursor, Transition, transition

log = logging.getLogger("awa.outcomes")

RESCUE_ERRORS = {
    RescueReason.STALE_HEARTBEAT: "heartbeat stale: worker presumed dead",
    RescueReason.DEADLINE_EXCEEDED: "hard deadline exceeded",
    RescueReason.EXPIRED_CALLBACK: "callback timed out",
}

_STATEMENTS: dict[RescueReason, tuple[LiteralString, LiteralString]] = {
    RescueReason.STALE_HEARTBEAT: ("rescue_stale", "rescue_candidates_stale"),
    RescueReason.DEADLINE_EXCEEDED: ("rescue_deadline", "rescue_candidates_deadline"),
    RescueReason.EXPIRED_CALLBACK: (
        "rescue_expired_callback",
        "rescue_candidates_expired_callback",
    ),
}


async def rescue(
    core: CoreState,
    reason: RescueReason,
    *,
    staleness: float = defaults.HEARTBEAT_STALENESS,
    limit: int = 500,
    dry_run: bool = False,
) -> list[JobRow]:
    """One bounded rescue batch for ``reason``; commits, then dispatches ``Rescued``.

    Rows of kinds with ``on_rescued`` specs are marked ``rescue_pending`` in the same
    statement; :func:`rescue_follow_ups` inserts their follow-ups in a second transaction.
    """
    spec_kinds = [k for (k, o) in (core.app.follow_ups if core.app else {}) if o is Outcome.RESCUED]
    params = {
        "staleness": staleness,
        "limit": limit,
        "message": RESCUE_ERRORS[reason],
        "reason": str(reason),
        "spec_kinds": spec_kinds,
        # the attempt model's backoff, so a rescued job backs off as a failed attempt does
        "max_exponent": MAX_BACKOFF_EXPONENT,
        "jitter": BACKOFF_JITTER,
        "max_backoff": MAX_BACKOFF_SECONDS,
    }
    update, candidates = _STATEMENTS[reason]
    if dry_run:
        async with core.pool.connection() as conn, conn.cursor(row_factory=dict_row) as cur:
            await cur.execute(SQL[candidates], params)
            return [JobRow.from_record(r) for r in await cur.fetchall()]
    async with core.pool.connection() as conn, conn.transaction():
        async with conn.cursor(row_factory=dict_row) as cur:
            await cur.execute(SQL[update], params)
            records = await cur.fetchall()
            rows = [JobRow.from_record(r) for r in records]
            more = await settle.settle(core, conn, records)
            # a rescue on the last attempt dead-letters in the rescue's transaction (rows
            # whose on_rescued follow-ups are pending move with those, below)
            await move_failed(core, cur, rows, DeadReason.RESCUED)
    for row in rows:
        core.dispatch(JobEvent.Rescued(row, row.args, reason))
    core.after_commit(more)
    return rows


async def rescue_follow_ups(core: CoreState, limit: int = 100) -> tuple[int, int]:
    """Insert the follow-ups of rescued jobs still marked pending, one transaction each.

    A spec that raises leaves the mark for a later sweep. Returns (done, failed).
    """
    if core.app is None:
        return (0, 0)
    done = failed = 0
    async with core.pool.connection() as conn, conn.cursor() as cur:
        await cur.execute(SQL["rescue_pending_ids"], {"limit": limit})
        ids = [r[0] for r in await cur.fetchall()]
    for job_id in ids:
        try:
            if await _rescue_follow_up(core, job_id):
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


async def _rescue_follow_up(core: CoreState, job_id: int) -> bool:
    """One rescued job's follow-ups and the cleared mark, in one transaction (its Rescued
    event was dispatched with the rescue). False: locked elsewhere, done, or not ours."""
    ran: list[bool] = []

    def event(row: JobRow, record: DictRow) -> AnyEvent | None:
        if not core.app or not core.app.has_specs(row.kind, Outcome.RESCUED):
            return None  # another deployment knows this kind's specs
        return JobEvent.Rescued(row, row.args, RescueReason(record["rescue_pending"]))

    async def clear(cur: Cursor, row: JobRow, fired: AnyEvent | None) -> None:
        if fired is not None:
            await cur.execute(SQL["rescue_pending_clear"], {"id": job_id})
            await move_failed(core, cur, [row], DeadReason.RESCUED)
            ran.append(True)

    async def skip(cur: Cursor) -> None:
        return None

    await transition(
        core,
        Transition(
            "rescue_pending_lock",
            {"id": job_id},
            skip,
            event=event,
            then=clear,
            dispatch=False,
            settles=False,  # settled by the rescue's own transaction
        ),
    )
    return bool(ran)


async def prune(
    core: CoreState, completed_retention: float, failed_retention: float, limit: int = 1000
) -> int:
    """Delete terminal jobs past their retention, in a bounded batch (releases unique keys)."""
    async with core.pool.connection() as conn, conn.transaction():
        await conn.execute(SQL["prune_plan_settings"])
        cur = await conn.execute(
            SQL["prune"],
            {"completed": completed_retention, "failed": failed_retention, "limit": limit},
        )
        found = await cur.fetchone()
        return int(found[0]) if found else 0
