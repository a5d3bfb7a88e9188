"""The synchronous twins of :class:`awa_cli.reads.InspectReads` (the dashboard's reads and the
audit log), mixed into :class:`awa_cli.sync_client.Client`; each runs the async method of its
own name on the client's loop (``tests/unit/test_sync_client.py`` keeps them in step)."""

from __future__ import annotations

from collections.abc import Coroutine
from datetime import datetime
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

if TYPE_CHECKING:
    from awa_cli.admin import AuditEntry
    from awa_cli.client import AsyncClient
    from awa_cli.jobs import JobRow, JobState
    from awa_cli.reads import JobCount, KindInfo, WorkerInfo

T = TypeVar("T")


class _Runner(Protocol):  # what Client provides (its loop thread)
    def run(self, coro: Coroutine[Any, Any, T]) -> T: ...


class SyncInspectReads:
    _async: AsyncClient
    _runner: _Runner

    def pending_migrations(self) -> list[str]:
        """Migrations this awa ships that the database has not applied."""
        return self._runner.run(self._async.pending_migrations())

    def job_counts(self) -> list[JobCount]:
        """Jobs per (queue, state); terminal states of a large table are estimates."""
        return self._runner.run(self._async.job_counts())

    def throughput(self) -> list[dict[str, Any]]:
        """Completed and failed jobs per minute over the last hour."""
        return self._runner.run(self._async.throughput())

    def list_jobs_page(
        self,
        *,
        state: JobState | str | None = None,
        kind: str | None = None,
        queue: str | None = None,
        tag: str | None = None,
        before_id: int | None = None,
        limit: int = 50,
    ) -> list[JobRow]:
        """Jobs newest first with ``id < before_id`` (keyset pagination)."""
        return self._runner.run(
            self._async.list_jobs_page(
                state=state, kind=kind, queue=queue, tag=tag, before_id=before_id, limit=limit
            )
        )

    def list_workers(self) -> list[WorkerInfo]:
        """The worker processes that heartbeated in the last 30 s."""
        return self._runner.run(self._async.list_workers())

    def list_kinds(self) -> list[KindInfo]:
        """Kinds live workers run and kinds with jobs ready; unhandled ones first."""
        return self._runner.run(self._async.list_kinds())

    def record_audit(
        self,
        actor: str,
        action: str,
        target: str | None,
        result: str,
        detail: dict[str, Any] | None = None,
    ) -> AuditEntry:
        """Write one ``awa.audit_log`` entry."""
        return self._runner.run(self._async.record_audit(actor, action, target, result, detail))

    def list_audit(
        self,
        *,
        actor: str | None = None,
        action: str | None = None,
        target: str | None = None,
        since: datetime | None = None,
        limit: int = 100,
    ) -> list[AuditEntry]:
        """Audit entries newest first, optionally of one actor, action or target, or since."""
        return self._runner.run(
            self._async.list_audit(
                actor=actor, action=action, target=target, since=since, limit=limit
            )
        )
