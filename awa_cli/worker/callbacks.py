"""Callback support for running handlers: registering a callback id, and waiting inside the
handler (``job.wait_for_callback``) until a ``resume_external`` hands over a payload."""

from __future__ import annotations

import asyncio
import logging
import uuid
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, cast

from awa_cli.errors import AwaError, CallbackWaitAborted

if TYPE_CHECKING:
    from psycopg_pool import AsyncConnectionPool

    from awa_cli.jobs import CallbackToken, JobRow
    from awa_cli.worker.job import Job

log = logging.getLogger("awa.worker")

WAIT_POLL_SECONDS = 2.0

_REGISTER = """
UPDATE awa.jobs SET callback_id = %(callback_id)s, callback_result = NULL,
    callback_timeout_at = now() + %(timeout)s * interval '1 second'
WHERE id = %(id)s AND run_lease = %(lease)s AND state = 'running'
RETURNING id
"""

# The handler keeps its slot; no heartbeat or deadline applies while it waits. A callback
# resumed before the wait began (callback_result set) is returned at once instead.
_BEGIN_WAIT = """
UPDATE awa.jobs SET
    state = CASE WHEN callback_result IS NULL THEN 'waiting_external'::awa.job_state
                 ELSE 'running'::awa.job_state END,
    callback_in_handler = callback_result IS NULL,
    callback_id = CASE WHEN callback_result IS NULL THEN callback_id END,
    callback_timeout_at = CASE WHEN callback_result IS NULL THEN callback_timeout_at END,
    heartbeat_at = CASE WHEN callback_result IS NULL THEN NULL ELSE now() END,
    deadline_at = CASE WHEN callback_result IS NULL THEN NULL ELSE deadline_at END
WHERE id = %(id)s AND run_lease = %(lease)s AND state = 'running' AND callback_id = %(callback_id)s
RETURNING callback_result IS NOT NULL AS resumed, callback_result
"""

_POLL_WAIT = """
SELECT state, callback_id, callback_result, run_lease FROM awa.jobs WHERE id = %(id)s
"""


@dataclass
class CallbackServices:
    pool: AsyncConnectionPool = field(
        default=cast("AsyncConnectionPool", None)
    )  # set by the worker
    _waiters: dict[int, asyncio.Event] = field(default_factory=dict)
    callback_base_url: str | None = None  # [serve] callback_base_url: tokens carry their URLs

    async def register_callback(self, row: JobRow, timeout: float) -> uuid.UUID:
        callback_id = uuid.uuid4()  # uuid4 draws from os.urandom: unguessable
        async with self.pool.connection() as conn:
            cur = await conn.execute(
                _REGISTER,
                {
                    "callback_id": callback_id,
                    "timeout": timeout,
                    "id": row.id,
                    "lease": row.run_lease,
                },
            )
            if await cur.fetchone() is None:
                raise CallbackWaitAborted(f"job {row.id} is no longer running this attempt")
        return callback_id

    async def wait_for_callback(self, job: Job, token: CallbackToken) -> Any:
        if token.id != job.callback_id:
            raise AwaError(
                "wait_for_callback: token was not registered by this job's current attempt"
            )
        event = self._waiters.setdefault(job.id, asyncio.Event())
        async with self.pool.connection() as conn:
            cur = await conn.execute(
                _BEGIN_WAIT, {"id": job.id, "lease": job.run_lease, "callback_id": token.id}
            )
            begun = await cur.fetchone()
            if begun is None:
                self._waiters.pop(job.id, None)
                raise CallbackWaitAborted(f"job {job.id} is no longer running this attempt")
        if begun[0]:
            self._waiters.pop(job.id, None)
            return begun[1]
        job._waiting_in_handler = True
        try:
            while True:
                event.clear()
                state, callback_id, result, lease = await self._poll(job.id)
                if lease != job.run_lease or state not in ("running", "waiting_external"):
                    job._cancel()
                    raise CallbackWaitAborted(
                        f"job {job.id} was {state} while waiting for its callback"
                    )
                if state == "running" and callback_id is None:
                    return result  # resumed: the resolution already put us back to running
                if state == "waiting_external" and callback_id != token.id:
                    job._cancel()
                    raise CallbackWaitAborted(f"job {job.id}'s callback was replaced while waiting")
                try:
                    await asyncio.wait_for(event.wait(), timeout=WAIT_POLL_SECONDS)
                except TimeoutError:
                    pass
        finally:
            job._waiting_in_handler = False
            self._waiters.pop(job.id, None)

    async def _poll(self, job_id: int) -> tuple[str, Any, Any, int]:
        async with self.pool.connection() as conn:
            cur = await conn.execute(_POLL_WAIT, {"id": job_id})
            row = await cur.fetchone()
        if row is None:
            return ("deleted", None, None, -1)
        return (str(row[0]), row[1], row[2], int(row[3]))

    def wake_waiter(self, payload: str) -> None:
        try:
            event = self._waiters.get(int(payload))
        except ValueError:
            return
        if event is not None:
            event.set()

    def wake_all_waiters(self) -> None:
        for event in self._waiters.values():
            event.set()
