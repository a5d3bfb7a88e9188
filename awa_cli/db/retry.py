"""What the long-running loops share when the database fails: the backoff and the log text.

Every worker loop (claim, finalise, heartbeat, listener, maintenance) retries any database
error after ``LOOP_BACKOFF_MIN`` seconds, doubling to ``LOOP_BACKOFF_MAX`` (architecture §15.7),
and logs one ERROR line per step with a stable ``action=`` key.
"""

from __future__ import annotations

import asyncio
import logging

from awa_cli import defaults
from awa_cli.db.dsn import redact


def first_line(exc: BaseException) -> str:
    """The error as one short line for a log (its type when it has no text; passwords
    redacted)."""
    text = str(exc).strip()
    return redact(text.splitlines()[0]) if text else type(exc).__name__


class Backoff:
    """``LOOP_BACKOFF_MIN`` doubling to ``LOOP_BACKOFF_MAX``; :meth:`reset` after a success."""

    def __init__(
        self, first: float = defaults.LOOP_BACKOFF_MIN, cap: float = defaults.LOOP_BACKOFF_MAX
    ) -> None:
        self.first = first
        self.cap = cap
        self.delay = first

    def next(self) -> float:
        """The delay to wait now; the following one doubles."""
        delay = self.delay
        self.delay = min(self.delay * 2, self.cap)
        return delay

    def reset(self) -> None:
        self.delay = self.first


async def sleep_unless(stopping: asyncio.Event, seconds: float) -> None:
    """Wait ``seconds``, or until ``stopping`` is set if that comes first."""
    try:
        await asyncio.wait_for(stopping.wait(), timeout=seconds)
    except TimeoutError:
        pass


async def reconnect_later(
    log: logging.Logger, loop: str, exc: BaseException, backoff: Backoff, stopping: asyncio.Event
) -> None:
    """A loop's connection failed: log it as one ERROR line (``action=<loop>_reconnect``),
    then wait the backoff's next delay (less if ``stopping`` is set)."""
    delay = backoff.next()
    log.error(
        "%s failed, reconnecting in %.1fs: %s",
        loop,
        delay,
        first_line(exc),
        extra={"action": f"{loop}_reconnect", "retry_in": delay},
    )
    await sleep_unless(stopping, delay)
