"""A test app for periodic jobs in real `awa worker` processes: one task, ``tick``, whose
handler does nothing; the schedules come from each test's awa.toml ([periodic.NAME])."""

from __future__ import annotations

import awa_cli as awa

app = awa.App()


@app.task(kind="tick")
async def tick(job: awa.Job) -> None:
    return None
