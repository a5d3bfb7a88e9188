"""Running one claimed job: rebuild its args, call its handler, decide the attempt's result.

Cancellation (architecture §15.6): the attempt's :class:`~awa_cli.worker.services.JobControl`
knows the task running it. At the job's deadline (a timer armed here, from the duration the
claim computed) ``job.is_cancelled()`` turns true, the worker runs the deadline rescue at once
(``on_deadline``: the job becomes retryable or failed with ``Rescued``, as the leader's sweep
would make it, without waiting for the sweep), and an async handler still running
``CANCEL_GRACE`` later is cancelled as a task. The attempt's own result is then
``hard deadline exceeded`` too: it is what counts if that rescue could not run. The same grace applies when the attempt is taken away (operator cancel, rescue,
a lost heartbeat). A plain ``def`` handler runs in a daemon thread: when its deadline grace or
the drain passes, the worker stops waiting for it and logs a warning naming the job.
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
import logging
import time
from collections.abc import Callable, Mapping
from concurrent.futures import Executor
from typing import TYPE_CHECKING, Any

from awa_cli.workflows import AFTER_KEY, parent_infos
from awa_cli.app import prepare_job
from awa_cli.attempts import (
    AttemptResult,
    args_rejected,
    deadline_exceeded,
    decide,
    not_an_object,
    unknown_kind,
)
from awa_cli.errors import ShutdownInterrupted
from awa_cli.jobs import JobRow, rebuild_args
from awa_cli.worker.job import Job, Prepare
from awa_cli.worker.services import CANCEL_GRACE, JobControl

if TYPE_CHECKING:
    from awa_cli.app import App
    from awa_cli.worker.services import AttemptServices, RunningJobs

log = logging.getLogger("awa.worker")


async def execute(
    app: App,
    row: JobRow,
    services: AttemptServices | None,
    threads: Executor | None,
    running: RunningJobs | None = None,
    *,
    prepare: Prepare | None = None,
    on_unknown: Callable[[JobRow], None] | None = None,
    on_deadline: Callable[[JobRow], None] | None = None,
    waited: float = 0.0,
) -> AttemptResult:
    """Run the handler of ``row`` and map what it did to an :class:`AttemptResult`.

    ``waited``: seconds since the claim (a job claimed ahead waited for a slot): the deadline
    counts from the claim, so that much less of it is left.

    ``prepare`` validates staged follow-ups (default: for ``app``); the job is registered in
    ``running`` while its handler runs (the caller removes it once the result is final);
    ``on_unknown`` is told of a job whose kind ``app`` does not register, ``on_deadline`` of
    an attempt that reached its deadline (the worker rescues it at once, as the sweep would).
    """
    task = app.tasks.get(row.kind)
    if task is None:
        log.error(
            "job %s has kind %s, which this worker does not register: failed",
            row.id,
            row.kind,
            extra={
                "action": "unknown_kind",
                "kind": row.kind,
                "job_id": row.id,
                "queue": row.queue,
            },
        )
        if on_unknown is not None:
            on_unknown(row)
        return unknown_kind(row)
    if not isinstance(row.args, Mapping):  # valid JSON, but not an object (architecture §5.11)
        return args_rejected(row, task.args_type, not_an_object(row.args))
    try:
        args = rebuild_args(task.args_type, row.args)
    except Exception as exc:
        return args_rejected(row, task.args_type, exc)
    control = JobControl()
    control.task = asyncio.current_task()
    control.is_async = task.is_async
    job = Job(
        row, args, services, prepare=prepare or functools.partial(prepare_job, app), control=control
    )
    await _load_parents(job, row, services)
    if running is not None:
        running.add(job)
    timer = _arm_deadline(row, control, on_deadline, waited)
    started = time.monotonic()
    result: Any = None
    error_raised: BaseException | None = None
    try:
        if task.is_async:
            result = await task.fn(job)
        else:
            loop = asyncio.get_running_loop()
            context = contextvars.copy_context()
            result = await loop.run_in_executor(threads, context.run, task.fn, job)
    except asyncio.CancelledError:
        if control.hard_cancelled and control.task is not None:
            control.task.uncancel()  # ours, not the drain's: the task goes on to finalise
        _cancelled(row, control, threads)
        error_raised = ShutdownInterrupted("worker shut down before the handler finished")
    except Exception as exc:
        error_raised = exc
    finally:
        if timer is not None:
            timer.cancel()
        control.release()
    return _result(job, args, result, error_raised, time.monotonic() - started)


def _result(
    job: Job, args: Any, result: Any, error_raised: BaseException | None, duration: float
) -> AttemptResult:
    """The attempt's result once its handler ended (a deadline, a hand-back, a return)."""
    row, control = job.row, job.control
    record = job.finish()
    if control.reason == "deadline":
        return deadline_exceeded(row, args=args, duration=duration)
    if control.reason == "shutdown" and error_raised is None:
        log.warning(
            "job %s returned after the worker's shutdown signal: recorded as its result "
            "(raise awa.Interrupted() or call job.raise_if_cancelled() to hand it back)",
            row.id,
            extra={"action": "returned_at_shutdown", "job_id": row.id, "queue": row.queue},
        )
    return decide(
        row,
        args=args,
        result=result,
        exc=error_raised,
        duration=duration,
        record=record,
        cancel_reason=job.cancel_reason,
    )


async def _load_parents(job: Job, row: JobRow, services: AttemptServices | None) -> None:
    """A child's ``job.parents`` and ``job.parent_outputs`` (architecture §16)."""
    if services is not None and AFTER_KEY in row.metadata:
        job.parents, job.parent_outputs = parent_infos(await services.job_parents(row.id))


def deadline_seconds(row: JobRow) -> float | None:
    """Seconds from the claim to the attempt's deadline (both the claim's ``now()``), or None."""
    if row.deadline_at is None or row.attempted_at is None:
        return None
    return max(0.0, (row.deadline_at - row.attempted_at).total_seconds())


def _arm_deadline(
    row: JobRow,
    control: JobControl,
    on_deadline: Callable[[JobRow], None] | None,
    waited: float = 0.0,
) -> asyncio.TimerHandle | None:
    delay = deadline_seconds(row)
    if delay is None:
        return None
    loop = asyncio.get_running_loop()
    return loop.call_later(max(0.0, delay - waited), _deadline_passed, row, control, on_deadline)


def _deadline_passed(
    row: JobRow, control: JobControl, on_deadline: Callable[[JobRow], None] | None
) -> None:
    if control.waited:  # a wait for a callback lifts the deadline (callbacks.sql begin_wait)
        return
    log.warning(
        "job %s passed its deadline: cancelling it",
        row.id,
        extra={"action": "deadline_exceeded", "job_id": row.id, "queue": row.queue},
    )
    control.cancel("deadline", grace=CANCEL_GRACE)
    if on_deadline is not None:
        on_deadline(row)


def _cancelled(row: JobRow, control: JobControl, threads: Executor | None) -> None:
    """The attempt's task was cancelled (deadline or cancel grace, or the drain)."""
    if control.is_async:
        return
    # Python cannot stop the thread: stop waiting for it. Its late result is fenced.
    abandon = getattr(threads, "abandon", None)
    if abandon is not None:
        abandon()
    log.warning(
        "job %s: its def handler still runs after its %s; the worker no longer waits for it "
        "(a late result is ignored)",
        row.id,
        {"deadline": "deadline", "shutdown": "shutdown timeout"}.get(
            control.reason or "", "cancel"
        ),
        extra={"action": "handler_abandoned", "job_id": row.id, "queue": row.queue},
    )
