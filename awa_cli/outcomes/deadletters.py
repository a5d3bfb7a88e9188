"""Dead-lettering inside the transitions that fail a job (architecture §10, §15.2).

A queue with dead-lettering on moves an exhausted job out of ``awa.jobs`` into
``awa.dead_letters`` in the SAME transaction as the transition that failed it: a worker's
failing attempt (``dead_letter_finalize``: the guarded transition and the move in one
statement), a callback ``fail`` and a rescue on the last attempt (``dead_letter_move`` after
the transition and its specs, so a raising spec rolls the move back too). The event and the
specs see the failed job as it was; there is never a moment where the job is in neither
table.

Which queues dead-letter: a worker knows its own queues' flags from its config
(``CoreState.dead_letter_flags``, announced to ``awa.queues`` at start); for any other queue
(a client's core, the leader rescuing another deployment's job) the flag a worker announced
in ``awa.queues.dead_letter`` decides.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import psycopg
from psycopg.rows import dict_row

from awa_cli.attempts import AttemptResult
from awa_cli.db.statements import SQL
from awa_cli.deadletters import DeadReason
from awa_cli.events import AnyEvent
from awa_cli.jobs import JobRow, JobState
from awa_cli.db.queues import dead_letter_names
from awa_cli.outcomes.transaction import CoreState, Cursor

# The columns of a dead letter that finalisation changed (what committed_row needs).
_CHANGED = (
    "id",
    "state",
    "run_at",
    "attempt",
    "finalized_at",
    "callback_id",
    "callback_timeout_at",
)


def attempt_reason(result: AttemptResult) -> DeadReason:
    """Why a failing attempt dead-letters: a TerminalError (or args that do not rebuild, or
    awa's refusal of what the handler did) is ``terminal_error``; the last attempt's error is
    ``exhausted``."""
    return DeadReason.TERMINAL_ERROR if result.terminal else DeadReason.EXHAUSTED


async def bound_for_dlq(
    core: CoreState, conn: psycopg.AsyncConnection[Any], results: Sequence[AttemptResult]
) -> dict[int, DeadReason]:
    """The failing attempts of ``results`` whose queue dead-letters, with their reasons.

    Reads ``awa.queues`` only when a failing attempt's queue is not one of the core's own."""
    failing = [r for r in results if r.state is JobState.FAILED]
    if not failing:
        return {}
    flags = core.dead_letter_flags
    announced: set[str] = set()
    if any(r.job.queue not in flags for r in failing):
        announced = await dead_letter_names(conn)
    return {
        r.job.id: attempt_reason(r)
        for r in failing
        if flags.get(r.job.queue, r.job.queue in announced)
    }


async def finalize_into_dlq(
    conn: psycopg.AsyncConnection[Any],
    results: Sequence[AttemptResult],
    reasons: dict[int, DeadReason],
) -> dict[int, dict[str, Any]]:
    """Fail and move these attempts in one statement; the changed columns by job id (a
    stale attempt is missing, as from ``finalize_changed``)."""
    params = {
        "ids": [r.job.id for r in results],
        "leases": [r.job.run_lease for r in results],
        "errors": [None if r.error_entry is None else json.dumps(r.error_entry) for r in results],
        "reasons": [str(reasons[r.job.id]) for r in results],
        "progress": [r.progress for r in results],  # the attempt's latest, as finalize_changed
    }
    async with conn.cursor(row_factory=dict_row) as cur:
        await cur.execute(SQL["dead_letter_finalize"], params)
        records = await cur.fetchall()
    return {r["id"]: {k: r[k] for k in _CHANGED} for r in records}


async def move_failed(
    core: CoreState, cur: Cursor, rows: Sequence[JobRow], reason: DeadReason
) -> set[int]:
    """Move these just-failed jobs of dead-lettering queues into the DLQ, inside the caller's
    transaction (after the transition and its specs). Returns the ids moved.

    A row whose rescue follow-ups are still pending stays (the follow-up transaction moves
    it once they ran)."""
    flags = core.dead_letter_flags
    failed = [r for r in rows if r.state is JobState.FAILED]
    decided = [r.id for r in failed if flags.get(r.queue) is True]
    ask = [r.id for r in failed if r.queue not in flags]
    moved: set[int] = set()
    for ids, only_flagged in ((decided, False), (ask, True)):
        if not ids:
            continue
        await cur.execute(
            SQL["dead_letter_move"],
            {"ids": ids, "reasons": [str(reason)] * len(ids), "only_flagged": only_flagged},
        )
        moved |= {int(r["id"]) for r in await cur.fetchall()}
    return moved


def then_move(core: CoreState, reason: DeadReason) -> Any:
    """A ``Transition.then`` that dead-letters the committed row if it failed."""

    async def then(cur: Cursor, row: JobRow, event: AnyEvent | None) -> None:
        await move_failed(core, cur, [row], reason)

    return then
