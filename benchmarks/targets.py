"""The performance targets, checked against one run's JSON: ``python -m benchmarks.targets
RESULTS.json`` prints the README's table (Markdown), one row per target, every figure from that
one run (ratios need both sides in it; a measure the run left out shows "not run")."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

Summary = dict[str, dict[str, Any]]


def median(summary: Summary, measure: str, key: str) -> float | None:
    value = summary.get(measure, {}).get(key, {})
    return None if not isinstance(value, dict) else value.get("median")


def rate(summary: Summary, measure: str) -> float | None:
    return median(summary, measure, "jobs_per_s")


def ratio(summary: Summary, top: str, bottom: str) -> float | None:
    a, b = rate(summary, top), rate(summary, bottom)
    return None if a is None or not b else a / b


@dataclass(frozen=True)
class Target:
    measure: str  # what the row is about, as the README names it
    wanted: str  # the target, as the issue states it
    value: Callable[[Summary], float | None]
    shown: Callable[[float], str]
    holds: Callable[[float], bool]
    costs_of: str | None = None  # the measure whose commits and WAL per job the row shows


def _times(x: float) -> str:
    return f"{x:.2f}×"


TARGETS: tuple[Target, ...] = (
    Target(
        "`drain`, concurrency 10",
        "≥ 12,000 jobs/s",
        lambda s: rate(s, "drain"),
        lambda x: f"{x:,.0f} jobs/s",
        lambda x: x >= 12_000,
        "drain",
    ),
    Target(
        "`drain` / pgqueuer's drain",
        "≥ 2×",
        lambda s: ratio(s, "drain", "pgqueuer.drain"),
        _times,
        lambda x: x >= 2,
        "pgqueuer.drain",
    ),
    Target(
        "`enqueue_one` / pgqueuer's one-by-one enqueue",
        "≥ 1.2×",
        lambda s: ratio(s, "enqueue_one", "pgqueuer.enqueue_one"),
        _times,
        lambda x: x >= 1.2,
        "enqueue_one",
    ),
    Target(
        "`insert_many` / `insert_many_copy_sql`",
        "≥ 0.9×",
        lambda s: ratio(s, "insert_many", "insert_many_copy_sql"),
        _times,
        lambda x: x >= 0.9,
        "insert_many",
    ),
    Target(
        "`pickup_latency` p99",
        "≤ 2 ms",
        lambda s: median(s, "pickup_latency", "p99_ms"),
        lambda x: f"{x:.2f} ms",
        lambda x: x <= 2,
    ),
    Target(
        "`drain_follow_up` / `drain`",
        "≥ 0.7×",
        lambda s: ratio(s, "drain_follow_up", "drain"),
        _times,
        lambda x: x >= 0.7,
        "drain_follow_up",
    ),
    Target(
        "`drain_processes_2` / `drain`",
        "≥ 1.4×",
        lambda s: ratio(s, "drain_processes_2", "drain"),
        _times,
        lambda x: x >= 1.4,
        "drain_processes_2",
    ),
    Target(
        "`drain_with_history` / `drain`",
        "≥ 0.9×",
        lambda s: ratio(s, "drain_with_history", "drain"),
        _times,
        lambda x: x >= 0.9,
        "drain_with_history",
    ),
    Target(
        "`drain_deep` / `drain`",
        "≥ 0.8×",
        lambda s: ratio(s, "drain_deep", "drain"),
        _times,
        lambda x: x >= 0.8,
        "drain_deep",
    ),
    Target(
        "`drain_deep`: last 10% / first 10% of the backlog",
        "flat (≥ 0.9×)",
        lambda s: median(s, "drain_deep", "last_over_first"),
        _times,
        lambda x: x >= 0.9,
    ),
    Target(
        "`workflow_fan` / `drain` (10,000-wide fan-out, then 10,000-to-1 fan-in)",
        "≥ 0.7×",
        lambda s: ratio(s, "workflow_fan", "drain"),
        _times,
        lambda x: x >= 0.7,
        "workflow_fan",
    ),
    Target(
        "`sustained_load` p99, commit → handler start",
        "≤ 25 ms",
        lambda s: median(s, "sustained_load", "p99_ms"),
        lambda x: f"{x:.1f} ms",
        lambda x: x <= 25,
        "sustained_load",
    ),
    Target(
        "`sustained_load` largest backlog",
        "≤ 1 s of load",
        lambda s: median(s, "sustained_load", "max_backlog_s"),
        lambda x: f"{x:.3f} s",
        lambda x: x <= 1,
    ),
)


def row(target: Target, summary: Summary) -> str:
    value = target.value(summary)
    if value is None:
        result, verdict = "not run", "–"
    else:
        result, verdict = target.shown(value), ("yes" if target.holds(value) else "**no**")
    commits = wal = "–"
    if target.costs_of is not None and target.costs_of in summary:
        c = median(summary, target.costs_of, "commits_per_job")
        w = median(summary, target.costs_of, "wal_bytes_per_job")
        commits = "–" if c is None else f"{c:.2f}"
        wal = "–" if w is None else f"{w:,.0f}"
    return f"| {target.measure} | {result} | {target.wanted} | {verdict} | {commits} | {wal} |"


def table(results: dict[str, Any]) -> str:
    summary: Summary = results["summary"]
    lines = [
        "| measure | result | target | holds | commits/job | WAL B/job |",
        "|---|---|---|---|---|---|",
        *(row(t, summary) for t in TARGETS),
    ]
    return "\n".join(lines)


def machine_line(results: dict[str, Any]) -> str:
    m = results.get("machine", {})
    settings = ", ".join(f"{k}={v}" for k, v in m.get("settings", {}).items())
    return (
        f"{m.get('host', '?')}: {m.get('cores', '?')} cores, {m.get('memory', '?')}, "
        f"Python {m.get('python', '?')}, PostgreSQL {m.get('postgresql', '?')}; {settings}"
    )


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: python -m benchmarks.targets RESULTS.json", file=sys.stderr)
        return 2
    results = json.loads(Path(argv[0]).read_text())
    print(machine_line(results))
    print()
    print(table(results))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
