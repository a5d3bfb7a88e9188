"""M2, measured: concurrent unsigned callback bodies do not grow `awa serve`'s memory.

Runs the review's reproduction (benchmarks/callback_body_memory.py: a real uvicorn child
process on 127.0.0.1) and reads its peak resident set. The code the review attacked read
every body in full first: 120 bodies of 8 MiB took it from 47 to about 790 MiB.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]


def measure(concurrency: int, mib: float) -> dict[str, int]:
    out = subprocess.run(
        [sys.executable, "-m", "benchmarks.callback_body_memory"]
        + ["--concurrency", str(concurrency), "--mib", str(mib)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    result: dict[str, int] = json.loads(out.stdout.strip().splitlines()[-1])
    return result


def test_unsigned_bodies_are_not_buffered() -> None:
    result = measure(20, 8)
    assert result["statuses"] == {"401": 20}
    assert result["rss_peak_mib"] - result["rss_before_mib"] < 60, result  # was ~130 MiB


@pytest.mark.slow
def test_the_reviews_120_concurrent_8_mib_bodies() -> None:
    result = measure(120, 8)
    assert result["statuses"] == {"401": 120}
    assert result["rss_peak_mib"] - result["rss_before_mib"] < 100, result  # was ~740 MiB
