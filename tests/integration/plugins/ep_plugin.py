"""A plugin the tests install as an entry point (group ``awa_cli``) of a fake distribution."""

from __future__ import annotations

from typing import Any

import awa_cli

EVENTS: list[Any] = []


@awa_cli.hookimpl(trylast=True)
def awa_job_event(event: Any) -> None:
    EVENTS.append(event)
