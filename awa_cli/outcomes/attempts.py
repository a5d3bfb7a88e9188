"""Finalising worker attempts: the plain batch, the group with follow-ups, the per-job fallback.

The split is decided once, here (:func:`plan`): attempts of kinds with no follow-up spec for
their outcome that staged nothing are finalised in batches, one statement for many jobs and
no transaction; the others many per transaction (one statement for the transitions, one for
every follow-up), and if user code or an insert fails for any of them that transaction is
rolled back and each gets a transaction of its own. The finalizer (``worker/finalizer.py``)
only batches and retries the groups this module plans.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import psycopg
from psycopg.rows import dict_row

from awa_cli.attempts import AttemptResult, Finalized, finalized
from awa_cli.db.params import finalize_params
from awa_cli.db.statements import SQL
from awa_cli.jobs import PreparedJob
from awa_cli.outcomes import settle
from awa_cli.outcomes.dead_letters import bound_for_dlq, finalize_into_dlq
from awa_cli.outcomes.follow_ups import insert_counted, spec_follow_ups
from awa_cli.outcomes.transaction import CoreState

log = logging.getLogger("awa.outcomes")


@dataclass(frozen=True)
class FinalizeGroup:
    """Attempt results finalised together: a plain batch, or a group with follow-ups."""

    results: tuple[AttemptResult, ...]
    with_follow_ups: bool


def needs_own_transaction(core: CoreState, result: AttemptResult) -> bool:
    """True when the result has follow-ups to insert with its transition (staged ones, or a
    spec registered for its kind and outcome)."""
    if result.staged:
        return True
    outcome = result.outcome
    return bool(core.app and outcome and core.app.has_specs(result.job.kind, outcome))


def plan(core: CoreState, results: Sequence[AttemptResult]) -> list[FinalizeGroup]:
    """The groups to finalise ``results`` in: the plain batch first, then those with follow-ups."""
    own = [needs_own_transaction(core, r) for r in results]
    plain = tuple(r for r, alone in zip(results, own, strict=True) if not alone)
    with_follow_ups = tuple(r for r, alone in zip(results, own, strict=True) if alone)
    groups = []
    if plain:
        groups.append(FinalizeGroup(plain, with_follow_ups=False))
    if with_follow_ups:
        groups.append(FinalizeGroup(with_follow_ups, with_follow_ups=True))
    return groups


async def finalize_batch(core: CoreState, results: Sequence[AttemptResult]) -> list[Finalized]:
    """Attempts without follow-ups: one statement for the transitions (a second one for the
    failing attempts that dead-letter; a third, only when a job has children or a workflow,
    to settle them), in one transaction."""
    # One transaction always: a finalised job's children and workflow are settled in it
    # (outcomes/settle.py), and whether a job has children is known only from the row the
    # guarded statement changed (a child may have named it while it ran).
    async with core.pool.connection() as conn, conn.transaction():
        done = await apply_attempts(core, conn, results)
    committed(core, results, done)
    return done


async def finalize_with_follow_ups(
    core: CoreState, results: Sequence[AttemptResult]
) -> list[Finalized]:
    """Attempts with follow-ups: every transition and every follow-up of the group in one
    transaction, so each job's transition commits together with its follow-ups.

    If user code or an insert fails for any job of the group, the transaction is rolled
    back and each job is applied in a transaction of its own: one job's failing spec
    never holds back another job's completion.
    """
    if len(results) > 1:
        try:
            async with core.pool.connection() as conn, conn.transaction():
                done = await apply_attempts(core, conn, results)
        except (psycopg.OperationalError, psycopg.InterfaceError):
            raise  # connection trouble: the caller keeps the results and retries
        except Exception as exc:
            log.debug(
                "a follow-up failed in a group of %d attempts; applying each on its own: %s",
                len(results),
                exc,
            )
        else:
            committed(core, results, done)
            return done
    return [await finalize_one(core, result) for result in results]


async def finalize_one(core: CoreState, result: AttemptResult) -> Finalized:
    """One attempt with its follow-ups in a transaction of its own (the fallback)."""
    try:
        async with core.pool.connection() as conn, conn.transaction():
            [item] = await apply_attempts(core, conn, [result])
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
    committed(core, [result], [item])
    return item


async def apply_attempts(
    core: CoreState, conn: psycopg.AsyncConnection[Any], results: Sequence[AttemptResult]
) -> list[Finalized]:
    """Transitions, spec follow-ups and staged follow-ups inside the caller's transaction:
    two statements however many jobs and follow-ups there are (one when none has a
    follow-up). Failing attempts of dead-lettering queues are failed and moved to the DLQ by
    a statement of their own (``dead_letter_finalize``), in the same transaction."""
    dead = await bound_for_dlq(core, conn, results)
    plain = [r for r in results if r.job.id not in dead]
    changed: dict[int, Mapping[str, Any]] = {}
    if plain:
        async with conn.cursor(row_factory=dict_row) as cur:
            await cur.execute(SQL["finalize_changed"], finalize_params(plain))
            changed = {r["id"]: r for r in await cur.fetchall()}
    if dead:  # failed and moved to the DLQ in one statement (outcomes/dead_letters.py)
        dying = [r for r in results if r.job.id in dead]
        changed.update(await finalize_into_dlq(conn, dying, dead))
    done = []
    pending: list[tuple[Finalized, PreparedJob, bool]] = []
    for result in results:
        item = finalized(result, changed.get(result.job.id))
        done.append(item)
        if item.row is not None and result.action == "interrupt":
            item.queues.add(result.job.queue)  # handed back: wake the queue's workers
        for event in item.events:
            pending.extend((item, prepared, False) for prepared in spec_follow_ups(core.app, event))
        if item.row is not None and result.action == "complete":
            pending.extend((item, prepared, True) for prepared in result.staged)
    await insert_counted(conn, pending)
    # the one hook into the completing transaction: children, workflows (outcomes/settle.py)
    more = await settle.settle(core, conn, list(changed.values()))
    if more:
        done[0].events.extend(e for item in more for e in item.events)
        for item in more:
            done[0].queues |= item.queues
    return done


def committed(core: CoreState, results: Sequence[AttemptResult], done: Sequence[Finalized]) -> None:
    """Count what committed, then hand the events to the dispatcher."""
    for result, item in zip(results, done, strict=True):
        if item.row is not None and result.action == "complete" and result.staged:
            core.counters.committed(item.staged_inserted, item.staged_duplicates)
        _count_discarded(core, result, item)
    core.after_commit(done)


def _count_discarded(core: CoreState, result: AttemptResult, item: Finalized) -> None:
    if result.discarded and item.row is not None:
        core.counters.discarded += result.discarded
        log.warning(
            "job %s parked on a callback: %d staged follow-ups discarded "
            "(stage them after wait_for_callback instead)",
            result.job.id,
            result.discarded,
            extra={"action": "staged_follow_ups_discarded", "job_id": result.job.id},
        )
