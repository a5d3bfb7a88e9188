"""awa: a PostgreSQL-backed background job queue.

The public API; everything else is internal::

    import awa_cli as awa

    app = awa.App()

    @app.task(SendEmail, queue="email")
    async def send_email(job: awa.Job) -> None: ...
"""

from __future__ import annotations

from awa_cli.app import App
from awa_cli.batches import Batch, BatchCounts, BatchRow
from awa_cli.client import AsyncClient, ResolveResult, insert, insert_async
from awa_cli.client_batches import insert_batch, insert_batch_async
from awa_cli.dead_letters import DeadLetter
from awa_cli.events import JobEvent, RescueReason
from awa_cli.enqueue import DEFAULT_UNIQUE_STATES, EnqueueRequest, InsertOpts, UniqueOpts
from awa_cli.jobs import CallbackToken, JobRow, JobState
from awa_cli.jsonvalues import kind_for
from awa_cli.periodic import PeriodicJob
from awa_cli.plugins.marker import hookimpl
from awa_cli.plugins import ambient as _ambient
from awa_cli.errors import (
    AppNotFound,
    AwaError,
    BatchNotFound,
    BatchSealed,
    CallbackNotFound,
    CallbackWaitAborted,
    ConfigError,
    DatabaseUnusable,
    EmbeddedError,
    EmbeddedNotRunning,
    ScheduleError,
    SchemaTooNew,
    SignatureError,
    UnknownKindRefused,
    FollowUpError,
    Interrupted,
    InvalidJobState,
    JobNotFound,
    PeriodicNotFound,
    QueueNotFound,
    RegistrationError,
    ResolutionRefused,
    ShutdownInterrupted,
    StagingError,
    TerminalError,
    UniqueConflict,
    UnknownJobKind,
    ValidationError,
    WorkflowNotFound,
)
from awa_cli.sync_client import Client
from awa_cli.results import Cancel, JobResult, RetryAfter, Snooze, WaitForCallback
from awa_cli.worker.job import Job
from awa_cli.worker.runtime import Worker
from awa_cli.workflow_ops import insert_workflow, insert_workflow_async
from awa_cli.workflows import ParentInfo, Step, Workflow, WorkflowRun


__all__ = [
    "DEFAULT_UNIQUE_STATES",
    "App",
    "AppNotFound",
    "AsyncClient",
    "AwaError",
    "Batch",
    "BatchCounts",
    "BatchNotFound",
    "BatchRow",
    "BatchSealed",
    "CallbackNotFound",
    "CallbackToken",
    "CallbackWaitAborted",
    "Cancel",
    "Client",
    "ConfigError",
    "DatabaseUnusable",
    "DeadLetter",
    "EmbeddedError",
    "EmbeddedNotRunning",
    "EnqueueRequest",
    "FollowUpError",
    "InsertOpts",
    "Interrupted",
    "InvalidJobState",
    "Job",
    "JobEvent",
    "JobNotFound",
    "JobResult",
    "JobRow",
    "JobState",
    "ParentInfo",
    "PeriodicJob",
    "PeriodicNotFound",
    "QueueNotFound",
    "RegistrationError",
    "RescueReason",
    "ResolutionRefused",
    "ResolveResult",
    "RetryAfter",
    "ScheduleError",
    "SchemaTooNew",
    "ShutdownInterrupted",
    "SignatureError",
    "Snooze",
    "StagingError",
    "Step",
    "TerminalError",
    "UniqueConflict",
    "UniqueOpts",
    "UnknownJobKind",
    "UnknownKindRefused",
    "ValidationError",
    "WaitForCallback",
    "Worker",
    "Workflow",
    "WorkflowNotFound",
    "WorkflowRun",
    "hookimpl",
    "insert",
    "insert_async",
    "insert_batch",
    "insert_batch_async",
    "insert_workflow",
    "insert_workflow_async",
    "kind_for",
]


def __getattr__(name: str) -> object:
    """``awa.testing`` (the test harness) without importing it explicitly."""
    if name == "testing":
        import importlib

        return importlib.import_module("awa_cli.testing")
    raise AttributeError(f"module 'awa_cli' has no attribute {name!r}")


_ambient.install()  # enqueue spans for an application tracing with OpenTelemetry
