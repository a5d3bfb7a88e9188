"""NOTIFY channel names: one source each.

A queue's channel is the schema's ``awa.channel_for(queue)`` (``sql/0001_initial.sql``),
asked of the database (statement ``queue_channels``) rather than re-spelt here; the callback
channel is the constant below, passed to the SQL as a parameter.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import psycopg

from awa_cli.db.statements import SQL

CALLBACK_CHANNEL = "awa_callbacks"
"""Handlers waiting inside ``wait_for_callback`` are woken on this channel (payload: job id)."""

PERIODIC_CHANNEL = "awa_periodic"
"""The maintenance leader LISTENs here: a worker's upsert or a resume made a schedule due."""

CANCEL_CHANNEL = "awa_cancels"
"""An operator cancel notifies this channel from its transaction (payload: job id); a worker
running that job flips its ``job.is_cancelled()`` (architecture §15.6)."""

LIMIT_CHANNEL = "awa_limits"
"""A worker whose claim of a limited key came back short notifies this channel after the
results of that limit's jobs commit (payload: the sending worker's id, a space, the limit's
name): a slot is free, and every
worker whose queues the limit selects claims again (architecture §13)."""


async def listen(conn: psycopg.AsyncConnection[Any], channels: Iterable[str]) -> None:
    """LISTEN on each channel (the worker's listener; composed as identifiers)."""
    from psycopg import sql

    for channel in channels:
        await conn.execute(sql.SQL(SQL["listen"]).format(sql.Identifier(channel)))


async def queue_channels(
    conn: psycopg.AsyncConnection[Any], queues: Iterable[str]
) -> dict[str, str]:
    """Each queue's NOTIFY channel, from ``awa.channel_for``."""
    cur = await conn.execute(SQL["queue_channels"], {"queues": list(queues)})
    return {str(queue): str(channel) for queue, channel in await cur.fetchall()}


async def notify_limits(
    conn: psycopg.AsyncConnection[Any], sender: str, names: Iterable[str]
) -> None:
    """Tell every worker that slots of the limits ``names`` freed (one NOTIFY each, payload
    ``"<sender> <name>"``: the sender, whose own runners were woken already, ignores it)."""
    await conn.execute(
        SQL["notify_limits"], {"channel": LIMIT_CHANNEL, "sender": sender, "names": list(names)}
    )


def limit_payload(payload: str) -> tuple[str, str]:
    """(sender, limit name) of a ``LIMIT_CHANNEL`` payload."""
    sender, _, name = payload.partition(" ")
    return sender, name
