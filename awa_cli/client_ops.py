"""The operator methods of :class:`~awa_cli.client.AsyncClient` (architecture §10), functions
taking the client first that ``client.py`` binds as its methods: queue pause and resume, bulk
retry / cancel / purge, cancel by unique key and the dead-letter queue.

Each is one call into the outcome core (``awa_cli/outcomes/``: ``queues.py``, ``bulk.py``,
``dead_letters.py``); nothing here holds SQL. Each action that changes something is recorded in
``awa.audit_log`` when there is an actor: ``with acting_as("serve:<token name>"):`` around the
call (per task, for a server acting for many callers), else ``client.core.actor`` (the CLI
sets ``cli:<os user>``). The bulk and DLQ actions refuse to run
with no filter unless ``all=True``; ``dry_run=True`` returns the number that would change;
``progress`` is told ``(done, total)`` batch by batch.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from awa_cli.db import dead_letters
from awa_cli.db import queues as queue_rows
from awa_cli.bulk import JobFilter
from awa_cli.dead_letters import DeadLetterFilter
from awa_cli.queues import QueueInfo
from awa_cli.app import prepare_job
from awa_cli.enqueue import InsertOpts, positive_limit
from awa_cli.dead_letters import DeadLetter, DlqDepth
from awa_cli.errors import JobNotFound, ValidationError
from awa_cli.jobs import JobRow, JobState
from awa_cli.durations import seconds
from awa_cli.outcomes import BulkRun, Progress
from awa_cli.outcomes.audit import acting_as, current_actor

if TYPE_CHECKING:
    from awa_cli.client import AsyncClient

States = JobState | str | Sequence[JobState | str] | None


def _states(state: States) -> tuple[str, ...]:
    if state is None:
        return ()
    if isinstance(state, str):  # JobState is a str too
        return (str(state),)
    return tuple(str(s) for s in state)


def _age(value: float | timedelta | None, name: str) -> float | None:
    return None if value is None else seconds(value, name)


def _ids(ids: Iterable[int] | None) -> tuple[int, ...] | None:
    if ids is None:
        return None
    found = tuple(ids)
    if any(isinstance(i, bool) or not isinstance(i, int) for i in found):
        raise ValidationError("ids", "must be job ids (integers)")
    return found


def _run(self: AsyncClient, dry_run: bool, progress: Progress | None) -> BulkRun:
    """How a bulk action of this client runs, its actor as :func:`current_actor` finds it."""
    return BulkRun(dry_run, current_actor(self.core), progress)


__all__ = ["States", "acting_as"]


# -- queue controls --------------------------------------------------------------------
async def pause_queue(self: AsyncClient, queue: str) -> QueueInfo:
    """Pause ``queue``: no worker anywhere claims from it (within a second); running jobs
    finish; inserts still work."""
    await self.ensure_open()
    return await self.core.set_paused(queue, True, current_actor(self.core))


async def resume_queue(self: AsyncClient, queue: str) -> QueueInfo:
    """Resume ``queue`` and wake its workers."""
    await self.ensure_open()
    return await self.core.set_paused(queue, False, current_actor(self.core))


async def list_queues(self: AsyncClient, configured: Iterable[str] = ()) -> list[QueueInfo]:
    """Every known queue with its pause and dead-letter flags (``configured``: names to
    include even without a row or jobs, e.g. a config's ``[queues]``)."""
    return await queue_rows.list_queues(await self.ensure_open(), configured)


async def paused_queues(self: AsyncClient) -> list[str]:
    """The names of the paused queues."""
    return await queue_rows.paused_names(await self.ensure_open())


# -- bulk operations -------------------------------------------------------------------
async def retry_jobs(
    self: AsyncClient,
    state: States = None,
    kind: str | None = None,
    queue: str | None = None,
    *,
    all: bool = False,
    dry_run: bool = False,
    progress: Progress | None = None,
    tag: str | None = None,
    ids: Iterable[int] | None = None,
) -> int:
    """Retry every matching failed or cancelled job (as ``retry``); the number retried.
    ``tag`` keeps jobs carrying it, ``ids`` those jobs only (each one a filter)."""
    await self.ensure_open()
    where = JobFilter(_states(state), queue, kind, all=all, tag=tag, ids=_ids(ids))
    return await self.core.retry_jobs(where, _run(self, dry_run, progress))


async def cancel_jobs(
    self: AsyncClient,
    state: States = None,
    kind: str | None = None,
    queue: str | None = None,
    *,
    all: bool = False,
    dry_run: bool = False,
    progress: Progress | None = None,
    tag: str | None = None,
    ids: Iterable[int] | None = None,
) -> int:
    """Cancel every matching available, scheduled, retryable or waiting job (as
    ``cancel``: with an app, Cancelled fires and on_cancelled specs run, per job).
    ``tag`` keeps jobs carrying it, ``ids`` those jobs only (each one a filter)."""
    await self.ensure_open()
    where = JobFilter(_states(state), queue, kind, all=all, tag=tag, ids=_ids(ids))
    return await self.core.cancel_jobs(where, _run(self, dry_run, progress))


async def purge_jobs(
    self: AsyncClient,
    state: States = None,
    kind: str | None = None,
    queue: str | None = None,
    older_than: float | timedelta | None = None,
    *,
    all: bool = False,
    dry_run: bool = False,
    progress: Progress | None = None,
    tag: str | None = None,
    ids: Iterable[int] | None = None,
) -> int:
    """Delete matching finished jobs (completed, failed, cancelled), finished more than
    ``older_than`` ago when given; ``tag`` and ``ids`` as for :meth:`cancel_jobs`."""
    age = _age(older_than, "older_than")
    await self.ensure_open()
    where = JobFilter(_states(state), queue, kind, older_than=age, all=all, tag=tag, ids=_ids(ids))
    return await self.core.purge_jobs(where, _run(self, dry_run, progress))


async def cancel_by_unique_key(
    self: AsyncClient,
    args: Any,
    *,
    kind: str | None = None,
    queue: str | None = None,
    unique_opts: Mapping[str, Any] | None = None,
) -> JobRow | None:
    """Cancel the unfinished job holding the unique key these args and options make (as
    an insert with them would compute it); None when no job holds it."""
    options = {"kind": kind, "queue": queue, "unique_opts": dict(unique_opts or {})}
    prepared = prepare_job(self.app, args, InsertOpts.from_kwargs(options))
    assert prepared.unique_key is not None  # unique_opts given: the key is computed
    await self.ensure_open()
    return await self.core.cancel_by_unique_key(prepared.unique_key, current_actor(self.core))


# -- the dead-letter queue -------------------------------------------------------------
async def list_dlq(
    self: AsyncClient, queue: str | None = None, kind: str | None = None, limit: int = 100
) -> list[DeadLetter]:
    """Dead letters, newest first."""
    return await dead_letters.newest(await self.ensure_open(), queue, kind, positive_limit(limit))


async def get_dlq_job(self: AsyncClient, id: int) -> DeadLetter:
    """One dead letter (JobNotFound when there is none with this id)."""
    dead = await dead_letters.get(await self.ensure_open(), id)
    if dead is None:
        raise JobNotFound(f"dead letter {id} not found")
    return dead


async def dlq_depth(self: AsyncClient, queue: str | None = None) -> DlqDepth:
    """How many dead letters there are, in total and per queue."""
    return await dead_letters.depth(await self.ensure_open(), queue)


async def retry_from_dlq(
    self: AsyncClient,
    id: int,
    *,
    queue: str | None = None,
    priority: int | None = None,
    run_at: datetime | None = None,
) -> JobRow:
    """Put a dead letter back under its id: available (scheduled for a future
    ``run_at``), attempt 0, errors kept plus ``retried from the dead-letter queue``."""
    await self.ensure_open()
    return await self.core.retry_dead_letter(
        id, queue=queue, priority=priority, run_at=run_at, actor=current_actor(self.core)
    )


async def bulk_retry_from_dlq(
    self: AsyncClient,
    queue: str | None = None,
    kind: str | None = None,
    all: bool = False,
    *,
    dry_run: bool = False,
    progress: Progress | None = None,
) -> int:
    """Retry every matching dead letter; the number put back."""
    await self.ensure_open()
    where = DeadLetterFilter(queue=queue, kind=kind, all=all)
    return await self.core.retry_dead_letters(where, _run(self, dry_run, progress))


async def move_failed_to_dlq(
    self: AsyncClient,
    *,
    queue: str | None = None,
    kind: str | None = None,
    all: bool = False,
    reason: str | None = None,
    dry_run: bool = False,
    progress: Progress | None = None,
) -> int:
    """Move failed jobs into the DLQ (reason ``manual``); the number moved."""
    await self.ensure_open()
    where = DeadLetterFilter(queue=queue, kind=kind, all=all)
    return await self.core.move_to_dlq(where, _run(self, dry_run, progress), reason)


async def purge_dlq(
    self: AsyncClient,
    *,
    id: int | None = None,
    queue: str | None = None,
    kind: str | None = None,
    older_than: float | timedelta | None = None,
    all: bool = False,
    dry_run: bool = False,
    progress: Progress | None = None,
) -> int:
    """Delete dead letters (one ``id``, or by filter); the number deleted."""
    age = _age(older_than, "older_than")
    await self.ensure_open()
    where = DeadLetterFilter(id, queue, kind, older_than=age, all=all)
    return await self.core.purge_dead_letters(where, _run(self, dry_run, progress))
