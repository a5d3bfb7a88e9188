"""Transitions of a running attempt made by its worker: the heartbeat (and the rows found
lost by it), callback registration, and the in-handler wait (running <-> waiting_external; what a waiting handler reads on a
wake-up is ``db.jobs.wait_state``).

None of these fires an event. Each is guarded by ``(id, run_lease, state)``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any
from uuid import UUID

from awa_cli.db.statements import SQL
from awa_cli.outcomes.transaction import CoreState


async def heartbeat(
    core: CoreState,
    attempts: Sequence[tuple[int, int]],
    progress: Sequence[str | None] | None = None,
) -> set[int]:
    """Touch the running rows of these (id, run_lease) attempts in one statement, writing
    each one's ``progress`` JSON where given (None: unchanged); the ids still ours (the
    others were cancelled, rescued or claimed again: fence them)."""
    news = list(progress) if progress is not None else [None] * len(attempts)
    # In id order, as the finaliser locks them (db/params.py): two statements that lock the
    # same rows in one order cannot deadlock each other.
    ordered = sorted(zip(attempts, news, strict=True), key=lambda pair: pair[0][0])
    params = {
        "ids": [job_id for (job_id, _), _ in ordered],
        "leases": [lease for (_, lease), _ in ordered],
        "progress": [news for _, news in ordered],
    }
    async with core.claim_pool.connection() as conn:
        cur = await conn.execute(SQL["heartbeat"], params)
        return {row[0] for row in await cur.fetchall()}


async def register_callback(
    core: CoreState, job_id: int, run_lease: int, callback_id: UUID, timeout: float
) -> bool:
    """Give the running attempt ``callback_id``, timing out in ``timeout`` seconds; False when
    the attempt is no longer running."""
    async with core.pool.connection() as conn:
        cur = await conn.execute(
            SQL["register_callback"],
            {"callback_id": callback_id, "timeout": timeout, "id": job_id, "lease": run_lease},
        )
        return await cur.fetchone() is not None


async def begin_wait(
    core: CoreState, job_id: int, run_lease: int, callback_id: UUID
) -> tuple[bool, Any] | None:
    """running -> waiting_external for a handler waiting in place: ``(resumed, payload)``
    (resumed: the payload arrived before the wait began), or None when the attempt is lost."""
    async with core.pool.connection() as conn:
        cur = await conn.execute(
            SQL["begin_wait"], {"id": job_id, "lease": run_lease, "callback_id": callback_id}
        )
        begun = await cur.fetchone()
    return None if begun is None else (bool(begun[0]), begun[1])
