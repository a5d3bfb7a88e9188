"""What the lower worker modules depend on, defined below them.

The worker folder is a one-way chain: ``runtime`` builds the parts and hands each what it
uses; ``queues`` gets a :class:`RunnerContext`; ``executor`` and ``job`` get the
:class:`AttemptServices` a handler may ask for and the :class:`RunningJobs` registry;
nothing below ``runtime`` sees the ``Worker``.

Cancellation of a running attempt is owned by the runtime: each ``Job`` carries a
:class:`JobControl`, flipped by :meth:`RunningJobs.fence` (the heartbeat finding a row lost,
a rescue, a wait finding its callback gone, an operator cancel: then the task is cancelled
after ``CANCEL_GRACE``), by :meth:`RunningJobs.stop_all` at shutdown, and by the executor's
deadline timer (``worker/executor.py``).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol
from uuid import UUID

from awa_cli.progress import ProgressTracker

if TYPE_CHECKING:
    from awa_cli.attempts import AttemptResult
    from awa_cli.batches import BatchRow
    from awa_cli.jobs import CallbackToken, JobRow, PreparedJob


CANCEL_REASONS = ("shutdown", "deadline", "cancelled", "rescued")
"""``job.cancel_reason`` once ``job.is_cancelled()`` is true: the worker is shutting down, the
attempt passed its deadline, an operator cancelled the job, or the attempt was taken away
(rescued, or its row found no longer ours)."""

CANCEL_GRACE = 1.0
"""Seconds an async handler has to return once its attempt was taken away (a deadline, an
operator cancel, a rescue) before it is cancelled as an asyncio task (architecture §15.6)."""


class JobControl:
    """The runtime-owned handle of one running attempt: its cancellation flag (and why),
    whether its handler is waiting inside ``wait_for_callback`` (no heartbeat then), the
    asyncio task running the attempt, so the runtime can cancel it after a grace, and the
    progress it reported (written by the heartbeat and the progress flush).

    Set from the event loop, read from any thread: plain attributes will do.
    """

    __slots__ = (
        "_cancelled",
        "_hard",
        "_waiting",
        "hard_cancelled",
        "is_async",
        "progress",
        "reason",
        "task",
        "waited",
    )

    def __init__(self) -> None:
        self._cancelled = False
        self._waiting = False
        self.waited = False  # waited inside wait_for_callback: no deadline applies any more
        # why, once cancelled: one of CANCEL_REASONS (``job.cancel_reason``)
        self.reason: str | None = None
        self.task: asyncio.Task[Any] | None = None  # the attempt's task (set by the executor)
        self.is_async = True
        self.hard_cancelled = False
        self._hard: asyncio.TimerHandle | None = None
        self.progress = ProgressTracker()

    @property
    def waiting(self) -> bool:
        """Whether the handler waits inside ``wait_for_callback`` now (no heartbeat then)."""
        return self._waiting

    @waiting.setter
    def waiting(self, value: bool) -> None:
        self._waiting = value
        self.waited = self.waited or value

    def cancel(self, reason: str = "cancelled", grace: float | None = None) -> None:
        """Make ``job.is_cancelled()`` true (the attempt is no longer ours); with ``grace``,
        cancel the attempt's task that many seconds later if it still runs."""
        self._cancelled = True
        if self.reason is None:
            self.reason = reason
        if grace is not None and self.task is not None and self._hard is None:
            self._hard = asyncio.get_running_loop().call_later(grace, self.cancel_task)

    def cancel_task(self) -> None:
        """Cancel the attempt's task now (the executor maps it to the attempt's result)."""
        if self.task is not None and not self.task.done():
            self.hard_cancelled = True
            self.task.cancel()

    def release(self) -> None:
        """The attempt ended: drop its timers."""
        if self._hard is not None:
            self._hard.cancel()
        self.task = None

    def is_cancelled(self) -> bool:
        return self._cancelled


class RunningAttempt(Protocol):
    """What the runtime knows of a running job (``awa_cli.Job`` is one)."""

    @property
    def id(self) -> int: ...
    @property
    def run_lease(self) -> int: ...
    @property
    def queue(self) -> str: ...
    @property
    def control(self) -> JobControl: ...


class RunningJobs(Mapping[int, RunningAttempt]):
    """The attempts running in this process, by job id (added by the executor, removed once
    their result is finalised)."""

    def __init__(self) -> None:
        self._jobs: dict[int, RunningAttempt] = {}
        self.cancel_new: str | None = None  # a reason: attempts added now start cancelled

    def __getitem__(self, job_id: int) -> RunningAttempt:
        return self._jobs[job_id]

    def __iter__(self) -> Iterator[int]:
        return iter(self._jobs)

    def __len__(self) -> int:
        return len(self._jobs)

    def add(self, job: RunningAttempt) -> None:
        self._jobs[job.id] = job
        if self.cancel_new is not None:  # claimed in the last round before the drain
            job.control.cancel(self.cancel_new)

    def discard(self, job_id: int) -> None:
        self._jobs.pop(job_id, None)

    def fence(self, job_id: int, run_lease: int, reason: str = "rescued") -> bool:
        """The attempt (``job_id``, ``run_lease``) is no longer ours: if it runs here, its
        handler's ``job.is_cancelled()`` turns true with ``job.cancel_reason`` ``reason``
        (and its late result is fenced by the lease guard). The one code path that cancels a
        running attempt."""
        job = self._jobs.get(job_id)
        if job is None or job.run_lease != run_lease:
            return False
        job.control.cancel(reason, grace=CANCEL_GRACE)
        return True

    def cancel_job(self, job_id: int) -> bool:
        """An operator cancelled job ``job_id`` (whatever its lease): fence it if it runs here."""
        job = self._jobs.get(job_id)
        return job is not None and self.fence(job_id, job.run_lease, "cancelled")

    def stop_all(self) -> None:
        """Shutdown began: every running handler's ``job.is_cancelled()`` turns true (the
        drain cancels what still runs after ``shutdown_timeout``)."""
        self.cancel_new = "shutdown"
        for job in list(self._jobs.values()):
            job.control.cancel("shutdown")

    def fence_rows(self, rows: list[JobRow]) -> None:
        """Fence the attempts of rescued rows still running here (maintenance's callback)."""
        for row in rows:
            self.fence(row.id, row.run_lease)

    def beating(self) -> list[RunningAttempt]:
        """The attempts the heartbeat touches (not those waiting inside a handler)."""
        return [job for job in list(self._jobs.values()) if not job.control.waiting]

    def by_queue(self) -> dict[str, int]:
        counts: dict[str, int] = {}
        for job in list(self._jobs.values()):
            counts[job.queue] = counts.get(job.queue, 0) + 1
        return counts


class WaitingAttempt(RunningAttempt, Protocol):
    """A running job waiting for its callback."""

    @property
    def callback_id(self) -> UUID | None: ...


class AttemptServices(Protocol):
    """What a running handler's ``Job`` may ask of its worker (``worker/callbacks.py``)."""

    callback_base_url: str | None  # [serve] callback_base_url, for CallbackToken.url()

    async def register_callback(self, row: JobRow, timeout: float) -> UUID: ...

    async def job_parents(self, job_id: int) -> list[Any]: ...

    async def insert_workflow(self, wf: Any) -> Any: ...

    async def wait_for_callback(self, job: WaitingAttempt, token: CallbackToken) -> Any: ...

    async def insert_into_batch(self, batch_id: int, jobs: list[PreparedJob]) -> list[JobRow]: ...

    async def get_batch(self, batch_id: int) -> BatchRow: ...


@dataclass(frozen=True)
class RunnerContext:
    """What a queue runner (``worker/queues.py``) uses of its worker, and nothing more."""

    claim: Callable[[str, int, float], Awaitable[list[JobRow]]]  # queue, limit, deadline
    # queue, seconds since the short claim began
    seconds_until_due: Callable[[str, float], Awaitable[float | None]]
    started: Callable[[JobRow], None]  # the claim committed: dispatch Started
    execute: Callable[[JobRow, float], Awaitable[AttemptResult]]  # row, seconds since its claim
    submit: Callable[[AttemptResult], None]  # to the finalizer
    finalizing: Callable[[], int]  # results submitted, not yet finalised (worker-wide)
    lost: Callable[[int], None]  # executing failed inside awa: forget the job
    is_stopping: Callable[[], bool]
    recheck_claims: Callable[[], Awaitable[None]]  # after a failed claim
    poll_interval: float


@dataclass(frozen=True)
class WorkerStats:
    """A snapshot of one worker, for plugins and the process supervisor
    (``Worker.stats()``)."""

    queues: dict[str, int]  # queue -> concurrency
    running: dict[str, int]  # queue -> jobs running in this process
    staged_inserted: int  # handler-staged follow-ups of committed completions
    staged_duplicate: int
    staged_discarded: int  # dropped by a WaitForCallback park
    hook_failures: int  # hooks and awa_job_event implementations that raised
    listening: bool  # the LISTEN connection is up
    stopping: bool
    ready: bool = False  # listening, and every queue finished a successful claim round
    healthy: bool = True  # no queue in claim-error backoff, no supervised task ended
    unknown_kinds: dict[tuple[str, str], int] = field(default_factory=dict)  # (kind, queue)
