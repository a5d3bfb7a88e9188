"""Waiting for jobs to finish (``AsyncClient.wait_for_job``): one LISTEN connection per
client, shared by every concurrent waiter, and batched statements.

A waiter registers its job id; the client's waiting loop marks the new ids awaited (one
statement), then reads them (one statement) and resolves the finished ones. The finishing
transaction of an awaited job sends a NOTIFY on ``awa_job_done`` with the id
(``sql/0004_progress_history.sql``); the loop reads the notified ids again. Polling all
waited ids every ``poll_interval`` seconds is only the backstop (a dropped connection, a
notification lost while reconnecting).

Order matters: the connection LISTENs before any id is marked, and an id is read after it is
marked, so a job that finishes at any moment is either seen finished by the read or notified.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Iterable
from typing import Any

import psycopg
from psycopg import sql
from psycopg.rows import dict_row
from psycopg_pool import AsyncConnectionPool

from awa_cli import defaults
from awa_cli.db.statements import SQL
from awa_cli.dead_letters import DeadLetter
from awa_cli.errors import JobNotFound
from awa_cli.jobs import JobRow, JobState

log = logging.getLogger("awa.client")

JOB_DONE_CHANNEL = "awa_job_done"
"""The one channel the end of an awaited job is announced on (payload: the job id)."""

_FINISHED = frozenset({JobState.COMPLETED, JobState.FAILED, JobState.CANCELLED})


class JobWaiters:
    """The waiters of one client: futures by job id, one LISTEN connection, one loop."""

    def __init__(
        self, dsn: str, pool: AsyncConnectionPool, poll_interval: float = defaults.WAIT_POLL
    ) -> None:
        self.dsn = dsn
        self.pool = pool
        self.poll_interval = poll_interval
        self._waiting: dict[int, list[asyncio.Future[JobRow]]] = {}
        self._unmarked: set[int] = set()
        self._notified: set[int] = set()
        self._wake = asyncio.Event()
        self._listening = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self.checks = 0  # wait_check statements run (tests: the backstop was not needed)

    async def wait(self, job_id: int, timeout: float | None) -> JobRow:
        """The job's row once it is completed, failed or cancelled (TimeoutError, JobNotFound)."""
        future: asyncio.Future[JobRow] = asyncio.get_running_loop().create_future()
        self._waiting.setdefault(job_id, []).append(future)
        self._unmarked.add(job_id)
        self._start()
        self._wake.set()
        try:
            return await asyncio.wait_for(future, timeout)
        finally:
            futures = self._waiting.get(job_id, [])
            if future in futures:
                futures.remove(future)
            if not futures:
                self._waiting.pop(job_id, None)

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError, TimeoutError):
                await asyncio.wait_for(self._task, 5)
            self._task = None

    def _start(self) -> None:
        if self._task is None or self._task.done():
            self._task = asyncio.get_running_loop().create_task(self._run(), name="awa-waiters")

    async def _run(self) -> None:
        delay = 0.1
        while True:
            try:
                conn = await psycopg.AsyncConnection.connect(
                    self.dsn, autocommit=True, connect_timeout=10
                )
            except (psycopg.OperationalError, OSError) as exc:
                log.warning("wait_for_job cannot listen: %s", exc, extra={"action": "wait_listen"})
                await asyncio.sleep(delay)
                delay = min(delay * 2, self.poll_interval)
                continue
            delay = 0.1
            try:
                await self._serve(conn)
            except (psycopg.OperationalError, psycopg.InterfaceError, OSError) as exc:
                log.warning("wait_for_job lost its connection: %s", exc)
            finally:
                self._listening.clear()
                await conn.close()
            self._unmarked |= set(self._waiting)  # read everything again after a reconnect

    async def _serve(self, conn: psycopg.AsyncConnection[Any]) -> None:
        await conn.execute(sql.SQL(SQL["listen"]).format(sql.Identifier(JOB_DONE_CHANNEL)))
        self._listening.set()
        reader = asyncio.get_running_loop().create_task(self._read(conn))
        try:
            while not reader.done():
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._wake.wait(), self.poll_interval)
                self._wake.clear()
                await self._check_round()
            reader.result()  # the reader's error, if it failed
        finally:
            reader.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await reader

    async def _read(self, conn: psycopg.AsyncConnection[Any]) -> None:
        async for notify in conn.notifies():
            with contextlib.suppress(ValueError):
                job_id = int(notify.payload)
                if job_id in self._waiting:
                    self._notified.add(job_id)
                    self._wake.set()
        self._wake.set()

    async def _check_round(self) -> None:
        """Mark the new ids, then read the new, the notified (or, on a backstop tick, all)."""
        new, self._unmarked = self._unmarked & set(self._waiting), set()
        notified, self._notified = self._notified, set()
        ids = (new | notified) if (new or notified) else set(self._waiting)
        if not ids:
            return
        async with self.pool.connection() as conn:
            if new:
                await conn.execute(SQL["wait_mark"], {"ids": sorted(new)})
            await self._check(conn, ids)

    async def _check(self, conn: psycopg.AsyncConnection[Any], ids: Iterable[int]) -> None:
        wanted = sorted(ids)
        self.checks += 1
        async with conn.cursor(row_factory=dict_row) as cur:
            await cur.execute(SQL["wait_check"], {"ids": wanted})
            rows = {r["id"]: JobRow.from_record(r) for r in await cur.fetchall()}
            missing = [i for i in wanted if i not in rows]
            dead: dict[int, JobRow] = {}
            if missing:
                await cur.execute(SQL["wait_check_dead"], {"ids": missing})
                dead = {r["id"]: DeadLetter.from_record(r) for r in await cur.fetchall()}
        for job_id in wanted:
            row = rows.get(job_id) or dead.get(job_id)
            if row is None:
                self._resolve(job_id, exc=JobNotFound(f"job {job_id} not found"))
            elif row.state in _FINISHED:
                self._resolve(job_id, row=row)

    def _resolve(
        self, job_id: int, row: JobRow | None = None, exc: BaseException | None = None
    ) -> None:
        for future in self._waiting.pop(job_id, []):
            if future.done():
                continue
            if exc is not None:
                future.set_exception(exc)
            else:
                future.set_result(row)  # type: ignore[arg-type]
