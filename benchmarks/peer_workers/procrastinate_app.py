"""The procrastinate app of the comparison: one no-op task on queue ``bench``."""

from __future__ import annotations

from typing import Any

import procrastinate


def make_app(dsn: str) -> tuple[procrastinate.App, Any]:
    app = procrastinate.App(connector=procrastinate.PsycopgConnector(conninfo=dsn))

    @app.task(name="noop", queue="bench")
    async def noop(n: int = 0) -> None:
        return None

    return app, noop
