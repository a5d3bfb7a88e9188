"""A LISTEN/NOTIFY round trip: does a notification sent by one session reach a listener?

Behind a transaction-mode pooler (PgBouncer ``pool_mode = transaction`` and the like) it does
not: ``LISTEN`` lands on a server session that is handed to other clients after the
statement, and notifications never reach the client that asked for them. ``awa doctor``
reports the result; a worker runs the same check at start and, when it fails, relies on
polling alone (with a warning) instead of waiting for wake-ups that never come.
"""

from __future__ import annotations

import logging
import secrets
import time
from typing import Any

import psycopg
from psycopg import sql

from awa_cli.db.statements import SQL

DEFAULT_TIMEOUT = 2.0
log = logging.getLogger("awa.worker")


async def notifications_work(
    conn: psycopg.AsyncConnection[Any],
    *,
    poll_interval: float,
    timeout: float = DEFAULT_TIMEOUT,
    sender: psycopg.AsyncConnection[Any] | None = None,
) -> bool:
    """For a worker's listener at start: True when a notification reaches ``conn``; else a
    warning (``action=notify_unavailable``) that pickups now wait for the poll interval."""
    elapsed = await notify_round_trip(conn, sender=sender, timeout=timeout)
    if elapsed is not None:
        return True
    log.warning(
        "LISTEN/NOTIFY does not work on this connection: NOTIFY does not cross a "
        "transaction-mode pooler; falling back to polling every %gs (set [database] "
        "listen_url to a direct or session-mode URL for the listener; see `awa doctor`)",
        poll_interval,
        extra={"action": "notify_unavailable"},
    )
    return False


async def notify_round_trip(
    conn: psycopg.AsyncConnection[Any],
    *,
    sender: psycopg.AsyncConnection[Any] | None = None,
    timeout: float = DEFAULT_TIMEOUT,
) -> float | None:
    """Seconds from NOTIFY to its arrival on ``conn``, or None if it did not arrive in time.

    ``conn`` listens on a private channel (and stops listening before returning);
    ``sender`` (default: ``conn`` itself) sends one notification with a random payload.
    Both must be in autocommit mode, so the notification is delivered when it is sent.
    """
    channel = f"awa_roundtrip_{secrets.token_hex(6)}"
    payload = secrets.token_hex(8)
    ident = sql.Identifier(channel)
    await conn.execute(sql.SQL(SQL["listen_channel"]).format(channel=ident))
    try:
        started = time.monotonic()
        await (sender or conn).execute(
            SQL["notify_channel"], {"channel": channel, "payload": payload}
        )
        return await _arrival(conn, channel, payload, started, timeout)
    finally:
        await conn.execute(sql.SQL(SQL["unlisten_channel"]).format(channel=ident))


async def _arrival(
    conn: psycopg.AsyncConnection[Any], channel: str, payload: str, started: float, timeout: float
) -> float | None:
    left = max(0.0, started + timeout - time.monotonic())
    async for note in conn.notifies(timeout=left):  # ends by itself when the time is up
        if note.channel == channel and note.payload == payload:
            return time.monotonic() - started
    return None
