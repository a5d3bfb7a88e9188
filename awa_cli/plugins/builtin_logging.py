"""Built-in plugin: every committed event as one structured log line.

The line is logfmt (``action=job_completed job_id=7 kind=send_email ...``; values with spaces,
quotes, ``=`` or newlines are JSON-quoted, so a multi-line error stays on one line). The same
fields are attached to the log record as ``extra`` for structured handlers.
"""

from __future__ import annotations

import json
import logging
from typing import Any

from awa_cli.plugins.marker import hookimpl

log = logging.getLogger("awa.events")

_EVENT_FIELDS = ("duration", "error", "reason", "next_run_at")


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
    if job.callback_id is not None:
        fields["callback_id"] = str(job.callback_id)
    for name in _EVENT_FIELDS:
        if hasattr(event, name):
            value = getattr(event, name)
            if name == "duration":
                value = round(float(value), 6)
            elif value is not None and not isinstance(value, (int, float)):
                value = str(value)
            fields[name] = value
    return fields


def logfmt(fields: dict[str, Any]) -> str:
    """``key=value`` pairs on one line; empty values are left out."""
    parts = []
    for key, value in fields.items():
        if value is None or value == "":
            continue
        text = str(value)
        if any(c in text for c in ' ="\n\r\t\\') or not text:
            text = json.dumps(text)
        parts.append(f"{key}={text}")
    return " ".join(parts)


def level_for(event: Any) -> int:
    """Started is logged at DEBUG (every job has one), the outcomes at INFO."""
    return logging.DEBUG if event.name == "started" else logging.INFO


@hookimpl
async def awa_job_event(event: Any) -> None:
    """Log the event on the ``awa.events`` logger (async: no thread hop per event)."""
    level = level_for(event)
    if log.isEnabledFor(level):
        fields = describe(event)
        log.log(level, logfmt(fields), extra=fields)


# Read by the dispatcher: skip the call when the line would not be logged, and hand over the
# committed args without a private copy (this hook never reads or mutates them).
awa_job_event.awa_enabled = lambda event: log.isEnabledFor(level_for(event))  # type: ignore[attr-defined]
awa_job_event.awa_reads_args = False  # type: ignore[attr-defined]
