"""What the connection pools say while the database is away: one awa line per backoff step.

psycopg_pool logs a WARNING (two lines: libpq's hint comes after a tab) on every failed
connection attempt and every discarded connection of every pool, several a second while
the server is down. The CLI puts
:class:`ReconnectReport` on the ``psycopg.pool`` logger: the first failure becomes one line
on ``awa.db`` (the reason on one line, the URL redacted), later ones are counted and
reported at most once per backoff step (1 s, 2 s, 4 s ... up to 60 s); after a quiet spell
of two steps the next failure is reported at once again. The rest of psycopg_pool's chatter
(INFO) is shown only with ``-vv``. Every log message is kept on one line
(:class:`OneLineFormatter`).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

import psycopg

from awa_cli.db.dsn import redact

POOL_LOGGER = "psycopg.pool"
FIRST_STEP = 1.0
MAX_STEP = 60.0


class ReconnectReport(logging.Filter):
    """A filter that folds the pool's warnings (all of them are about connections that
    failed or broke) into rate-limited awa lines."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        super().__init__()
        self.clock = clock
        self.step = FIRST_STEP
        self.next_report = 0.0
        self.last_failure: float | None = None
        self.suppressed = 0

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno < logging.WARNING:
            return True
        now = self.clock()
        if self.last_failure is not None and now - self.last_failure > 2 * self.step:
            self.step, self.next_report = FIRST_STEP, 0.0  # a quiet spell: start over
        self.last_failure = now
        if now < self.next_report:
            self.suppressed += 1
            return False
        reason = _reason(record)
        more = f"; {self.suppressed} more failed attempts" if self.suppressed else ""
        record.name = "awa.db"
        record.levelno, record.levelname = logging.WARNING, "WARNING"
        record.msg = "database connection failed: %s (retrying%s; next report in %gs at most)"
        record.args = (reason, more, self.step)
        record.action = "db_connect_failed"
        self.next_report = now + self.step
        self.step = min(self.step * 2, MAX_STEP)
        self.suppressed = 0
        return True


def _reason(record: logging.LogRecord) -> str:
    """The failure of a pool record as one line: its exception's first line, redacted."""
    args = record.args if isinstance(record.args, tuple) else ()
    if str(record.msg).startswith("error connecting in") and len(args) >= 2:
        from awa_cli.db.preflight import connection_problem

        error = args[1]
        text = connection_problem(error) if isinstance(error, psycopg.Error) else str(error)
    elif str(record.msg).startswith(("discarding", "closing returned", "rolling back")):
        text = "connection lost"  # the pool dropped a connection the server closed
    else:
        text = record.getMessage()
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return redact(lines[0] if lines else text)


class OneLineFormatter(logging.Formatter):
    """Every record's message on one line: the driver's multi-line errors (libpq's hints come
    after a newline and a tab) would otherwise break one-record-per-line log parsing in
    journald or Loki. A traceback (``-v``) keeps its lines."""

    def formatMessage(self, record: logging.LogRecord) -> str:
        text = super().formatMessage(record)
        if "action=" not in text:  # a logfmt message (the supervisor's) carries its own keys
            text += log_keys(record)
        if "\n" not in text:
            return text
        return " ".join(part.strip() for part in text.splitlines() if part.strip())


LOG_KEYS = ("action", "queue", "kind", "job_id", "task", "retry_in")
"""The structured keys appended to a log line (``... action=claim_failed queue=default``)."""


def log_keys(record: logging.LogRecord) -> str:
    """`` action=claim_failed queue=default retry_in=0.4`` for the record's stable keys (the
    ``extra`` of its call), so a log line can be grepped by ``action=`` whatever its text."""
    if getattr(record, "action", None) is None:
        return ""
    parts = []
    for key in LOG_KEYS:
        value = getattr(record, key, None)
        if value is not None:
            value = str(value)
            parts.append(f"{key}={value!r}" if (" " in value or not value) else f"{key}={value}")
    return " " + " ".join(parts)


LOG_FORMAT = "%(asctime)s %(levelname)s %(name)s %(message)s"


def configure(level: int, verbose: int) -> None:
    """The CLI's logging: stderr, one line per record, the pool's failures folded."""
    import sys

    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(OneLineFormatter(LOG_FORMAT))
    logging.basicConfig(level=level, handlers=[handler])  # a no-op when already configured
    install(verbose)


def install(verbose: int) -> None:
    """Put one :class:`ReconnectReport` on the pool logger (replacing an earlier one)."""
    logger = logging.getLogger(POOL_LOGGER)
    for old in [f for f in logger.filters if isinstance(f, ReconnectReport)]:
        logger.removeFilter(old)
    logger.addFilter(ReconnectReport())
    logger.setLevel(logging.DEBUG if verbose > 1 else logging.WARNING)
