"""Callback support for running handlers: registering a callback id, and waiting inside the
handler (``job.wait_for_callback``) until a ``resume_external`` hands over a payload.

The transitions themselves (register, begin-wait, the wait's poll) are the outcome core's
(``awa_cli/outcomes/running.py``); this module keeps the waiters and their wake-ups.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from typing import TYPE_CHECKING, Any

from awa_cli.db import dependencies, jobs
from awa_cli.errors import AwaError, CallbackWaitAborted

if TYPE_CHECKING:
    from awa_cli.batches import BatchRow
    from awa_cli.jobs import CallbackToken, JobRow, PreparedJob
    from awa_cli.outcomes import OutcomeCore
    from awa_cli.worker.services import RunningJobs, WaitingAttempt

log = logging.getLogger("awa.worker")

WAIT_POLL_SECONDS = 2.0


class CallbackServices:
    """The :class:`~awa_cli.worker.services.AttemptServices` of a worker (or the test
    harness): callbacks through ``core``, cancellation through ``running``."""

    def __init__(
        self, core: OutcomeCore, running: RunningJobs, callback_base_url: str | None = None
    ) -> None:
        self.core = core
        self.running = running
        # [serve] callback_base_url: the tokens handlers get carry their full URLs.
        self.callback_base_url = callback_base_url
        self._waiters: dict[int, asyncio.Event] = {}
        # claimed children's parents, read by their claim, until they start
        self.claimed_parents: dict[int, list[Any]] = {}

    async def register_callback(self, row: JobRow, timeout: float) -> uuid.UUID:
        callback_id = uuid.uuid4()  # uuid4 draws from os.urandom: unguessable
        if not await self.core.register_callback(row.id, row.run_lease, callback_id, timeout):
            raise CallbackWaitAborted(f"job {row.id} is no longer running this attempt")
        return callback_id

    async def job_parents(self, job_id: int) -> list[Any]:
        """The parents of a job (``job.parents``, ``job.parent_outputs``; architecture §16):
        as its claim read them, else now."""
        found = self.claimed_parents.pop(job_id, None)
        if found is not None:
            return found
        async with self.core.pool.connection() as conn:
            return list(await dependencies.parents_of(conn, job_id))

    async def insert_workflow(self, wf: Any) -> Any:
        """Insert ``wf`` for a handler (``job.insert_workflow``), with the core's app."""
        from awa_cli.workflow_ops import prepare_workflow

        planned, jobs = prepare_workflow(wf, self.core.app)
        async with self.core.pool.connection() as conn:
            return await dependencies.run_async(
                conn, dependencies.insert_workflow(wf, planned, jobs)
            )

    async def insert_into_batch(self, batch_id: int, jobs: list[PreparedJob]) -> list[JobRow]:
        """A handler's ``job.batch.insert``: members into its own open batch, now."""
        from awa_cli.db import batches

        rows = []
        async with self.core.pool.connection() as conn:
            for prepared in jobs:
                rows.append(await batches.insert_member(conn, batch_id, prepared))
        return rows

    async def get_batch(self, batch_id: int) -> BatchRow:
        from awa_cli.db import batches

        async with self.core.pool.connection() as conn:
            return await batches.get(conn, batch_id)

    async def wait_for_callback(self, job: WaitingAttempt, token: CallbackToken) -> Any:
        if token.id != job.callback_id:
            raise AwaError(
                "wait_for_callback: token was not registered by this job's current attempt"
            )
        event = self._waiters.setdefault(job.id, asyncio.Event())
        try:
            begun = await self.core.begin_wait(job.id, job.run_lease, token.id)
        except BaseException:
            self._waiters.pop(job.id, None)
            raise
        if begun is None:
            self._waiters.pop(job.id, None)
            raise CallbackWaitAborted(f"job {job.id} is no longer running this attempt")
        resumed, payload = begun
        if resumed:
            self._waiters.pop(job.id, None)
            return payload
        job.control.waiting = True
        try:
            return await self._wait(job, token, event)
        finally:
            job.control.waiting = False
            self._waiters.pop(job.id, None)

    async def _wait(self, job: WaitingAttempt, token: CallbackToken, event: asyncio.Event) -> Any:
        while True:
            event.clear()
            state, callback_id, result, lease = await jobs.wait_state(self.core.pool, job.id)
            if lease != job.run_lease or state not in ("running", "waiting_external"):
                why = "cancelled" if state == "cancelled" and lease == job.run_lease else "rescued"
                self.running.fence(job.id, job.run_lease, why)
                raise CallbackWaitAborted(
                    f"job {job.id} was {state} while waiting for its callback"
                )
            if state == "running" and callback_id is None:
                return result  # resumed: the resolution already put us back to running
            if state == "waiting_external" and callback_id != token.id:
                self.running.fence(job.id, job.run_lease)
                raise CallbackWaitAborted(f"job {job.id}'s callback was replaced while waiting")
            try:
                await asyncio.wait_for(event.wait(), timeout=WAIT_POLL_SECONDS)
            except TimeoutError:
                pass

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
