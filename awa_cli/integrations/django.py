"""Transactional enqueue with Django (extra ``django``; PostgreSQL backend on psycopg 3).

::

    from django.db import transaction
    from awa_cli.integrations.django import insert

    with transaction.atomic():
        order.save()
        insert(SendReceipt(order_id=order.id), queue="email")
    # committed with the order; an exception inside atomic() rolls both back

``using`` names the database alias (``DATABASES`` key). Inside ``transaction.atomic()`` the
job joins that transaction; outside one Django is in autocommit mode and the insert commits
at once, like any other query. The options are those of :func:`awa_cli.insert`.
"""

from __future__ import annotations

from typing import Any

import psycopg
from django.db import connections
from psycopg.types.json import JsonbLoader, JsonLoader

from awa_cli import AwaError, JobRow
from awa_cli import insert as insert_on

__all__ = ["insert"]


def insert(args: Any, using: str = "default", **opts: Any) -> JobRow:
    """Enqueue ``args`` on Django's connection ``using``, in its current transaction."""
    connection = connections[using]
    if connection.vendor != "postgresql":
        raise AwaError(f"database {using!r} is {connection.vendor}: awa needs PostgreSQL")
    connection.ensure_connection()
    raw = connection.connection
    if not isinstance(raw, psycopg.Connection):
        raise AwaError(
            f"database {using!r} runs on {type(raw).__module__}: awa needs psycopg 3 "
            "(pip install 'psycopg[binary]'; Django uses it when it is installed)"
        )
    # Django registers its own loaders on the connection (jsonb as text, for its JSONField);
    # the job row is read with psycopg's defaults instead, on a cursor of awa's own.
    return insert_on(_AwaView(raw), args, **opts)  # type: ignore[arg-type]


class _AwaView:
    """Django's psycopg connection as awa's insert sees it: the same session and transaction,
    but cursors that decode jsonb as psycopg does by default (Django registers a text loader
    for its JSONField) and bind parameters on the server (Django's cursors bind on the
    client). Everything else is the connection itself."""

    def __init__(self, raw: psycopg.Connection[Any]) -> None:
        self._raw = raw

    def cursor(self) -> psycopg.Cursor[Any]:
        cur: psycopg.Cursor[Any] = psycopg.Cursor(self._raw)
        cur.adapters.register_loader("jsonb", JsonbLoader)
        cur.adapters.register_loader("json", JsonLoader)
        return cur

    def __getattr__(self, name: str) -> Any:
        return getattr(self._raw, name)
