"""Running one claimed job: rebuild its args, call its handler, decide the attempt's result."""

from __future__ import annotations

import asyncio
import contextvars
import logging
import time
from concurrent.futures import Executor
from typing import TYPE_CHECKING, Any

from awa_cli.jobs import JobRow, rebuild_args
from awa_cli.outcomes import AttemptResult, decide, unknown_kind
from awa_cli.errors import ShutdownInterrupted
from awa_cli.results import TerminalError
from awa_cli.worker.job import Job

if TYPE_CHECKING:
    from awa_cli.app import App
    from awa_cli.worker.runtime import WorkerServices

log = logging.getLogger("awa.worker")


async def execute(
    app: App,
    row: JobRow,
    services: WorkerServices | None,
    threads: Executor | None,
    running: dict[int, Job] | None = None,
) -> AttemptResult:
    """Run the handler of ``row`` and map what it did to an :class:`AttemptResult`."""
    task = app.tasks.get(row.kind)
    if task is None:
        return unknown_kind(row)
    try:
        args = rebuild_args(task.args_type, row.args)
    except Exception as exc:
        name = getattr(task.args_type, "__name__", task.args_type)
        error = TerminalError(f"args do not rebuild as {name}: {exc}")
        return decide(row, args=dict(row.args), result=None, exc=error, duration=0.0)
    job = Job(row, args, services)
    if running is not None:
        running[row.id] = job
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
        job._seal()
        error_raised = ShutdownInterrupted("worker shut down before the handler finished")
    except Exception as exc:
        error_raised = exc
    finally:
        job._seal()
    duration = time.monotonic() - started
    result_ = decide(
        row,
        args=args,
        result=result,
        exc=error_raised,
        duration=duration,
        output=job._output,
        has_output=job._has_output,
        registered_callback=job._registered_callback,
        staged=job._staged.items,
        staging_failure=job._staged.failure,
    )
    if result_.action == "park":
        result_.discarded = len(job._staged.items)
    return result_
