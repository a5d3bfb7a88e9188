"""Built-in plugin: one structured log line per committed event."""

from __future__ import annotations

import logging
from typing import Any

from awa_cli.plugins.hookspecs import hookspec  # noqa: F401 - documents where the spec lives
from awa_cli.plugins.marker import hookimpl

log = logging.getLogger("awa.events")


def describe(event: Any) -> dict[str, Any]:
    """The event's fields as a flat dict (the job as id/kind/queue/state/attempt)."""
    job = event.job
    fields: dict[str, Any] = {
        "action": f"job_{event.name}",
        "job_id": job.id,
        "kind": job.kind,
        "queue": job.queue,
        "state": str(job.state),
        "attempt": job.attempt,
    }
    for name in ("duration", "error", "reason", "next_run_at"):
        if hasattr(event, name):
            fields[name] = str(getattr(event, name)) if name in ("reason", "next_run_at") else getattr(event, name)
    return fields


@hookimpl
def awa_job_event(event: Any) -> None:
    fields = describe(event)
    text = " ".join(f"{k}={v}" for k, v in fields.items() if v not in (None, ""))
    log.info(text, extra=fields)
