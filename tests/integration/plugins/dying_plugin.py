"""A plugin whose background task fails soon after the worker starts (issue 16 item 1): the
worker supervises it (``Worker.supervise``) and must go down with a non-zero exit."""

from __future__ import annotations

import asyncio
from typing import Any

import awa_cli


async def _fails() -> None:
    await asyncio.sleep(0.2)
    raise RuntimeError("the plugin's loop broke")


@awa_cli.hookimpl
async def awa_worker_started(worker: Any) -> None:
    worker.supervise(asyncio.get_running_loop().create_task(_fails(), name="dying-plugin-loop"))
