"""The gateway of ``awa.audit_log`` (statements in ``sql/audit.sql``): one entry written
outside a transition (a login, a refusal at the guard), and the listing."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import psycopg
from psycopg.rows import DictRow, dict_row

from awa_cli.db.statements import SQL


async def insert(conn: psycopg.AsyncConnection[Any], params: Mapping[str, Any]) -> DictRow:
    """Write one entry (``actor``, ``action``, ``target``, ``result``, ``detail`` as JSON)."""
    async with conn.cursor(row_factory=dict_row) as cur:
        await cur.execute(SQL["audit_insert"], params)
        row = await cur.fetchone()
    assert row is not None  # INSERT ... RETURNING
    return row


async def entries(conn: psycopg.AsyncConnection[Any], params: Mapping[str, Any]) -> list[DictRow]:
    """Entries newest first, filtered by ``actor``, ``action``, ``target`` and ``since``."""
    async with conn.cursor(row_factory=dict_row) as cur:
        await cur.execute(SQL["audit_list"], params)
        return await cur.fetchall()
