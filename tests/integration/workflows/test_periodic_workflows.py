"""Periodic workflows (architecture §16): ``app.periodic(name, cron, workflow_factory)`` makes
exactly one workflow per fire time, built by the factory for that fire time."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

import psycopg
import pytest

import awa_cli as awa
from awa_cli.testing import AsyncAwaTestClient
from tests.helpers import running_worker, wait_until
from tests.integration.test_periodic_worker import FAST

pytestmark = [pytest.mark.integration]


@dataclass
class Report:
    day: str


def report_app(seen: list[datetime]) -> awa.App:
    app = awa.App()

    @app.task(Report)
    async def report(job: awa.Job) -> None:
        return None

    def nightly(fire_at: datetime) -> awa.Workflow:
        seen.append(fire_at)
        wf = awa.Workflow(f"report-{fire_at:%H%M%S}")
        a = wf.add("gather", Report(fire_at.isoformat()))
        wf.add("send", Report(fire_at.isoformat()), after=[a])
        return wf

    app.periodic("reports", "* * * * * *", nightly)
    return app


def _workflows(dsn: str) -> list[tuple[Any, ...]]:
    with psycopg.connect(dsn) as conn:
        return conn.execute(
            "SELECT id, name, metadata->>'awa.fire_at', state FROM awa.workflows ORDER BY id"
        ).fetchall()


@pytest.mark.asyncio
async def test_one_workflow_per_fire_time(dsn: str) -> None:
    seen: list[datetime] = []
    app = report_app(seen)
    async with running_worker(app, dsn, **FAST):
        await wait_until(lambda: len([w for w in _workflows(dsn) if w[3] == "completed"]) >= 2, 20)
    rows = _workflows(dsn)
    fires = [r[2] for r in rows]
    assert len(fires) == len(set(fires))  # exactly one per fire time
    assert all(r[1] == f"report-{datetime.fromisoformat(r[2]):%H%M%S}" for r in rows)
    # the launcher run again for a fire (a retry, a rescue) finds the workflow there
    async with awa.AsyncClient(dsn, app) as client:
        [launcher] = [j for j in await client.list_jobs(kind="awa_periodic_workflow", limit=1)]
        assert launcher.output["workflow_id"] in {r[0] for r in rows}
        with psycopg.connect(dsn, autocommit=True) as conn:  # as if it ran again
            conn.execute("UPDATE awa.jobs SET state = 'available' WHERE id = %s", (launcher.id,))
        result = await AsyncAwaTestClient(client, app).work_one("awa_periodic_workflow")
        assert result.outcome == "completed"
    assert len([r for r in _workflows(dsn) if r[2] == launcher.metadata["awa.fire_at"]]) == 1


def test_a_factory_is_checked_at_registration() -> None:
    app = awa.App()
    with pytest.raises(awa.ValidationError, match="periodic 'x' cron"):
        app.periodic("x", "not a cron", lambda at: awa.Workflow("x"))
