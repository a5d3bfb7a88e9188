"""The limits' own measures (architecture §13): how fast one key's slots refill, and how
exactly a rate window is honoured. Real ``awa worker`` processes; the starts are the claims'
logged starts (``attempted_at`` of a limited claim is the start its rate window counted).

- ``limited_one_key``: 400 jobs of one key, ``max_running = 2``, 50 ms each, one worker
  (concurrency 10): ``starts_per_s`` over first to last start. Two slots of 50 ms jobs allow
  40 a second; each finish must start the next job at once (before the refill: 2 a second).
- ``limited_rate``: 600 no-op jobs of one key, ``rate = "100/1s"``: the starts in every full
  1 s window from the first start (``max_starts_per_window``, ``min_starts_per_window``),
  and the most in any 1 s span (``max_starts_any_1s``, which must never pass 100).
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

import psycopg

from benchmarks.app import TenantSleep, Tenanted
from benchmarks.measures import _drain
from benchmarks.server import BenchServer

ONE_KEY_JOBS = 400
RATE_JOBS = 600
ONE_KEY_LIMIT = '[limits.one_key]\nkind = "tenant_sleep"\nkey = "args.tenant"\nmax_running = 2\n'
RATE_LIMIT = (
    '[limits.rated]\nkind = "tenanted"\nkey = "args.tenant"\nmax_running = 1000\nrate = "100/1s"\n'
)


def _starts(dsn: str) -> list[datetime]:
    with psycopg.connect(dsn) as conn:
        rows = conn.execute(
            "SELECT attempted_at FROM awa.jobs WHERE queue = 'bench' ORDER BY attempted_at"
        ).fetchall()
    return [r[0] for r in rows]


def limited_one_key(server: BenchServer, dsn: str, jobs: int) -> dict[str, Any]:
    result = _drain(
        server,
        dsn,
        ONE_KEY_JOBS,
        lambda i: TenantSleep(i, "one", 0.05),
        extra_config=ONE_KEY_LIMIT,
    )
    starts = _starts(dsn)
    span = (starts[-1] - starts[0]).total_seconds()
    return {"starts_per_s": (len(starts) - 1) / span, **result}


def windows(starts: list[datetime], width: float = 1.0) -> list[int]:
    """Starts in each full window of ``width`` seconds from the first start."""
    first, last = starts[0], starts[-1]
    full = int((last - first).total_seconds() // width)
    counts = [0] * full
    for t in starts:
        k = int((t - first).total_seconds() // width)
        if k < full:
            counts[k] += 1
    return counts


def most_in_any(starts: list[datetime], width: float = 1.0) -> int:
    """The most starts in any span of ``width`` seconds (two pointers over sorted starts)."""
    most, j = 0, 0
    span = timedelta(seconds=width)
    for i, t in enumerate(starts):
        while starts[j] <= t - span:
            j += 1
        most = max(most, i - j + 1)
    return most


def limited_rate(server: BenchServer, dsn: str, jobs: int) -> dict[str, Any]:
    result = _drain(server, dsn, RATE_JOBS, lambda i: Tenanted(i, "one"), extra_config=RATE_LIMIT)
    starts = _starts(dsn)
    counts = windows(starts)
    return {
        "max_starts_per_window": max(counts),
        "min_starts_per_window": min(counts),
        "max_starts_any_1s": most_in_any(starts),
        "windows": counts,
        **result,
    }
