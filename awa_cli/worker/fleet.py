"""One set of limits for the fleet (architecture §13).

Each worker enforces the ``[limits.NAME]`` of its own config, so a fleet whose workers were
started with different limits enforces neither set (and ``awa job show``, the dashboard and
the gauge report whichever was announced last). So a worker joins the fleet in one
transaction, under an advisory lock: it reads the limits digest each live worker recorded
in ``awa.workers``; if one differs from its own it logs ERROR naming the difference against
the announced limits (``awa.limits``) and refuses to start (exit 2) — unless started with
``--accept-limits-change``, which replaces the announced limits (the other workers keep
enforcing theirs until restarted, and ``awa doctor`` fails until then). Otherwise it
announces its limits (a worker without limits announces nothing) and registers its
presence row with its digest.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import psycopg

from awa_cli import defaults
from awa_cli.db import limits as limits_table
from awa_cli.errors import ConfigError
from awa_cli.limits import Limit, limits_diff, limits_digest

if TYPE_CHECKING:
    from psycopg_pool import AsyncConnectionPool

    from awa_cli.worker.presence import Presence

log = logging.getLogger("awa.worker")

ACCEPT_FLAG = "--accept-limits-change"


async def join_fleet(
    pool: AsyncConnectionPool,
    presence: Presence,
    limits: Sequence[Limit],
    accept_change: bool = False,
) -> None:
    """Check this worker's limits against the live fleet's, announce them, register.
    Raises :class:`ConfigError` (exit 2) when they differ and ``accept_change`` is false."""
    digest = limits_digest(limits)
    async with pool.connection() as conn, conn.transaction():
        await limits_table.lock_fleet(conn)
        others = await limits_table.live_digests(conn, defaults.WORKER_STALENESS)
        # NULL: a worker from before migration 0009 (a rolling upgrade): it says nothing
        differ = [w for w in others if w["limits_digest"] not in (None, digest)]
        if differ:
            problem = await _difference(conn, limits, differ)
            if not accept_change:
                message = (
                    f"[limits] differ from those of the live fleet: {problem}; refusing to start"
                    f" (start with {ACCEPT_FLAG} to replace the fleet's limits)"
                )
                log.error(message, extra={"action": "limits_mismatch"})
                raise ConfigError(message, key="[limits]")
            log.warning(
                "replacing the fleet's limits (%s): %s; the workers started with the old ones"
                " enforce them until restarted, and awa doctor fails until then",
                ACCEPT_FLAG,
                problem,
                extra={"action": "limits_replaced"},
            )
        if limits or differ:
            await limits_table.publish(conn, limits)
        await presence.register_on(conn)


async def _difference(
    conn: psycopg.AsyncConnection[Any], limits: Sequence[Limit], differ: list[Any]
) -> str:
    """The differences against the announced limits, and which live workers differ."""
    who = ", ".join(f"{w['host']}:{w['pid']}" for w in differ[:5])
    who += f" and {len(differ) - 5} more" if len(differ) > 5 else ""
    try:
        async with conn.transaction():  # a savepoint: without SELECT on awa.limits, go on
            fleet = await limits_table.announced(conn)
    except psycopg.errors.InsufficientPrivilege:
        return f"live workers {who} enforce other limits"
    changes = limits_diff(limits, fleet) or ["the announced limits are this worker's own"]
    return "; ".join(changes) + f" (live workers {who} enforce other limits)"
