"""Running one claimed job: rebuild its args, call its handler, decide the attempt's result."""

from __future__ import annotations

import asyncio
import contextvars
import functools
import logging
import time
from collections.abc import Mapping
from concurrent.futures import Executor
from typing import TYPE_CHECKING, Any

from awa_cli.errors import ShutdownInterrupted
from awa_cli.app import prepare_job
from awa_cli.attempts import AttemptResult, args_rejected, decide, not_an_object, unknown_kind
from awa_cli.jobs import JobRow, rebuild_args
from awa_cli.worker.job import Job, Prepare

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
) -> AttemptResult:
    """Run the handler of ``row`` and map what it did to an :class:`AttemptResult`.

    ``prepare`` validates staged follow-ups (default: for ``app``); the job is registered in
    ``running`` while its handler runs (the caller removes it once the result is final).
    """
    task = app.tasks.get(row.kind)
    if task is None:
        return unknown_kind(row)
    if not isinstance(row.args, Mapping):  # valid JSON, but not an object (DESIGN §5.11)
        return args_rejected(row, task.args_type, not_an_object(row.args))
    try:
        args = rebuild_args(task.args_type, row.args)
    except Exception as exc:
        return args_rejected(row, task.args_type, exc)
    job = Job(row, args, services, prepare=prepare or functools.partial(prepare_job, app))
    if running is not None:
        running.add(job)
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
        error_raised = ShutdownInterrupted("worker shut down before the handler finished")
    except Exception as exc:
        error_raised = exc
    record = job.finish()
    duration = time.monotonic() - started
    return decide(row, args=args, result=result, exc=error_raised, duration=duration, record=record)
