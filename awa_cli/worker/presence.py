"""The worker's row in ``awa.workers`` (migration 0005): who is running, for ``awa serve``.

Registered when the worker starts (host, pid, queues, the app's kinds with the first line of
each handler's docstring, awa's version), touched every ``heartbeat_interval`` with one
``UPDATE`` by primary key (and the number of running jobs, and since when and why its claims
fail, if they do: migration 0013), deleted when the worker stops.
A worker that dies leaves a row that readers ignore after ``defaults.WORKER_STALENESS``
seconds and the maintenance leader deletes. A failed write is logged and retried next beat:
presence never stops a worker from working.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import socket
import time
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

import psycopg

from awa_cli.db import workers as workers_table

if TYPE_CHECKING:
    from psycopg_pool import AsyncConnectionPool

    from awa_cli.app import App

log = logging.getLogger("awa.worker")


def _doc(fn: Any) -> str:
    text = (getattr(fn, "__doc__", None) or "").strip()
    return text.splitlines()[0].strip()[:200] if text else ""


def app_kinds(app: App) -> list[dict[str, Any]]:
    """The kinds ``app`` registers: kind, queue (None: the job's own) and the handler's doc."""
    return [
        {"kind": t.kind, "queue": t.queue, "doc": _doc(t.fn)}
        for t in sorted(app.tasks.values(), key=lambda t: t.kind)
    ]


def _version() -> str:
    from importlib import metadata

    try:
        return metadata.version("awa-worker")
    except metadata.PackageNotFoundError:
        return ""


class Presence:
    def __init__(
        self,
        pool: AsyncConnectionPool,
        app: App,
        queues: Mapping[str, int],
        running: Callable[[], int],
        interval: float,
        limits_digest: str | None = None,
        *,
        claims: Callable[[], tuple[float, str] | None] = lambda: None,
    ) -> None:
        self.pool = pool
        self.limits_digest = limits_digest  # the [limits] it enforces (worker/fleet.py)
        self.claims = claims  # (failing since, error) while claims fail (migration 0013)
        self.host = socket.gethostname()
        self.pid = os.getpid()
        self.id = f"{self.host}:{self.pid}:{int(time.time())}"
        self.queues = dict(queues)
        self.kinds = app_kinds(app)
        self.running = running
        self.interval = interval
        self.registered = False

    def _claims(self) -> dict[str, Any]:
        failure = self.claims()
        if failure is None:
            return {"failing_since": None, "claim_error": None}
        return {"failing_since": failure[0], "claim_error": failure[1]}

    def _params(self) -> dict[str, Any]:
        return {
            **self._claims(),
            "id": self.id,
            "host": self.host,
            "pid": self.pid,
            "queues": json.dumps(self.queues),
            "kinds": json.dumps(self.kinds),
            "running": self.running(),
            "version": _version(),
            "limits_digest": self.limits_digest,
        }

    async def beat(self) -> None:
        """Register (the first time, or after the row was pruned) or touch the row."""
        async with self.pool.connection() as conn:
            claims = self._claims()
            if self.registered and await workers_table.heartbeat(
                conn, self.id, self.running(), claims["failing_since"], claims["claim_error"]
            ):
                return
            await workers_table.register(conn, self._params())
            self.registered = True

    async def register_on(self, conn: psycopg.AsyncConnection[Any]) -> None:
        """Register on ``conn`` (in the caller's transaction: joining the fleet)."""
        await workers_table.register(conn, self._params())
        self.registered = True

    async def run(self, stopping: asyncio.Event) -> None:
        failing = False  # warn once per outage, not every beat (e.g. migration 0005 missing)
        while not stopping.is_set():
            try:
                await self.beat()
                failing = False
            except (psycopg.Error, OSError) as exc:
                if not failing:
                    log.warning("worker presence: %s", exc, extra={"action": "presence_failed"})
                failing = True
            try:
                await asyncio.wait_for(stopping.wait(), self.interval)
            except TimeoutError:
                pass

    async def leave(self) -> None:
        """Delete the row (best-effort: a row left behind expires)."""
        try:
            async with self.pool.connection(timeout=5) as conn:
                await workers_table.remove(conn, self.id)
        except Exception as exc:
            log.warning("worker presence: %s", exc, extra={"action": "presence_failed"})
