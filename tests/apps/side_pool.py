"""The connection pool a test app's worker process writes its side tables (``awa_test.*``)
through: opened on first use from ``$AWA_DATABASE_URL``, autocommit, one per app module."""

from __future__ import annotations

import os
from typing import Any


class SidePool:
    """A lazily opened ``AsyncConnectionPool`` (1..``max_size`` connections). ``checked``: test
    each connection on checkout and stop reconnecting at once (for apps that outlive a
    server restart)."""

    def __init__(
        self, max_size: int = 4, *, application_name: str | None = None, checked: bool = False
    ) -> None:
        self._pool: Any = None
        self._max_size = max_size
        self._kwargs: dict[str, Any] = {"autocommit": True}
        if application_name is not None:
            self._kwargs["application_name"] = application_name
        self._checked = checked

    async def execute(self, query: str, params: tuple[Any, ...]) -> list[tuple[Any, ...]]:
        """Run one statement on a pooled connection; the rows it returns, if any."""
        pool = await self._get()
        async with pool.connection() as conn:
            cur = await conn.execute(query, params)
            return await cur.fetchall() if cur.description else []

    async def _get(self) -> Any:
        if self._pool is None:
            from psycopg_pool import AsyncConnectionPool

            options: dict[str, Any] = {}
            if self._checked:
                options = {"check": AsyncConnectionPool.check_connection, "reconnect_timeout": 0}
            pool = AsyncConnectionPool(
                os.environ["AWA_DATABASE_URL"],
                min_size=1,
                max_size=self._max_size,
                kwargs=self._kwargs,
                open=False,
                **options,
            )
            await pool.open()
            self._pool = pool
        return self._pool
