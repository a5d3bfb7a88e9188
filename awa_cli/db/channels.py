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
