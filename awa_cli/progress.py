"""Progress a handler reports with ``job.set_progress()`` (architecture §11): validation and the
per-attempt throttle. Pure: the worker's heartbeat and finalise statements write it.

The stored value is ``{"percent", "message", "checkpoint", "at"}`` (column ``progress``). A
call only records the latest value in memory; the worker writes it at most once a second per
job (batched across jobs with the heartbeat's statement) and always with the attempt's
outcome, so reporting progress costs a handler no round trip.
"""

from __future__ import annotations

import json
import math
import threading
import time
from datetime import UTC, datetime
from typing import Any

from awa_cli.errors import ValidationError
from awa_cli.jsonvalues import to_json

MAX_PROGRESS_BYTES = 64 * 1024
"""The whole progress value, as stored JSON, may be at most this many bytes."""

MIN_WRITE_INTERVAL = 1.0
"""Seconds between two writes of one job's progress (the outcome is always written)."""


def progress_value(
    percent: Any, message: Any, checkpoint: dict[str, Any]
) -> tuple[dict[str, Any], str]:
    """Validate a ``set_progress`` call: the stored value and its JSON text.

    Raises :class:`ValidationError` naming the field: ``percent`` (a number 0–100),
    ``message`` (a string or None), ``checkpoint`` (JSON-serialisable) or ``progress`` (the
    whole over 64 KiB)."""
    if isinstance(percent, bool) or not isinstance(percent, int | float):
        raise ValidationError("percent", f"expected a number 0-100, got {type(percent).__name__}")
    if not math.isfinite(percent) or not 0 <= percent <= 100:
        raise ValidationError("percent", f"expected a number 0-100, got {percent!r}")
    if message is not None and not isinstance(message, str):
        raise ValidationError("message", f"expected a string or None, got {type(message).__name__}")
    checkpoint_json = to_json(checkpoint, "checkpoint")
    value = {
        "percent": percent,
        "message": message,
        "checkpoint": json.loads(checkpoint_json),
        "at": datetime.now(UTC).isoformat(),
    }
    text = to_json(value, "progress")
    if len(text.encode()) > MAX_PROGRESS_BYTES:
        raise ValidationError(
            "progress", f"is {len(text.encode())} bytes as JSON; at most {MAX_PROGRESS_BYTES}"
        )
    return value, text


class ProgressTracker:
    """One attempt's progress: the latest value reported, and when it was last written.

    Set from the handler (any thread), taken by the worker's heartbeat and progress flush
    (event loop): a lock keeps the value and its dirty flag together.
    """

    __slots__ = ("_dirty", "_lock", "_text", "_written_at", "value")

    def __init__(self, value: dict[str, Any] | None = None) -> None:
        self.value = value  # what job.progress shows: the row's until the handler reports
        self._text: str | None = None  # JSON of the latest value reported in this attempt
        self._dirty = False
        self._written_at = -math.inf
        self._lock = threading.Lock()

    def report(self, value: dict[str, Any], text: str) -> None:
        with self._lock:
            self.value, self._text, self._dirty = value, text, True

    def due(self, now: float | None = None) -> bool:
        """True when a reported value waits and the last write is a second old."""
        now = time.monotonic() if now is None else now
        return self._dirty and now - self._written_at >= MIN_WRITE_INTERVAL

    def take(self, now: float | None = None) -> str | None:
        """The JSON to write now (and mark it written), or None: nothing new, or too soon."""
        now = time.monotonic() if now is None else now
        with self._lock:
            if not (self._dirty and now - self._written_at >= MIN_WRITE_INTERVAL):
                return None
            self._dirty, self._written_at = False, now
            return self._text

    def untake(self) -> None:
        """The write of the last value taken failed: offer it again (unless a newer one
        waits already)."""
        with self._lock:
            if self._text is not None:
                self._dirty, self._written_at = True, -math.inf

    def final(self) -> str | None:
        """The JSON the attempt's outcome writes: the latest value reported in this attempt
        (None: the handler reported nothing, the row's progress stays)."""
        with self._lock:
            return self._text
