"""Every error awa raises on purpose: :class:`AwaError` and its subclasses, in one place.

Pure: no I/O and no project imports, so every layer may use it. The modules that used to
define these classes re-import them from here, so their old import paths keep working;
``awa_cli`` exports every one (a test checks that none is missing).

The CLI maps them to exit codes in one funnel (``awa_cli/cli.py``): :class:`ConfigError` and
:class:`ValidationError` exit 2, :class:`JobNotFound`, :class:`CallbackNotFound` and
:class:`PeriodicNotFound` exit 4,
the rest exit 1.
"""

from __future__ import annotations


class AwaError(Exception):
    """Base class of every error awa raises on purpose."""


# -- bad input ------------------------------------------------------------------------------


class ValidationError(AwaError, ValueError):
    """Bad input (an insert option, a callback id, a payload); the message names the field."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field


class ConfigError(AwaError):
    """A config problem; the message is one line naming the file and the key.

    ``key`` is the key as shown in the message (``[queues.email] concurrency``), or None for
    problems with the file as a whole (missing, not TOML).
    """

    def __init__(self, message: str, *, key: str | None = None, source: str | None = None) -> None:
        super().__init__(f"{source}: {message}" if source else message)
        self.message = message
        self.key = key
        self.source = source


class RegistrationError(AwaError):
    """A task, hook or follow-up spec was registered wrongly (raised at import time)."""


# -- what the database holds ------------------------------------------------------------------


class UniqueConflict(AwaError):
    """A plain insert whose unique key is already held by another job."""

    def __init__(self, kind: str, existing_id: int | None = None) -> None:
        detail = f" (held by job {existing_id})" if existing_id is not None else ""
        super().__init__(f"a job of kind {kind!r} with the same unique key already exists{detail}")
        self.kind = kind
        self.existing_id = existing_id


class JobNotFound(AwaError, LookupError):
    """No job has this id (``get_job``, ``cancel``, ``retry`` of a missing id)."""


class WorkflowNotFound(JobNotFound):
    """No workflow has this id (``get_workflow``, ``cancel_workflow``, ``retry_workflow``)."""


class PeriodicNotFound(AwaError, LookupError):
    """No periodic schedule of that name (``awa cron``: exit 4)."""


class BatchNotFound(AwaError, LookupError):
    """No batch has this id (``get_batch``, ``awa batch show``: exit 4)."""


class BatchSealed(AwaError):
    """A member was added to a batch that is already sealed (architecture §16)."""


class QueueNotFound(AwaError, LookupError):
    """No queue of that name is known (no row in ``awa.queues``, no runnable job): ``awa
    serve`` answers 404 rather than creating one by pausing it."""


class CallbackNotFound(AwaError, LookupError):
    """No job is waiting on this callback id (unknown, already resolved, rescued, or a wrong run_lease)."""


class InvalidJobState(AwaError):
    """The job is not in a state the operation applies to."""


class UnknownJobKind(AwaError, LookupError):
    """The kind is not registered in the app at hand."""


class AppNotFound(AwaError, LookupError):
    """An ``[app] modules`` entry names a module or attribute that does not exist: a config
    error (exit 2 at the CLI), unlike a module that is found but raises while importing."""


class ResolutionRefused(AwaError):
    """The loaded app does not know the job's kind, so its follow-ups cannot be run."""


# -- raised from or around handlers -----------------------------------------------------------


class TerminalError(AwaError):
    """Raise from a handler to fail the job now, whatever attempts are left."""


class StagingError(TerminalError):
    """A handler-staged follow-up was rejected (validation, a limit, or staging after return)."""


class FollowUpError(AwaError):
    """A follow-up spec raised or its insert failed; the triggering transition was rolled back."""


class CallbackWaitAborted(AwaError):
    """The job was resolved, cancelled or rescued while its handler waited for a callback."""


class ShutdownInterrupted(AwaError):
    """The worker shut down before the handler finished (recorded as the attempt's error)."""


class Interrupted(AwaError):
    """Raise from a handler (or let ``job.raise_if_cancelled()`` raise it) to hand the job
    back. At shutdown the job becomes ``available`` again at once: the attempt is not counted,
    its progress and checkpoint are kept, and an error entry ``interrupted: shutdown`` is
    written. After a deadline, a rescue or an operator cancel the attempt is no longer this
    worker's and the job's state is what that decided. Raised with no cancellation at all it
    is an ordinary failure (retried, the attempt counted). ``reason`` is ``job.cancel_reason``
    when raised by ``raise_if_cancelled()``."""

    def __init__(self, reason: str | None = None) -> None:
        super().__init__(f"interrupted: {reason}" if reason else "interrupted")
        self.reason = reason


# -- the embedded server ----------------------------------------------------------------------


class DatabaseUnusable(AwaError):
    """The database cannot be used: unreachable, refusing, missing or not migrated."""


class EmbeddedNotRunning(DatabaseUnusable):
    """No database URL is configured and the embedded server is not running (exit 1): only
    ``awa db start`` starts a stopped one (``awa migrate`` also creates a new one)."""


class SchemaTooNew(DatabaseUnusable):
    """The database's awa schema was migrated by a newer awa than this one (exit 1): this
    code refuses to migrate it or to work on it."""


class ScheduleError(ValidationError):
    """A periodic schedule is invalid. ``schedule`` is its name, ``attribute`` the bad one
    (``cron``, ``timezone``, ``catch_up``, ``name``, ``kind``, ``args`` or an insert option)."""

    def __init__(self, schedule: str, attribute: str, reason: str) -> None:
        super().__init__(f"periodic {schedule!r} {attribute}", reason)
        self.schedule = schedule
        self.attribute = attribute
        self.reason = reason


class SignatureError(AwaError):
    """A callback request's signature is missing, malformed, outside the time window, or
    matches none of the keys. The message says which (it never contains a key)."""


class UnknownKindRefused(AwaError):
    """The client's app does not register the waiting job's kind, so the follow-ups that
    should commit with the resolution are unknown: refused (409), as ``awa callback`` refuses
    without ``--bare``. A client made without an app resolves bare and is never refused."""


class EmbeddedError(AwaError):
    """The embedded PostgreSQL could not be found, initialised, started or stopped."""


__all__ = [
    "AppNotFound",
    "AwaError",
    "BatchNotFound",
    "BatchSealed",
    "CallbackNotFound",
    "CallbackWaitAborted",
    "ConfigError",
    "DatabaseUnusable",
    "EmbeddedError",
    "EmbeddedNotRunning",
    "FollowUpError",
    "Interrupted",
    "InvalidJobState",
    "JobNotFound",
    "PeriodicNotFound",
    "QueueNotFound",
    "RegistrationError",
    "ResolutionRefused",
    "ScheduleError",
    "SchemaTooNew",
    "ShutdownInterrupted",
    "SignatureError",
    "StagingError",
    "TerminalError",
    "UniqueConflict",
    "UnknownJobKind",
    "UnknownKindRefused",
    "ValidationError",
    "WorkflowNotFound",
]
