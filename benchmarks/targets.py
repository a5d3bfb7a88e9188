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


def us_per_job(summary: Summary, measure: str, side: str) -> float | None:
    return median(summary, measure, f"cpu_{side}_us_per_job")


def _us(x: float) -> str:
    return f"{x:,.0f} µs"


def _ratio_row(measure: str, wanted: float, top: str, bottom: str, costs: str) -> Target:
    return Target(
        measure,
        f"≥ {wanted}×",
        lambda s: ratio(s, top, bottom),
        _times,
        lambda x: x >= wanted,
        costs,
    )


# The targets of performance round three (issue 31): every peer ratio from one run in which
# both sides ran, peers set up as their authors recommend (benchmarks/peers.py).
TARGETS: tuple[Target, ...] = (
    Target(
        "`drain`, concurrency 10",
        "(no target: the figure the ratios divide)",
        lambda s: rate(s, "drain"),
        lambda x: f"{x:,.0f} jobs/s",
        lambda x: True,
        "drain",
    ),
    _ratio_row(
        "`drain` / `pgqueuer@defaults` drain",
        2.0,
        "drain",
        "pgqueuer@defaults.drain",
        "pgqueuer@defaults.drain",
    ),
    _ratio_row(
        "`drain` / `pgqueuer` drain (same in-flight budget)",
        2.5,
        "drain",
        "pgqueuer.drain",
        "pgqueuer.drain",
    ),
    _ratio_row(
        "`drain` / `claim_complete_overlap_sql` (the SQL floor)",
        0.95,
        "drain",
        "claim_complete_overlap_sql",
        "claim_complete_overlap_sql",
    ),
    Target(
        "worker CPU µs per drained job",
        "≤ 40 µs",
        lambda s: us_per_job(s, "drain", "worker"),
        _us,
        lambda x: x <= 40,
    ),
    Target(
        "PostgreSQL CPU µs per drained job",
        "≤ 55 µs",
        lambda s: us_per_job(s, "drain", "postgres"),
        _us,
        lambda x: x <= 55,
    ),
    _ratio_row(
        "`enqueue_one` / `pgqueuer` enqueue one",
        1.2,
        "enqueue_one",
        "pgqueuer.enqueue_one",
        "enqueue_one",
    ),
    _ratio_row(
        "`enqueue_one` / `enqueue_one_sql` (bare statement)",
        0.95,
        "enqueue_one",
        "enqueue_one_sql",
        "enqueue_one_sql",
    ),
    _ratio_row(
        "`insert_many` / `insert_many_copy_sql`",
        0.9,
        "insert_many",
        "insert_many_copy_sql",
        "insert_many",
    ),
    _ratio_row("`drain_follow_up` / `drain`", 0.75, "drain_follow_up", "drain", "drain_follow_up"),
    _ratio_row(
        "`drain_with_history` / `drain`", 0.9, "drain_with_history", "drain", "drain_with_history"
    ),
    _ratio_row("`drain_deep` / `drain`", 0.8, "drain_deep", "drain", "drain_deep"),
    _ratio_row("`batch_100k` / `drain`", 0.8, "batch_100k", "drain", "batch_100k"),
    Target(
        "`drain_deep`: last 10% / first 10% of the backlog",
        "≥ 0.95×",
        lambda s: median(s, "drain_deep", "last_over_first"),
        _times,
        lambda x: x >= 0.95,
    ),
    Target(
        "`pickup_latency` p99",
        "≤ 1.5 ms",
        lambda s: median(s, "pickup_latency", "p99_ms"),
        lambda x: f"{x:.2f} ms",
        lambda x: x <= 1.5,
    ),
    Target(
        "`sustained_load` p99 (5,000 jobs/s offered)",
        "≤ 10 ms",
        lambda s: median(s, "sustained_load", "p99_ms"),
        lambda x: f"{x:.1f} ms",
        lambda x: x <= 10,
        "sustained_load",
    ),
    Target(
        "`drain_processes_2`: worker + PostgreSQL CPU µs per job (no target on 2 cores)",
        "report",
        lambda s: (
            None
            if us_per_job(s, "drain_processes_2", "worker") is None
            else (us_per_job(s, "drain_processes_2", "worker") or 0)
            + (us_per_job(s, "drain_processes_2", "postgres") or 0)
        ),
        _us,
        lambda x: True,
        "drain_processes_2",
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
