"""A plugin whose every hook raises (sync ``awa_job_event``, async ``awa_worker_started``)."""

from __future__ import annotations

from typing import Any

import awa_cli

CALLS: list[str] = []


@awa_cli.hookimpl
def awa_job_event(event: Any) -> None:
    CALLS.append(event.name)
    raise RuntimeError(f"raising_plugin refuses {event.name}")


@awa_cli.hookimpl
async def awa_worker_started(worker: Any) -> None:
    CALLS.append("worker_started")
    raise RuntimeError("raising_plugin refuses to start")
