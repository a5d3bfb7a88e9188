"""The gateway of ``awa.limits``, ``awa.limit_starts`` as read from outside the claim, and the
limits digest of ``awa.workers`` (statements in ``sql/claim_limits.sql``): the announcement
(write and read), why one job waits (``AsyncClient.limit_status``), the leader's waiting
counts, and the fleet's digests (architecture §13). The claim's own statements run in ``outcomes/claims.py``."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import psycopg
from psycopg.rows import DictRow, dict_row, tuple_row

from awa_cli.db.dependencies import parents_of
from awa_cli.db.statements import SQL
from awa_cli.limits import FLEET_LOCK_CLASS, Limit, wait_reason
from awa_cli.workflows import blocked_reason


# ``limit_publish``'s array parameters, one per Limit field.
_PUBLISHED = (
    ("names", "name"),
    ("kinds", "kind"),
    ("queues", "queue"),
    ("keys", "key"),
    ("max", "max_running"),
    ("rate_n", "rate_count"),
    ("rate_w", "rate_window"),
)


async def publish(conn: psycopg.AsyncConnection[Any], limits: Iterable[Limit]) -> None:
    """Replace ``awa.limits`` with ``limits``."""
    chosen = list(limits)
    params = {name: [getattr(lim, field) for lim in chosen] for name, field in _PUBLISHED}
    await conn.execute(SQL["limit_publish"], params)


async def announced(conn: psycopg.AsyncConnection[Any]) -> list[Limit]:
    """The limits in ``awa.limits``, by name."""
    async with conn.cursor(row_factory=tuple_row) as cur:
        await cur.execute(SQL["limits_announced"])
        rows = await cur.fetchall()
    return [
        Limit(
            name=name,
            key=key,
            max_running=int(max_running),
            kind=kind,
            queue=queue,
            rate_count=rate_count,
            rate_window=rate_window,
        )
        for name, kind, queue, key, max_running, rate_count, rate_window in rows
    ]


async def lock_fleet(conn: psycopg.AsyncConnection[Any]) -> None:
    """Serialise workers joining the fleet (held until the transaction ends)."""
    await conn.execute(SQL["limits_fleet_lock"], {"lock_class": FLEET_LOCK_CLASS})


async def live_digests(conn: psycopg.AsyncConnection[Any], stale: float) -> list[DictRow]:
    """Every live worker's id, host, pid and limits digest (NULL: a worker from before
    migration 0009), oldest first."""
    async with conn.cursor(row_factory=dict_row) as cur:
        await cur.execute(SQL["limits_live_digests"], {"stale": stale})
        return await cur.fetchall()


async def explain(conn: psycopg.AsyncConnection[Any], job_id: int) -> dict[str, Any] | None:
    """The ``limit_explain`` row of ``job_id`` plus its ``reason`` (None: no such job): what
    keeps it waiting (:func:`~awa_cli.limits.wait_reason`), or for a blocked job the parents
    not yet completed (architecture §16)."""
    async with conn.cursor(row_factory=dict_row) as cur:
        await cur.execute(SQL["limit_explain"], {"id": job_id})
        record = await cur.fetchone()
    if record is None:
        return None
    out = dict(record)
    out["reason"] = wait_reason(out, out.pop("now"))
    if out["state"] == "blocked":
        parents = await parents_of(conn, job_id)
        waiting_on = [(p["id"], p["state"]) for p in parents if p["state"] != "completed"]
        out["reason"] = blocked_reason(waiting_on)
    return out


async def waiting(conn: psycopg.AsyncConnection[Any]) -> dict[str, int]:
    """Per announced limit, the due available jobs whose key is at its limit."""
    rows = await (await conn.execute(SQL["limit_waiting"])).fetchall()
    return {name: int(count) for name, count in rows}
