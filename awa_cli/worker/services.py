"""What the lower worker modules depend on, defined below them.

The worker folder is a one-way chain: ``runtime`` builds the parts and hands each what it
uses; ``queues`` gets a :class:`RunnerContext`; ``executor`` and ``job`` get the
:class:`AttemptServices` a handler may ask for and the :class:`RunningJobs` registry;
nothing below ``runtime`` sees the ``Worker``.

Cancellation of a running attempt is owned by the runtime: each ``Job`` carries a
:class:`JobControl`, and :meth:`RunningJobs.fence` is the one code path that flips it (the
heartbeat finding a row lost, a rescue, a wait finding its callback gone).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol
from uuid import UUID

from awa_cli.progress import ProgressTracker

if TYPE_CHECKING:
    from awa_cli.attempts import AttemptResult
    from awa_cli.jobs import CallbackToken, JobRow


class JobControl:
    """The runtime-owned handle of one running attempt: its cancellation flag, whether
    its handler is waiting inside ``wait_for_callback`` (no heartbeat then), and the progress
    it reported (written by the heartbeat and the progress flush).

    Set from the event loop, read from any thread: plain attributes will do.
    """

    __slots__ = ("_cancelled", "progress", "waiting")

    def __init__(self) -> None:
        self._cancelled = False
        self.waiting = False
        self.progress = ProgressTracker()

    def cancel(self) -> None:
        """Make ``job.is_cancelled()`` true (the attempt is no longer ours)."""
        self._cancelled = True

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

    def __getitem__(self, job_id: int) -> RunningAttempt:
        return self._jobs[job_id]

    def __iter__(self) -> Iterator[int]:
        return iter(self._jobs)

    def __len__(self) -> int:
        return len(self._jobs)

    def add(self, job: RunningAttempt) -> None:
        self._jobs[job.id] = job

    def discard(self, job_id: int) -> None:
        self._jobs.pop(job_id, None)

    def fence(self, job_id: int, run_lease: int) -> bool:
        """The attempt (``job_id``, ``run_lease``) is no longer ours: if it runs here, its
        handler's ``job.is_cancelled()`` turns true (and its late result is fenced by the
        lease guard). The one code path that cancels a running attempt."""
        job = self._jobs.get(job_id)
        if job is None or job.run_lease != run_lease:
            return False
        job.control.cancel()
        return True

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

    async def wait_for_callback(self, job: WaitingAttempt, token: CallbackToken) -> Any: ...


@dataclass(frozen=True)
class RunnerContext:
    """What a queue runner (``worker/queues.py``) uses of its worker, and nothing more."""

    claim: Callable[[str, int, float], Awaitable[list[JobRow]]]  # queue, limit, deadline
    seconds_until_due: Callable[[str], Awaitable[float | None]]
    started: Callable[[JobRow], None]  # the claim committed: dispatch Started
    execute: Callable[[JobRow], Awaitable[AttemptResult]]
    submit: Callable[[AttemptResult], None]  # to the finalizer
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
