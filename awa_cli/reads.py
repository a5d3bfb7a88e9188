"""The reads (and the audit write) behind ``awa serve``: functions taking the client first
that ``client.py`` binds as :class:`~awa_cli.client.AsyncClient` methods.

``awa_cli/serve/`` reads only through these and the client's public methods, so it holds no
SQL (STYLE.md "The web surface"). Every read is bounded and takes no lock (see
:mod:`awa_cli.db.dashboard`), so a dashboard left open does not hold up workers.
"""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any

import psycopg

from awa_cli import defaults
from awa_cli.audit import AuditEntry
from awa_cli.db import audit as audit_table
from awa_cli.db import dashboard
from awa_cli.db import workers as workers_table
from awa_cli.enqueue import positive_limit
from awa_cli.jobs import JobRow, JobState
from awa_cli.results import ValidationError

if TYPE_CHECKING:
    from awa_cli.client import AsyncClient

AUDIT_RESULTS = ("ok", "refused", "failed")


@dataclass(frozen=True)
class JobCount:
    """How many jobs one queue holds in one state; ``oldest_available_seconds`` is the age of
    its oldest job that could run now (available states only, else None); ``estimated`` when
    the count comes from a sample of a large table (terminal states only)."""

    queue: str
    state: str
    count: int
    oldest_available_seconds: float | None
    estimated: bool = False


@dataclass(frozen=True)
class WorkerInfo:
    """One live worker process (a row of ``awa.workers`` heartbeated in the last 30 s)."""

    id: str
    host: str
    pid: int
    queues: dict[str, int]
    kinds: list[dict[str, Any]]
    started_at: datetime
    heartbeat_at: datetime
    heartbeat_age_seconds: float
    running: int
    version: str
    # Claims failing (migration 0013): since when and the last error; None while they work.
    claim_failing_since: datetime | None = None
    claim_error: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "host": self.host,
            "pid": self.pid,
            "queues": dict(self.queues),
            "kinds": [k["kind"] for k in self.kinds],
            "started_at": self.started_at.isoformat(),
            "heartbeat_at": self.heartbeat_at.isoformat(),
            "heartbeat_age_seconds": round(self.heartbeat_age_seconds, 3),
            "running": self.running,
            "version": self.version,
            "claim_failing_since": (
                self.claim_failing_since.isoformat() if self.claim_failing_since else None
            ),
            "claim_error": self.claim_error,
        }


@dataclass(frozen=True)
class KindInfo:
    """A kind on one queue: the live workers that run it, its handler's one-line doc, and its
    jobs that could run now. ``unhandled`` when it has such jobs but no live worker runs it."""

    kind: str
    queue: str
    doc: str = ""
    workers: list[str] = field(default_factory=list)
    available: int = 0

    @property
    def unhandled(self) -> bool:
        return self.available > 0 and not self.workers

    def to_json(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "queue": self.queue,
            "doc": self.doc,
            "workers": list(self.workers),
            "available": self.available,
            "unhandled": self.unhandled,
        }


def kinds_table(workers: list[WorkerInfo], available: list[dict[str, Any]]) -> list[KindInfo]:
    """Join what live workers run with the kinds that have jobs waiting (pure)."""
    table: dict[tuple[str, str], KindInfo] = {}
    for w in workers:
        for k in w.kinds:
            queues = [k["queue"]] if k.get("queue") in w.queues else list(w.queues)
            for queue in queues:
                info = table.setdefault(
                    (k["kind"], queue), KindInfo(k["kind"], queue, k.get("doc") or "")
                )
                info.workers.append(w.id)
    for row in available:
        key = (row["kind"], row["queue"])
        old = table.get(key) or KindInfo(row["kind"], row["queue"])
        table[key] = KindInfo(old.kind, old.queue, old.doc, old.workers, int(row["available"]))
    return sorted(table.values(), key=lambda k: (not k.unhandled, k.queue, k.kind))


def _check_state(state: JobState | str | None) -> str | None:
    if state is None:
        return None
    try:
        return str(JobState(state))
    except ValueError:
        raise ValidationError("state", f"unknown job state {state!r}") from None


async def pending_migrations(self: AsyncClient) -> list[str]:
    """Migrations this awa ships that the database has not applied (``["0002_periodic"]``);
    empty when the schema is current. Raises ``psycopg.OperationalError`` when the
    database cannot be reached."""
    from awa_cli.db import migrations

    def pending() -> list[str]:
        with psycopg.connect(self.dsn, autocommit=True, connect_timeout=5) as conn:
            return [
                f"{s.version:04d}_{s.name}" for s in migrations.status(conn) if s.applied_at is None
            ]

    return await asyncio.to_thread(pending)


async def check_ready(self: AsyncClient, timeout: float = 3.0) -> list[str]:
    """Whether this client can work now: one round trip on a pooled connection (waiting
    at most ``timeout`` seconds for one; raises ``psycopg.OperationalError`` when the
    database cannot be reached), then the pending migrations (``pending_migrations``)."""
    from awa_cli.db.pools import ping

    pool = await self.ensure_open()
    await ping(pool, timeout)
    return await self.pending_migrations()


async def job_counts(self: AsyncClient) -> list[JobCount]:
    """Jobs per (queue, state), ordered by queue then state: exact for the unfinished
    states; on a large table the terminal states are estimates (``estimated``)."""
    pool = await self.ensure_open()
    async with pool.connection() as conn:
        rows = await dashboard.job_counts(conn)
    return [
        JobCount(r.queue, r.state, r.count, r.oldest_available_seconds, r.estimated) for r in rows
    ]


async def throughput(self: AsyncClient, queue: str | None = None) -> list[dict[str, Any]]:
    """Completed and failed jobs per minute over the last hour, oldest minute first:
    ``[{"minute": datetime, "completed": n, "failed": n}]`` (minutes with none omitted);
    of one ``queue`` when given (its jobs dead-lettered in the hour count as failed)."""
    pool = await self.ensure_open()
    async with pool.connection() as conn:
        rows = await dashboard.throughput(conn, queue)
    minutes: dict[datetime, dict[str, Any]] = {}
    for minute, state, count in rows:
        minutes.setdefault(minute, {"minute": minute, "completed": 0, "failed": 0})[state] = count
    return [minutes[m] for m in sorted(minutes)]


async def running_by_worker(self: AsyncClient, queue: str) -> dict[str, int]:
    """One queue's running jobs per worker process: ``{"host:pid": n}`` (as the jobs'
    ``attempted_by`` names them)."""
    pool = await self.ensure_open()
    async with pool.connection() as conn:
        return await dashboard.running_by_worker(conn, queue)


async def list_jobs_page(
    self: AsyncClient,
    *,
    state: JobState | str | None = None,
    kind: str | None = None,
    queue: str | None = None,
    tag: str | None = None,
    before_id: int | None = None,
    limit: int = 50,
) -> list[JobRow]:
    """Jobs newest first with ``id < before_id`` (keyset pagination: pass the last id of a
    page to get the next one); ``tag`` keeps jobs carrying that tag."""
    if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= 1000:
        raise ValidationError("limit", "must be an integer from 1 to 1000")
    if before_id is not None and (isinstance(before_id, bool) or not isinstance(before_id, int)):
        raise ValidationError("before_id", "must be an integer")
    filters = {
        "state": _check_state(state),
        "kind": kind,
        "queue": queue,
        "tag": tag,
        "before_id": before_id,
    }
    pool = await self.ensure_open()
    async with pool.connection() as conn:
        return [JobRow.from_record(r) for r in await dashboard.jobs_page(conn, filters, limit)]


async def list_workers(self: AsyncClient) -> list[WorkerInfo]:
    """The worker processes that heartbeated in the last 30 s, newest first."""
    pool = await self.ensure_open()
    async with pool.connection() as conn:
        rows = await workers_table.live(conn, defaults.WORKER_STALENESS)
    return [
        WorkerInfo(
            id=r["id"],
            host=r["host"],
            pid=int(r["pid"]),
            queues={str(k): int(v) for k, v in dict(r["queues"] or {}).items()},
            kinds=list(r["kinds"] or []),
            started_at=r["started_at"],
            heartbeat_at=r["heartbeat_at"],
            heartbeat_age_seconds=max(0.0, float(r["heartbeat_age_seconds"])),
            running=int(r["running"]),
            version=r["version"],
            claim_failing_since=r.get("claim_failing_since"),
            claim_error=r.get("claim_error"),
        )
        for r in rows
    ]


async def list_kinds(self: AsyncClient) -> list[KindInfo]:
    """Every kind a live worker runs, per queue, and every kind with jobs that could run
    now; those with such jobs and no live worker first (``unhandled``)."""
    workers = await self.list_workers()
    pool = await self.ensure_open()
    async with pool.connection() as conn:
        available = await workers_table.kinds_with_available(conn)
    return kinds_table(workers, available)


async def record_audit(
    self: AsyncClient,
    actor: str,
    action: str,
    target: str | None,
    result: str,
    detail: dict[str, Any] | None = None,
) -> AuditEntry:
    """Write one ``awa.audit_log`` entry (``result``: ``ok``, ``refused`` or ``failed``;
    the reason of a refusal or failure goes in ``detail``)."""
    if result not in AUDIT_RESULTS:
        raise ValidationError("result", f"expected one of {', '.join(AUDIT_RESULTS)}")
    params = {
        "actor": actor,
        "action": action,
        "target": target,
        "result": result,
        "detail": json.dumps(detail or {}),
    }
    pool = await self.ensure_open()
    async with pool.connection() as conn:
        return AuditEntry.from_record(await audit_table.insert(conn, params))


async def audit_log(
    self: AsyncClient,
    *,
    actor: str | None = None,
    action: str | None = None,
    target: str | None = None,
    since: datetime | None = None,
    limit: int = 100,
) -> list[AuditEntry]:
    """Recorded operator actions, newest first (``awa.audit_log``, architecture §15.4)."""
    return await _audit_entries(self, actor, action, target, since, positive_limit(limit))


async def list_audit(
    self: AsyncClient,
    *,
    actor: str | None = None,
    action: str | None = None,
    target: str | None = None,
    since: datetime | None = None,
    limit: int = 100,
    job_id: int | None = None,
) -> list[AuditEntry]:
    """Audit entries newest first, optionally of one actor, action or target, or since;
    ``job_id``: the entries of one job (targets ``job:<id>``, ``<id>``, ``id=<id>``)."""
    if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= 1000:
        raise ValidationError("limit", "must be an integer from 1 to 1000")
    if job_id is not None and (isinstance(job_id, bool) or not isinstance(job_id, int)):
        raise ValidationError("job_id", "expected an integer")
    targets = None if job_id is None else [f"job:{job_id}", str(job_id), f"id={job_id}"]
    return await _audit_entries(self, actor, action, target, since, limit, targets)


async def _audit_entries(
    self: AsyncClient,
    actor: str | None,
    action: str | None,
    target: str | None,
    since: datetime | None,
    limit: int,
    targets: list[str] | None = None,
) -> list[AuditEntry]:
    """The one audit query behind ``list_audit`` and ``audit_log`` (arguments checked)."""
    params: dict[str, Any] = {"actor": actor, "action": action, "target": target}
    params |= {"targets": targets, "since": since, "limit": limit}
    pool = await self.ensure_open()
    async with pool.connection() as conn:
        return [AuditEntry.from_record(r) for r in await audit_table.entries(conn, params)]


__all__ = ["JobCount", "KindInfo", "WorkerInfo", "kinds_table"]
