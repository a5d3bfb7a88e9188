"""``examples/fastapi_app.py``: its request handler's transaction holds the order and the job
together (real PostgreSQL, async SQLAlchemy on psycopg); the FastAPI app itself is exercised
only where FastAPI is installed (it is not one of awa's dependencies)."""

from __future__ import annotations

import psycopg
import pytest

pytest.importorskip("sqlalchemy.ext.asyncio")

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncSession, create_async_engine

from examples import fastapi_app

pytestmark = pytest.mark.integration


def rows(dsn: str) -> tuple[list[str], list[tuple[str, dict[str, object]]]]:
    with psycopg.connect(dsn) as conn:
        orders = [r[0] for r in conn.execute("SELECT email FROM orders ORDER BY id")]
        jobs = conn.execute("SELECT queue, metadata FROM awa.jobs ORDER BY id").fetchall()
    return orders, jobs


@pytest.mark.asyncio
async def test_place_order_commits_and_rolls_back_with_the_request(dsn: str) -> None:
    engine = create_async_engine(
        "postgresql+psycopg://", async_creator=lambda: psycopg.AsyncConnection.connect(dsn)
    )
    try:
        async with engine.begin() as conn:
            await conn.execute(text(fastapi_app.ORDERS_TABLE))
        async with AsyncSession(engine) as session, session.begin():
            placed = await fastapi_app.place_order(session, "ada@example.com")
        orders, jobs = rows(dsn)
        assert orders == ["ada@example.com"]
        assert jobs == [("email", {"order_id": placed["order_id"]})]

        with pytest.raises(RuntimeError):
            async with AsyncSession(engine) as session, session.begin():
                await fastapi_app.place_order(session, "bob@example.com")
                raise RuntimeError("the request failed after enqueueing")
        assert rows(dsn) == (orders, jobs)
    finally:
        await engine.dispose()


def test_callbacks_are_mounted_only_with_the_helpers_and_a_key() -> None:
    class Recorder:
        mounted: list[str] = []

        def mount(self, path: str, app: object) -> None:
            self.mounted.append(path)

    api = Recorder()
    mounted = fastapi_app.mount_callbacks(api, "postgresql://unused")
    assert mounted is bool(api.mounted)
    try:
        import awa_cli.callbacks  # noqa: F401
    except ImportError:
        assert not mounted  # no `awa serve` helpers in this tree


def test_the_fastapi_app_serves_orders(dsn: str) -> None:
    pytest.importorskip("fastapi")
    from fastapi.testclient import TestClient
    from psycopg.conninfo import conninfo_to_dict

    info = conninfo_to_dict(dsn)
    url = f"postgresql+psycopg://{info['user']}@/{info['dbname']}?host={info['host']}&port={info['port']}"
    with TestClient(fastapi_app.create_app(url)) as http:
        response = http.post("/orders", params={"email": "cy@example.com"})
        assert response.status_code == 200, response.text
    assert rows(dsn)[0] == ["cy@example.com"]
