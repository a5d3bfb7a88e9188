"""Connection pools: the worker's two pools, and ``recheck`` for after a failure."""

from __future__ import annotations

import logging
import time
import weakref
from collections.abc import Awaitable, Callable
from typing import Any

from psycopg import AsyncConnection
from psycopg_pool import AsyncConnectionPool

from awa_cli.db.dsn import with_options

log = logging.getLogger("awa.worker")

# How long a claim, heartbeat or finalisation waits for a pooled connection before its
# retry loop tries again.
POOL_WAIT_SECONDS = 3.0


OnConnect = Callable[[AsyncConnection[Any]], Awaitable[None]]
"""Told of every new pooled connection (the worker's heartbeat beats after a reconnect)."""

DIRECT_MARK = "-c awa.direct=on"
"""Passed in every pool's ``options`` startup parameter; a connection on which the setting
is absent came through a pooler (PgBouncer drops the parameter with
``ignore_startup_parameters = options``), and gets psycopg's prepared statements turned off:
a transaction-mode pooler hands each statement to any server session, where a statement
prepared on another one does not exist."""

_said_pooler = False


async def _through_pooler(conn: AsyncConnection[Any]) -> bool:
    """A new pooled connection: prepared statements off when it came through a pooler.
    Returns whether it is direct."""
    global _said_pooler
    from awa_cli.db.statements import SQL

    cur = await conn.execute(SQL["pooler_mark"])
    row = await cur.fetchone()
    if row is not None and row[0] == "on":
        return True
    conn.prepare_threshold = None
    if not _said_pooler:
        _said_pooler = True
        log.info(
            "connected through a pooler: prepared statements are off",
            extra={"action": "pooler_detected"},
        )
    return False


async def _claims_durable_if_replicated(conn: AsyncConnection[Any]) -> None:
    """The claim pool runs with ``synchronous_commit = off``, except on a server that
    replicates synchronously: there a claim must reach the standby before a handler acts on
    it, or a failover could forget the claim and run the job again (docs/promises.md)."""
    from awa_cli.db.statements import SQL

    cur = await conn.execute(SQL["sync_standby_named"])
    row = await cur.fetchone()
    if row is not None and row[0]:
        await conn.execute(SQL["claims_wait_for_standby"])


def _configure(on_connect: OnConnect | None, claims: bool = False) -> OnConnect:
    async def configure(conn: AsyncConnection[Any]) -> None:
        if await _through_pooler(conn) and claims:
            await _claims_durable_if_replicated(conn)
        if on_connect is not None:
            await on_connect(conn)

    return configure


def worker_pool(dsn: str, queues: int, on_connect: OnConnect | None = None) -> AsyncConnectionPool:
    """The durable pool of a worker with ``queues`` queues: outcomes, callbacks, maintenance.

    Its sessions set ``awa.defer_notify`` (see ``OutcomeCore.defer_notify``)."""
    return AsyncConnectionPool(
        with_options(dsn, options=f"-c awa.defer_notify=on {DIRECT_MARK}"),
        min_size=2,
        # finalising (2 flushers, each a batch statement and a follow-up transaction),
        # maintenance, callbacks, hooks' clients
        max_size=10 + queues,
        open=False,
        kwargs={"autocommit": True},
        reconnect_timeout=0,  # never give up: the database may be restarting
        # reconnect_timeout=0 makes the pool drop a failed reconnect at once; a getconn
        # queued behind it then waits out its whole timeout (30 s by default) before the
        # caller's retry grows the pool again. A short timeout resumes within seconds.
        timeout=POOL_WAIT_SECONDS,
        configure=_configure(on_connect),
    )


def claim_pool(dsn: str, queues: int, on_connect: OnConnect | None = None) -> AsyncConnectionPool:
    """The pool for claims and heartbeats, which need no durable commit: a claim lost in a
    server crash only makes the job claimable again, and any completion's durable commit is
    ordered after its claim in the WAL. Outcomes use the durable pool."""
    return AsyncConnectionPool(
        with_options(dsn, options=f"-c synchronous_commit=off {DIRECT_MARK}"),
        min_size=1,
        max_size=queues + 1,
        open=False,
        kwargs={"autocommit": True},
        reconnect_timeout=0,
        timeout=POOL_WAIT_SECONDS,
        configure=_configure(on_connect, claims=True),
    )


IDLE_CHECK_SECONDS = 1.0
"""A client's pooled connection idle longer than this is tested (one empty round trip)
before it is handed out: after a database restart every idle connection is dead, and a
request must not be the one to find out (D6)."""

_returned_at: weakref.WeakKeyDictionary[AsyncConnection[Any], float] = weakref.WeakKeyDictionary()


async def _note_return(conn: AsyncConnection[Any]) -> None:
    _returned_at[conn] = time.monotonic()


async def _check_if_idle(conn: AsyncConnection[Any]) -> None:
    """The pool's ``check``: test a connection that sat idle; a broken one raises, and the
    pool discards it and hands out another (a fresh one if need be)."""
    if time.monotonic() - _returned_at.get(conn, float("-inf")) > IDLE_CHECK_SECONDS:
        await AsyncConnectionPool.check_connection(conn)


def client_pool(dsn: str, max_size: int) -> AsyncConnectionPool:
    """The pool of an ``AsyncClient`` (and so of ``awa serve``): connections idle for more
    than ``IDLE_CHECK_SECONDS`` are tested before use, so broken ones are discarded before a
    request sees them."""
    return AsyncConnectionPool(
        with_options(dsn, options=DIRECT_MARK),
        min_size=1,
        max_size=max_size,
        open=False,
        kwargs={"autocommit": True},
        check=_check_if_idle,
        reset=_note_return,
        configure=_configure(None),
    )


async def ping(pool: AsyncConnectionPool, timeout: float) -> None:
    """One round trip on a pooled connection, waiting at most ``timeout`` seconds for one
    (raises ``psycopg.OperationalError``, ``PoolTimeout`` included, when the database cannot
    be reached)."""
    from awa_cli.db.statements import SQL

    async with pool.connection(timeout=timeout) as conn:
        await conn.execute(SQL["ping"])


async def recheck(pool: Any) -> None:
    """Test the pool's idle connections and replace the broken ones (never raises)."""
    try:
        await pool.check()
    except Exception as exc:
        log.debug("pool check failed: %s", exc)
