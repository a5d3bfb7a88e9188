"""Staged follow-ups: what a handler asks to enqueue with its completion.

Validated eagerly (the same rules as an insert), limited to 16 per attempt and 64 KiB, and
sealed when the handler returns; any failed stage fails the attempt terminally (architecture §5.8).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from awa_cli.jobs import InsertOpts, PreparedJob
from awa_cli.results import StagingError, ValidationError

MAX_STAGED_FOLLOW_UPS = 16
MAX_STAGED_BYTES = 64 * 1024

Prepare = Callable[[Any, InsertOpts], PreparedJob]
"""Validates a follow-up for the worker's app (``functools.partial(prepare_job, app)``)."""


class StagedFollowUps:
    """Follow-ups a handler staged for its completion; validated eagerly, sealed on return."""

    def __init__(self, prepare: Prepare) -> None:
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
