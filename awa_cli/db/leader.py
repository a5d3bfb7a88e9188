"""The maintenance leader's statements: the session advisory lock that elects it, its
keepalive, and naming the leader in its ``awa.workers`` row (``sql/maintenance.sql``,
``sql/workers.sql``). The lock is held by the session, so it dies with the process or the
connection; ``awa_cli.maintenance`` runs the loop."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import psycopg

from awa_cli.db.statements import SQL


async def try_lock(conn: psycopg.AsyncConnection[Any], key: int) -> bool:
    """Take the leader lock on this session if it is free (never waits)."""
    row = await (await conn.execute(SQL["leader_try_lock"], {"key": key})).fetchone()
    return bool(row and row[0])


async def keepalive(conn: psycopg.AsyncConnection[Any]) -> None:
    await conn.execute(SQL["leader_keepalive"])


async def unlock(conn: psycopg.AsyncConnection[Any], key: int) -> None:
    await conn.execute(SQL["leader_unlock"], {"key": key})


async def mark_worker(conn: psycopg.AsyncConnection[Any], params: Mapping[str, Any]) -> int:
    """Record the lock session's backend pid in this process's worker row; the rows marked
    (0 while the row is not registered yet)."""
    return (await conn.execute(SQL["leader_mark_worker"], params)).rowcount


async def prune_limit_starts(conn: psycopg.AsyncConnection[Any]) -> None:
    """Forget rate-limit starts older than their window."""
    await conn.execute(SQL["limit_starts_prune"])


async def prune_workers(conn: psycopg.AsyncConnection[Any], stale: float) -> None:
    """Delete the ``awa.workers`` rows of processes silent for ``stale`` seconds."""
    await conn.execute(SQL["worker_prune"], {"stale": stale})


async def jobs_dead_tuples(conn: psycopg.AsyncConnection[Any]) -> tuple[int, bool]:
    """awa.jobs's dead row versions (cumulative statistics) and whether we may vacuum it."""
    row = await (await conn.execute(SQL["jobs_dead_tuples"])).fetchone()
    return (int(row[0]), bool(row[1])) if row else (0, False)


async def vacuum_jobs(conn: psycopg.AsyncConnection[Any]) -> None:
    """``VACUUM awa.jobs`` (``conn`` in autocommit: VACUUM runs outside a transaction)."""
    await conn.execute(SQL["vacuum_jobs"])
