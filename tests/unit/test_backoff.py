"""The backoff after a failed attempt (architecture §2): 2**n seconds plus 0-25 % jitter, capped at
24 h. Pure; moved out of the worker's integration module so ``-m "not integration"`` runs it."""

from __future__ import annotations

try:  # the pure attempt model, once it has its own module
    from awa_cli.attempts import MAX_BACKOFF_SECONDS, backoff_seconds  # type: ignore[import-not-found,unused-ignore]
except ImportError:  # TODO(lead): keep only the line above after merging `core`
    from awa_cli.outcomes import MAX_BACKOFF_SECONDS, backoff_seconds


def test_backoff_bounds() -> None:
    for attempt in range(1, 30):
        for _ in range(50):
            delay = backoff_seconds(attempt)
            base = 2.0**attempt
            assert min(base, MAX_BACKOFF_SECONDS) <= delay <= min(base * 1.25, MAX_BACKOFF_SECONDS)
    assert backoff_seconds(1000) == MAX_BACKOFF_SECONDS
