"""DB-free unit tests of handlers: :class:`HandlerJob` and :func:`run_handler`.

A :class:`HandlerJob` is a :class:`awa_cli.Job` with a synthesised row. Staged follow-ups go
through the same validation and limits as in a worker and are recorded in ``job.staged``;
``job.set_output`` lands in ``job.output``. :func:`run_handler` runs a handler on one and
decides the outcome exactly as a worker would (``Job.finish()`` and ``attempts.decide``).
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import inspect
import itertools
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, UTC
from typing import Any

from awa_cli.app import App, prepare_job
from awa_cli.attempts import AttemptResult, decide
from awa_cli.jobs import (
    DEFAULT_MAX_ATTEMPTS,
    DEFAULT_PRIORITY,
    DEFAULT_QUEUE,
    InsertOpts,
    JobRow,
    JobState,
    PreparedJob,
    args_to_dict,
    kind_for,
)
from awa_cli.results import ValidationError
from awa_cli.worker.job import Job, Prepare, StagedFollowUps
from awa_cli.worker.services import CANCEL_REASONS

__all__ = [
    "HandlerJob",
    "HandlerResult",
    "StagedFollowUp",
    "run_handler",
    "run_handler_async",
]


@dataclass(frozen=True)
class StagedFollowUp:
    """A follow-up a :class:`HandlerJob` staged: ``args`` as given, ``options`` the keyword
    arguments as given (``opts`` the same as :class:`InsertOpts`), and the ``kind`` and
    ``queue`` it would be inserted with."""

    args: Any
    options: dict[str, Any]
    opts: InsertOpts
    kind: str
    queue: str
    prepared: PreparedJob = field(repr=False)


class _RecordingStaged(StagedFollowUps):
    """The worker's staging (same validation, limits and sealing), recording each success."""

    def __init__(self, prepare_fn: Prepare, record: list[StagedFollowUp]) -> None:
        super().__init__(prepare_fn)
        self._record = record
        self._order = threading.Lock()

    def stage(self, args: Any, options: dict[str, Any]) -> None:
        with self._order:
            super().stage(args, options)
            prepared = self.items[-1]
            self._record.append(
                StagedFollowUp(
                    args,
                    dict(options),
                    InsertOpts.from_kwargs(options),
                    prepared.kind,
                    prepared.queue,
                    prepared,
                )
            )


_ids = itertools.count(1)


class HandlerJob(Job):
    """A :class:`awa_cli.Job` for calling a handler directly, without a database.

    ``HandlerJob(args, **row_fields)``: the row is synthesised (a fresh id, the kind derived
    from the args class, queue ``default``, attempt 1, state running, ...); any
    :class:`awa_cli.JobRow` field may be given. Pass ``app=`` to resolve follow-up kinds and
    queues as a worker of that app would. ``job.staged`` lists the staged follow-ups,
    ``job.output`` the recorded output, ``job.staging_error`` the first failed stage.
    Callbacks need a database (use :class:`AwaTestClient`).
    """

    def __init__(self, args: Any, *, app: App | None = None, **row_fields: Any) -> None:
        unknown = set(row_fields) - {f.name for f in dataclasses.fields(JobRow)}
        if unknown:
            raise TypeError(f"HandlerJob: unknown JobRow field {sorted(unknown)[0]!r}")
        if "kind" not in row_fields:
            if isinstance(args, Mapping):
                raise ValidationError("kind", "required when args is a dict")
            row_fields["kind"] = app.kind_of_type(type(args)) if app else kind_for(type(args))
        kind = row_fields["kind"]
        now = datetime.now(UTC)
        values: dict[str, Any] = {
            "id": next(_ids),
            "queue": (app.queue_for(kind) if app else None) or DEFAULT_QUEUE,
            "args": args_to_dict(args),
            "state": JobState.RUNNING,
            "priority": DEFAULT_PRIORITY,
            "attempt": 1,
            "max_attempts": DEFAULT_MAX_ATTEMPTS,
            "run_at": now,
            "run_lease": 1,
            "heartbeat_at": now,
            "deadline_at": None,
            "deadline_duration": None,
            "callback_id": None,
            "callback_timeout_at": None,
            "callback_result": None,
            "errors": [],
            "metadata": {},
            "tags": [],
            "unique_key": None,
            "unique_states": None,
            "output": None,
            "ordering_key": None,
            "created_at": now,
            "attempted_at": now,
            "finalized_at": None,
        }
        values.update(row_fields)
        values["state"] = JobState(values["state"])
        self.staged: list[StagedFollowUp] = []
        staging = _RecordingStaged(functools.partial(prepare_job, app), self.staged)
        super().__init__(JobRow(**values), args, None, staging=staging)
        self.app = app

    @property
    def output(self) -> Any:
        return self.recorded().output

    @property
    def has_output(self) -> bool:
        return self.recorded().has_output

    @property
    def staging_error(self) -> BaseException | None:
        return self.recorded().staging_failure

    def seal(self) -> None:
        """Close staging as the worker does when the handler returns."""
        self.finish()

    def cancel(self, reason: str = "cancelled") -> None:
        """Make ``job.is_cancelled()`` true with ``job.cancel_reason`` ``reason``: one of
        ``"shutdown"``, ``"deadline"``, ``"cancelled"`` (the default) or ``"rescued"``."""
        if reason not in CANCEL_REASONS:
            raise ValidationError("reason", f"must be one of {', '.join(CANCEL_REASONS)}")
        self.control.cancel(reason)


@dataclass
class HandlerResult:
    """What a handler run on a :class:`HandlerJob` would do in a worker (no database)."""

    outcome: str  # the state the job would move to
    returned: Any
    exception: BaseException | None
    attempt: AttemptResult

    @property
    def error(self) -> str:
        return self.attempt.error


def _decide(job: HandlerJob, returned: Any, exc: BaseException | None) -> HandlerResult:
    attempt = decide(
        job.row,
        args=job.args,
        result=returned,
        exc=exc,
        duration=0.0,
        record=job.finish(),
        cancel_reason=job.cancel_reason,
    )
    return HandlerResult(str(attempt.state), returned, exc, attempt)


async def run_handler_async(handler: Callable[..., Any], job: HandlerJob) -> HandlerResult:
    """Run ``handler(job)`` (sync or async), seal staging, and decide the outcome as a worker would."""
    try:
        returned = handler(job)
        if inspect.isawaitable(returned):
            returned = await returned
    except Exception as exc:
        return _decide(job, None, exc)
    return _decide(job, returned, None)


def run_handler(handler: Callable[..., Any], job: HandlerJob) -> HandlerResult:
    """``run_handler_async`` for sync tests (an async handler runs on a fresh event loop)."""
    if inspect.iscoroutinefunction(handler):
        return asyncio.run(run_handler_async(handler, job))
    try:
        returned = handler(job)
    except Exception as exc:
        return _decide(job, None, exc)
    if inspect.isawaitable(returned):

        async def finish() -> Any:
            return await returned

        try:
            returned = asyncio.run(finish())
        except Exception as exc:
            return _decide(job, None, exc)
    return _decide(job, returned, None)
