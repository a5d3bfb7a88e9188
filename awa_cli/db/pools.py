"""Connection pools: the worker's two pools, and ``recheck`` for after a failure."""

from __future__ import annotations

import logging
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


def worker_pool(dsn: str, queues: int, on_connect: OnConnect | None = None) -> AsyncConnectionPool:
    """The durable pool of a worker with ``queues`` queues: outcomes, callbacks, maintenance.

    Its sessions set ``awa.defer_notify`` (see ``OutcomeCore.defer_notify``)."""
    return AsyncConnectionPool(
        with_options(dsn, options="-c awa.defer_notify=on"),
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
        configure=on_connect,
    )


def claim_pool(dsn: str, queues: int, on_connect: OnConnect | None = None) -> AsyncConnectionPool:
    """The pool for claims and heartbeats, which need no durable commit: a claim lost in a
    server crash only makes the job claimable again, and any completion's durable commit is
    ordered after its claim in the WAL. Outcomes use the durable pool."""
    return AsyncConnectionPool(
        with_options(dsn, options="-c synchronous_commit=off"),
        min_size=1,
        max_size=queues + 1,
        open=False,
        kwargs={"autocommit": True},
        reconnect_timeout=0,
        timeout=POOL_WAIT_SECONDS,
        configure=on_connect,
    )


async def recheck(pool: Any) -> None:
    """Test the pool's idle connections and replace the broken ones (never raises)."""
    try:
        await pool.check()
    except Exception as exc:
        log.debug("pool check failed: %s", exc)
