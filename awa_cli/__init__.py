"""awa: a PostgreSQL-backed background job queue.

The public API; everything else is internal::

    import awa_cli as awa

    app = awa.App()

    @app.task(SendEmail, queue="email")
    async def send_email(job: awa.Job) -> None: ...
"""

from __future__ import annotations

from awa_cli.app import App
from awa_cli.client import AsyncClient, Client, ResolveResult, insert, insert_async
from awa_cli.deadletters import DeadLetter
from awa_cli.events import JobEvent, RescueReason
from awa_cli.jobs import (
    DEFAULT_UNIQUE_STATES,
    CallbackToken,
    EnqueueRequest,
    InsertOpts,
    JobRow,
    JobState,
    UniqueOpts,
    kind_for,
)
from awa_cli.plugins.marker import hookimpl
from awa_cli.results import (
    AwaError,
    CallbackNotFound,
    Cancel,
    JobNotFound,
    JobResult,
    RetryAfter,
    Snooze,
    StagingError,
    TerminalError,
    UniqueConflict,
    UnknownJobKind,
    ValidationError,
    WaitForCallback,
)
from awa_cli.worker.job import Job
from awa_cli.worker.runtime import Worker


__all__ = [
    "DEFAULT_UNIQUE_STATES",
    "App",
    "AsyncClient",
    "AwaError",
    "CallbackNotFound",
    "CallbackToken",
    "Cancel",
    "Client",
    "DeadLetter",
    "EnqueueRequest",
    "InsertOpts",
    "Job",
    "JobEvent",
    "JobNotFound",
    "JobResult",
    "JobRow",
    "JobState",
    "RescueReason",
    "ResolveResult",
    "RetryAfter",
    "Snooze",
    "StagingError",
    "TerminalError",
    "UniqueConflict",
    "UniqueOpts",
    "UnknownJobKind",
    "ValidationError",
    "WaitForCallback",
    "Worker",
    "hookimpl",
    "insert",
    "insert_async",
    "kind_for",
]


def __getattr__(name: str) -> object:
    """``awa.testing`` (the test harness) without importing it explicitly."""
    if name == "testing":
        import importlib

        return importlib.import_module("awa_cli.testing")
    raise AttributeError(f"module 'awa_cli' has no attribute {name!r}")
