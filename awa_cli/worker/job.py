"""``awa.Job``: what a handler receives — the claimed row, its args, and the attempt's tools."""

from __future__ import annotations

import functools
import json
import uuid
from datetime import timedelta
from typing import Any

from awa_cli.batches import BatchCounts, BatchRow, JobBatchInfo, prepare_members
from awa_cli.metadata import following
from awa_cli.app import prepare_job
from awa_cli.attempts import AttemptRecord
from awa_cli.jobs import CallbackToken, JobRow, to_json
from awa_cli.callbacks import callback_urls
from awa_cli.errors import Interrupted
from awa_cli.progress import progress_value
from awa_cli.results import AwaError, ValidationError, seconds
from awa_cli.worker.services import AttemptServices, JobControl
from awa_cli.workflows import ParentInfo
from awa_cli.worker.staging import (
    MAX_STAGED_BYTES,
    MAX_STAGED_FOLLOW_UPS,
    FollowUps,
    Prepare,
    StagedFollowUps,
)


class JobBatch:
    """``job.batch``: the batch this job belongs to, or whose callback it is.

    ``id``; ``callback`` (``on_success``, ``on_complete``, ``on_death``, or None for a
    member); ``counts`` (for a callback: the batch's counts when its condition came true; for
    a member: None, ask :meth:`get`). A member adds members to its own batch while the batch
    is open with :meth:`insert` (``BatchSealed`` once it is sealed).
    """

    def __init__(
        self, info: JobBatchInfo, services: AttemptServices | None, prepare: Prepare
    ) -> None:
        self.id = info.id
        self.callback = info.callback
        self.counts: BatchCounts | None = info.counts
        self._services = services
        self._prepare = prepare

    def __repr__(self) -> str:
        return f"<awa.JobBatch {self.id}>"

    def _worker(self) -> AttemptServices:
        if self._services is None:
            raise ValidationError("batch", "needs a worker (use AwaTestClient in tests)")
        return self._services

    async def insert(self, args: Any, **insert_options: Any) -> JobRow:
        """Add a member to this (open) batch now; returns its row."""
        [prepared] = prepare_members(None, [args], insert_options, self._prepare)
        [row] = await self._worker().insert_into_batch(self.id, [prepared])
        return row

    async def get(self) -> BatchRow:
        """The batch as it is now (its counts, its state)."""
        return await self._worker().get_batch(self.id)


__all__ = [
    "MAX_STAGED_BYTES",
    "MAX_STAGED_FOLLOW_UPS",
    "FollowUps",
    "Job",
    "JobBatch",
    "Prepare",
    "StagedFollowUps",
]


class Job:
    """The job a handler runs: the claimed row's fields, ``args`` as the registered type.

    Besides the handler's API, a job has a small protocol with its runtime:

    * ``control`` — the runtime-owned :class:`~awa_cli.worker.services.JobControl` (its
      cancellation flag, and whether the handler waits inside ``wait_for_callback``);
    * :meth:`finish` — seal staging and return what the attempt recorded, an
      :class:`~awa_cli.attempts.AttemptRecord` (used by the executor and the test harness).
    """

    def __init__(
        self,
        row: JobRow,
        args: Any,
        services: AttemptServices | None = None,
        *,
        prepare: Prepare | None = None,
        control: JobControl | None = None,
        staging: StagedFollowUps | None = None,
    ) -> None:
        self.row = row
        self.id = row.id
        self.kind = row.kind
        self.queue = row.queue
        self.args = args
        self.priority = row.priority
        self.attempt = row.attempt
        self.max_attempts = row.max_attempts
        self.run_lease = row.run_lease
        self.metadata = row.metadata
        self.tags = row.tags
        self.errors = row.errors
        self.callback_id: uuid.UUID | None = row.callback_id
        self.callback_result: Any = row.callback_result
        # architecture §16: the parents (ids, states, step names) and the outputs of the
        # completed ones, keyed by step name (in a workflow) or parent id; set by the executor
        self.parents: list[ParentInfo] = []
        self.parent_outputs: dict[Any, Any] = {}
        self.control = control if control is not None else JobControl()
        self.control.progress.value = row.progress
        self._services = services
        self._prepare: Prepare = prepare or functools.partial(prepare_job, None)
        self._output: Any = None
        self._has_output = False
        if staging is None:
            staging = StagedFollowUps(
                following(row.metadata, prepare or functools.partial(prepare_job, None))
            )
        self._staged = staging
        self._registered_callback: uuid.UUID | None = None

    def __repr__(self) -> str:
        return f"<awa.Job {self.id} {self.kind} attempt {self.attempt}/{self.max_attempts}>"

    # -- batches -------------------------------------------------------------------------
    @property
    def batch(self) -> JobBatch | None:
        """The batch this job is a member of, or whose callback it is (None: neither)."""
        info = JobBatchInfo.from_metadata(self.metadata)
        return None if info is None else JobBatch(info, self._services, self._prepare)

    # -- cancellation --------------------------------------------------------------------
    def is_cancelled(self) -> bool:
        """True once the worker shuts down, the attempt passed its deadline, the job was
        cancelled, or the attempt was rescued or taken away (``cancel_reason`` says which)."""
        return self.control.is_cancelled()

    @property
    def cancel_reason(self) -> str | None:
        """None until ``is_cancelled()`` is true, then ``"shutdown"``, ``"deadline"``,
        ``"cancelled"`` (an operator) or ``"rescued"`` (the attempt was taken away)."""
        return self.control.reason if self.control.is_cancelled() else None

    def raise_if_cancelled(self) -> None:
        """Raise :class:`awa.Interrupted` once ``is_cancelled()`` is true: at shutdown the job
        is handed back (available again at once, the attempt not counted, progress kept)."""
        if self.control.is_cancelled():
            raise Interrupted(self.cancel_reason)

    # -- output --------------------------------------------------------------------------
    def set_output(self, value: Any) -> None:
        """Record a JSON-serialisable output, stored with the completion."""
        # Stored as its JSON form: what passes here is exactly what the completion writes.
        self._output, self._has_output = json.loads(to_json(value, "output")), True

    # -- progress ------------------------------------------------------------------------
    @property
    def progress(self) -> dict[str, Any] | None:
        """The last progress reported: ``{"percent", "message", "checkpoint", "at"}`` — by this
        attempt, else by an earlier one (resume from ``job.progress["checkpoint"]``), else None."""
        return self.control.progress.value

    def set_progress(self, percent: float, message: str | None = None, **checkpoint: Any) -> None:
        """Report progress (percent 0–100, an optional message, JSON-serialisable checkpoint
        fields; at most 64 KiB in all). Costs no round trip: the worker writes the latest value
        at most once a second and always with the attempt's outcome. A bad value raises
        ``ValidationError`` naming the field and records nothing."""
        value, text = progress_value(percent, message, checkpoint)
        self.control.progress.report(value, text)

    # -- staged follow-ups ---------------------------------------------------------------
    def enqueue_on_completion(self, args: Any, **insert_options: Any) -> None:
        """Stage a follow-up for this attempt's completion (only a completion inserts it)."""
        self._staged.stage(args, insert_options)

    def follow_ups(self) -> FollowUps:
        return FollowUps(self._staged)

    # -- callbacks -----------------------------------------------------------------------
    async def insert_workflow(self, wf: Any) -> Any:
        """Insert a workflow from inside the handler, in a transaction of its own (committed
        at once, whatever this attempt's outcome); the ``WorkflowRun``, or None when a
        workflow of the same periodic fire exists already (architecture §16)."""
        if self._services is None:
            raise AwaError("insert_workflow needs a worker or the test harness")
        return await self._services.insert_workflow(wf)

    async def register_callback(self, timeout: float | int | timedelta = 3600) -> CallbackToken:
        """Register an external callback; return ``WaitForCallback(token)`` or await
        ``wait_for_callback(token)``."""
        timeout_s = seconds(timeout, "timeout")
        if self._services is None:
            raise ValidationError(
                "register_callback", "needs a worker (use AwaTestClient in tests)"
            )
        callback_id = await self._services.register_callback(self.row, timeout_s)
        self._registered_callback = self.callback_id = callback_id
        base_url = self._services.callback_base_url
        urls = callback_urls(base_url, callback_id) if base_url else ()
        return CallbackToken(callback_id, self.id, self.run_lease, urls)

    async def wait_for_callback(self, token: CallbackToken) -> Any:
        """Wait (keeping this worker slot) until the callback is resumed; returns its payload."""
        if self._services is None:
            raise ValidationError("wait_for_callback", "needs a worker")
        payload = await self._services.wait_for_callback(self, token)
        self._registered_callback = None
        self.callback_id = None
        self.callback_result = payload
        return payload

    # -- the runtime's protocol ----------------------------------------------------------
    def recorded(self) -> AttemptRecord:
        """What this attempt recorded so far (output, registered callback, staged follow-ups)."""
        return AttemptRecord(
            output=self._output,
            has_output=self._has_output,
            registered_callback=self._registered_callback,
            staged=tuple(self._staged.items),
            staging_failure=self._staged.failure,
            progress=self.control.progress.final(),
        )

    def finish(self) -> AttemptRecord:
        """Seal staging (a later stage raises a sealed StagingError) and return the record
        the attempt's result is decided from. Idempotent."""
        self._staged.seal()
        return self.recorded()
