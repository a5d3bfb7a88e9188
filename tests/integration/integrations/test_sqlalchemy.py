"""``awa_cli.integrations.sqlalchemy.insert``: the job commits and rolls back with the caller's
SQLAlchemy transaction, for a sync ``Session`` and an ``AsyncSession`` (psycopg dialect),
against the real PostgreSQL."""

from __future__ import annotations

from dataclasses import dataclass

import psycopg
import pytest

pytest.importorskip("sqlalchemy")

from sqlalchemy import create_engine, text
from sqlalchemy.ext.asyncio import AsyncSession, create_async_engine
from sqlalchemy.orm import Session

import awa_cli as awa
from awa_cli.integrations.sqlalchemy import insert

pytestmark = pytest.mark.integration


@dataclass
class SendReceipt:
    order_id: int


def job_ids(dsn: str) -> list[int]:
    with psycopg.connect(dsn) as conn:
        return [r[0] for r in conn.execute("SELECT id FROM awa.jobs ORDER BY id").fetchall()]


def engine_for(dsn: str):  # type: ignore[no-untyped-def]
    return create_engine("postgresql+psycopg://", creator=lambda: psycopg.connect(dsn))


def test_sync_session_commits_with_the_callers_transaction(dsn: str) -> None:
    engine = engine_for(dsn)
    with Session(engine) as session, session.begin():
        session.execute(text("CREATE TABLE orders (id int)"))
        session.execute(text("INSERT INTO orders VALUES (1)"))
        row = insert(session, SendReceipt(1), queue="email")
        assert isinstance(row, awa.JobRow)
        assert row.kind == "send_receipt" and row.queue == "email"
        assert job_ids(dsn) == []  # not visible before the caller commits
    assert job_ids(dsn) == [row.id]
    with psycopg.connect(dsn) as conn:
        assert conn.execute("SELECT count(*) FROM orders").fetchone() == (1,)
    engine.dispose()


def test_sync_session_rollback_drops_the_job(dsn: str) -> None:
    engine = engine_for(dsn)
    with pytest.raises(RuntimeError), Session(engine) as session, session.begin():
        insert(session, SendReceipt(2))
        raise RuntimeError("the request failed")
    with Session(engine) as session:
        insert(session, {"n": 1}, kind="explicit")  # autobegins; never committed
        session.rollback()
    assert job_ids(dsn) == []
    engine.dispose()


def test_sync_connection_and_validation_error(dsn: str) -> None:
    engine = engine_for(dsn)
    with engine.begin() as conn:
        row = insert(conn, SendReceipt(3), priority=1)
        assert row.priority == 1
        with pytest.raises(awa.ValidationError, match="priority"):
            insert(conn, SendReceipt(4), priority=9)
    assert job_ids(dsn) == [row.id]
    engine.dispose()


def test_non_psycopg_driver_is_refused(dsn: str) -> None:
    pytest.importorskip("sqlite3")
    engine = create_engine("sqlite://")
    with Session(engine) as session, pytest.raises(awa.AwaError, match="psycopg"):
        insert(session, SendReceipt(5))


@pytest.mark.asyncio
async def test_async_session_commits_and_rolls_back(dsn: str) -> None:
    engine = create_async_engine(
        "postgresql+psycopg://", async_creator=lambda: psycopg.AsyncConnection.connect(dsn)
    )
    try:
        async with AsyncSession(engine) as session, session.begin():
            pending = insert(session, SendReceipt(10))
            row = await pending
            assert row.kind == "send_receipt"
            assert job_ids(dsn) == []
        assert job_ids(dsn) == [row.id]

        with pytest.raises(RuntimeError):
            async with AsyncSession(engine) as session, session.begin():
                await insert(session, SendReceipt(11))
                raise RuntimeError("rolled back")
        assert job_ids(dsn) == [row.id]
    finally:
        await engine.dispose()
