"""A FastAPI app that enqueues in the request's own database transaction.

The order row and its confirmation email commit together or not at all: the job is inserted
with :func:`awa_cli.integrations.sqlalchemy.insert` on the request's ``AsyncSession``.
Run it (``pip install fastapi uvicorn "awa-worker[sqlalchemy]"``)::

    export DATABASE_URL=postgresql+psycopg://awa@localhost/awa
    uvicorn examples.fastapi_app:app
    awa worker                      # in another shell, with [app] modules = ["examples.jobs"]

    curl -X POST 'localhost:8000/orders?email=ada@example.com'

External systems resolve callbacks at ``/callbacks/...`` once ``awa_cli.callbacks`` (the
helpers ``awa serve`` uses) is installed: see :func:`mount_callbacks`. FastAPI is not a
dependency of awa: only :func:`create_app` imports it, so :func:`place_order` (the part that
matters) works, and is tested, without it.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from typing import Any

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine, AsyncSession, create_async_engine

import awa_cli as awa
from awa_cli.integrations.sqlalchemy import insert
from examples.jobs import SendEmail
from examples.jobs import app as jobs

ORDERS_TABLE = "CREATE TABLE IF NOT EXISTS orders (id bigserial PRIMARY KEY, email text NOT NULL)"


async def place_order(session: AsyncSession, email: str) -> dict[str, Any]:
    """Store the order and enqueue its confirmation, in the session's current transaction."""
    result = await session.execute(
        text("INSERT INTO orders (email) VALUES (:email) RETURNING id"), {"email": email}
    )
    order_id = result.scalar_one()
    job = await insert(
        session,
        SendEmail(to=email, subject=f"Order {order_id} confirmed"),
        queue="email",  # the queue SendEmail is registered with in examples.jobs
        metadata={"order_id": order_id},
    )
    return {"order_id": order_id, "job_id": job.id}


def mount_callbacks(api: Any, dsn: str) -> bool:
    """Mount awa's signed HTTP callback routes under ``/callbacks`` if they are available.

    ``awa_cli.callbacks.asgi_app(client, keys)`` takes an app-bound ``AsyncClient`` (so
    follow-ups run and hooks fire as for ``awa callback``) and the signing keys, newest first;
    its routes are relative to the mount point.
    """
    try:
        from awa_cli.callbacks import asgi_app  # type: ignore[attr-defined]
    except ImportError:  # an awa without `awa serve`'s helpers
        return False
    keys = [k.encode() for k in os.environ.get("AWA_CALLBACK_KEYS", "").split(",") if k]
    if not keys:
        return False  # no signing key: callbacks stay off, as with `awa serve`
    api.mount("/callbacks", asgi_app(awa.AsyncClient(dsn, jobs), keys))
    return True


def create_app(database_url: str | None = None) -> Any:
    """The FastAPI application (needs ``fastapi``)."""
    from contextlib import asynccontextmanager

    from fastapi import Depends, FastAPI

    url = database_url or os.environ["DATABASE_URL"]  # postgresql+psycopg://...
    engine: AsyncEngine = create_async_engine(url)

    @asynccontextmanager
    async def lifespan(_: Any) -> AsyncIterator[None]:
        async with engine.begin() as conn:
            await conn.execute(text(ORDERS_TABLE))
        yield
        await engine.dispose()

    api = FastAPI(title="awa example: enqueue in the request's transaction", lifespan=lifespan)

    async def session() -> AsyncIterator[AsyncSession]:
        async with AsyncSession(engine) as s, s.begin():  # commit on success, rollback on error
            yield s

    @api.post("/orders")
    # (a default rather than Annotated[...]: with postponed annotations FastAPI resolves
    # names in the module, and Depends(session) is local to this factory)
    async def orders(email: str, s: AsyncSession = Depends(session)) -> dict[str, Any]:  # noqa: B008
        return await place_order(s, email)

    mount_callbacks(api, url.replace("postgresql+psycopg://", "postgresql://", 1))
    return api


def __getattr__(name: str) -> Any:
    # `uvicorn examples.fastapi_app:app` builds the app on first access, so importing this
    # module (as the tests do) needs neither FastAPI nor a DATABASE_URL.
    if name == "app":
        return create_app()
    raise AttributeError(name)
