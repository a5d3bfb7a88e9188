"""``awa.Job``: what a handler receives — the claimed row, its args, and the attempt's tools."""

from __future__ import annotations

import json
import functools
import threading
import uuid
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from awa_cli.app import prepare_job
from awa_cli.jobs import CallbackToken, InsertOpts, JobRow, PreparedJob, to_json
from awa_cli.metadata import following
from awa_cli.results import StagingError, ValidationError, seconds

if TYPE_CHECKING:
    from awa_cli.worker.runtime import WorkerServices

MAX_STAGED_FOLLOW_UPS = 16
MAX_STAGED_BYTES = 64 * 1024


class StagedFollowUps:
    """Follow-ups a handler staged for its completion; validated eagerly, sealed on return."""

    def __init__(self, prepare: Any) -> None:
        self._prepare = prepare
        self._lock = threading.Lock()
        self.items: list[PreparedJob] = []
        self.bytes = 0
        self.sealed = False
        self.failure: StagingError | None = None

    def stage(self, args: Any, options: dict[str, Any]) -> None:
        with self._lock:
            if self.sealed:
                raise StagingError("staging is sealed: the handler already returned")
            try:
                try:
                    prepared = self._prepare(args, InsertOpts.from_kwargs(options))
                except ValidationError as exc:
                    raise StagingError(f"follow-up rejected: {exc}") from exc
                except (TypeError, ValueError) as exc:
                    raise StagingError(f"follow-up rejected: {exc}") from exc
                if len(self.items) >= MAX_STAGED_FOLLOW_UPS:
                    raise StagingError(
                        f"more than {MAX_STAGED_FOLLOW_UPS} follow-ups staged in one attempt"
                    )
                size = prepared.serialized_size()
                if self.bytes + size > MAX_STAGED_BYTES:
                    raise StagingError(
                        f"staged follow-ups exceed {MAX_STAGED_BYTES} bytes in one attempt"
                    )
            except StagingError as exc:
                if self.failure is None:
                    self.failure = exc
                raise
            self.items.append(prepared)
            self.bytes += size

    def seal(self) -> None:
        with self._lock:
            self.sealed = True


class FollowUps:
    """A handle to stage follow-ups from tasks the handler awaits (``job.follow_ups()``)."""

    def __init__(self, staged: StagedFollowUps) -> None:
        self._staged = staged

    def enqueue_on_completion(self, args: Any, **insert_options: Any) -> None:
        """Stage a follow-up inserted in the same transaction as this attempt's completion."""
        self._staged.stage(args, insert_options)


class Job:
    """The job a handler runs: the claimed row's fields, ``args`` as the registered type."""

    def __init__(self, row: JobRow, args: Any, services: WorkerServices | None = None) -> None:
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
        self._services = services
        self._cancelled = False  # set from the loop, read from any thread: a plain flag will do
        self._output: Any = None
        self._has_output = False
        self._staged = StagedFollowUps(
            following(
                row.metadata,
                services.prepare_follow_up if services else functools.partial(prepare_job, None),
            )
        )
        self._registered_callback: uuid.UUID | None = None
        self._waiting_in_handler = False

    def __repr__(self) -> str:
        return f"<awa.Job {self.id} {self.kind} attempt {self.attempt}/{self.max_attempts}>"

    # -- cancellation --------------------------------------------------------------------
    def is_cancelled(self) -> bool:
        """True once the job was cancelled, rescued or taken away from this attempt."""
        return self._cancelled

    def _cancel(self) -> None:
        self._cancelled = True

    # -- output --------------------------------------------------------------------------
    def set_output(self, value: Any) -> None:
        """Record a JSON-serialisable output, stored with the completion."""
        # Stored as its JSON form: what passes here is exactly what the completion writes.
        self._output, self._has_output = json.loads(to_json(value, "output")), True

    # -- staged follow-ups ---------------------------------------------------------------
    def enqueue_on_completion(self, args: Any, **insert_options: Any) -> None:
        """Stage a follow-up for this attempt's completion (only a completion inserts it)."""
        self._staged.stage(args, insert_options)

    def follow_ups(self) -> FollowUps:
        return FollowUps(self._staged)

    # -- callbacks -----------------------------------------------------------------------
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
        return CallbackToken(callback_id, self.id, self.run_lease)

    async def wait_for_callback(self, token: CallbackToken) -> Any:
        """Wait (keeping this worker slot) until the callback is resumed; returns its payload."""
        if self._services is None:
            raise ValidationError("wait_for_callback", "needs a worker")
        payload = await self._services.wait_for_callback(self, token)
        self._registered_callback = None
        self.callback_id = None
        self.callback_result = payload
        return payload

    # -- used by the executor ------------------------------------------------------------
    def _seal(self) -> None:
        self._staged.seal()
