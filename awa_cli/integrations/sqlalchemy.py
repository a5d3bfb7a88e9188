"""Transactional enqueue with SQLAlchemy 2 (extra ``sqlalchemy``).

::

    from awa_cli.integrations.sqlalchemy import insert

    with Session(engine) as session, session.begin():
        session.add(order)
        insert(session, SendReceipt(order_id=order.id), queue="email")
    # committed together; a rollback drops both

    async with AsyncSession(async_engine) as session, session.begin():
        await insert(session, SendReceipt(order_id=1))

The engine must use the psycopg (3) dialect: ``postgresql+psycopg://...`` (the same URL
serves ``create_async_engine``). The job is inserted on the connection the session holds for
its current transaction (beginning one if none is open), with the same options as
:func:`awa_cli.insert` (``app=`` included where that accepts it).
"""

from __future__ import annotations

from collections.abc import Awaitable
from typing import Any, overload

import psycopg
from sqlalchemy.engine import Connection
from sqlalchemy.orm import Session

from awa_cli import AwaError, JobRow
from awa_cli import insert as insert_on
from awa_cli import insert_async as insert_on_async

try:  # the asyncio extension needs greenlet (sqlalchemy[asyncio]); sync use works without it
    from sqlalchemy.ext.asyncio import AsyncConnection, AsyncSession
except ImportError:  # pragma: no cover - depends on the installation
    AsyncConnection = AsyncSession = type("_NoAsyncSession", (), {})  # type: ignore[assignment,misc]

__all__ = ["insert"]

_DIALECT_HINT = "use the psycopg (3) dialect: a postgresql+psycopg:// URL"


@overload
def insert(
    session: AsyncSession | AsyncConnection, args: Any, **opts: Any
) -> Awaitable[JobRow]: ...


@overload
def insert(session: Session | Connection, args: Any, **opts: Any) -> JobRow: ...


def insert(
    session: Session | Connection | AsyncSession | AsyncConnection, args: Any, **opts: Any
) -> JobRow | Awaitable[JobRow]:
    """Enqueue ``args`` in ``session``'s current transaction.

    With a ``Session`` (or a ``Connection``) the job is inserted now and its ``JobRow``
    returned; with an ``AsyncSession`` (or an ``AsyncConnection``) the call returns an
    awaitable of the ``JobRow``. Bad options raise ``ValidationError`` before anything is
    written; a held unique key raises ``UniqueConflict`` (the transaction stays usable only if
    the caller used a savepoint, as with any failed statement in PostgreSQL).
    """
    if isinstance(session, (AsyncSession, AsyncConnection)):
        return _insert_async(session, args, opts)
    conn = session.connection() if isinstance(session, Session) else session
    driver = conn.connection.driver_connection
    if not isinstance(driver, psycopg.Connection):
        raise AwaError(
            f"awa needs a psycopg connection, got {type(driver).__name__}: {_DIALECT_HINT}"
        )
    return insert_on(driver, args, **opts)


async def _insert_async(
    session: AsyncSession | AsyncConnection, args: Any, opts: dict[str, Any]
) -> JobRow:
    conn = await session.connection() if isinstance(session, AsyncSession) else session
    raw = await conn.get_raw_connection()
    driver = raw.driver_connection
    if not isinstance(driver, psycopg.AsyncConnection):
        raise AwaError(
            f"awa needs an async psycopg connection, got {type(driver).__name__}: {_DIALECT_HINT}"
        )
    return await insert_on_async(driver, args, **opts)
