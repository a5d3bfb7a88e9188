"""Run awa's benchmarks: ``python -m benchmarks [--database-url URL] [--repeat N] [--json PATH] [--compare]``.

Without ``--database-url`` a throwaway PostgreSQL with durable commits (``fsync`` and
``synchronous_commit`` on, the defaults) is started in a temporary directory. Every run of
every measure gets a fresh, migrated database. Prints medians, min–max and ratios, plus
commits and WAL bytes per job and the CPU split between the worker and PostgreSQL.
With ``--compare``, the measures that procrastinate and pgqueuer (the ``bench`` extra) also
have run for them too, on the same server with the same job counts (benchmarks/peers.py).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

from benchmarks import measures, peers, periodic
from benchmarks.server import BenchServer

MEASURES = {
    "drain": measures.drain,
    "enqueue_one": measures.enqueue_one,
    "insert_many": measures.insert_many,
    "pickup_latency": measures.pickup_latency,
    "drain_follow_up": measures.drain_follow_up,
    "drain_processes_2": measures.drain_processes_2,
    "drain_limited": measures.drain_limited,
    "periodic_sweep_idle": periodic.periodic_sweep_idle,
    "periodic_sweep_100_due": periodic.periodic_sweep_100_due,
    # references: what bounds the measures above on this machine (README, "What bounds the rest")
    "drain_concurrency_100": measures.drain_concurrency_100,
    "claim_complete_sql": measures.claim_complete_sql,
    "enqueue_one_sql": measures.enqueue_one_sql,
    "insert_many_copy_sql": measures.insert_many_copy_sql,
}

RATIOS = [  # (numerator, denominator) printed when both ran
    ("drain_follow_up", "drain"),
    ("drain_processes_2", "drain"),
    ("drain_limited", "drain"),
    ("drain", "claim_complete_sql"),
    ("drain_concurrency_100", "drain"),
    ("enqueue_one", "enqueue_one_sql"),
    ("insert_many", "insert_many_copy_sql"),
]


def summarise(name: str, runs: list[dict[str, Any]]) -> dict[str, Any]:
    keys = [k for k, v in runs[0].items() if isinstance(v, (int, float))]
    out: dict[str, Any] = {"measure": name, "runs": runs}
    for key in keys:
        values = [r[key] for r in runs]
        out[key] = {"median": statistics.median(values), "min": min(values), "max": max(values)}
    return out


def fmt(stat: dict[str, float], unit: str = "") -> str:
    return f"{stat['median']:,.1f}{unit} ({stat['min']:,.1f}–{stat['max']:,.1f})"


def report(results: dict[str, dict[str, Any]]) -> None:
    print()
    width = max([18, *(len(name) for name in results)])
    print(
        f"{'measure':<{width}} {'result (median, min–max)':<44} {'commits/job':>11} {'WAL B/job':>10} {'CPU worker/pg':>14}"
    )
    for name, res in results.items():
        if "jobs_per_s" in res:
            main = fmt(res["jobs_per_s"], " jobs/s")
        else:
            main = "p50 " + fmt(res["p50_ms"], " ms")
        commits = res.get("commits_per_job", {}).get("median")
        wal = res.get("wal_bytes_per_job", {}).get("median")
        cpu_w = res.get("cpu_worker_s", {}).get("median")
        cpu_p = res.get("cpu_postgres_s", {}).get("median")
        cpu = f"{cpu_w:.2f}s/{cpu_p:.2f}s" if cpu_w is not None and cpu_p is not None else "-"
        commits_text = "-" if commits is None else f"{commits:.3f}"
        wal_text = "-" if wal is None else f"{wal:,.0f}"
        print(f"{name:<{width}} {main:<44} {commits_text:>11} {wal_text:>10} {cpu:>14}")
        if name == "pickup_latency":
            print(f"{'':<{width}} p95 {fmt(res['p95_ms'], ' ms')}  p99 {fmt(res['p99_ms'], ' ms')}")
    for top, bottom in RATIOS:
        if top in results and bottom in results:
            ratio = results[top]["jobs_per_s"]["median"] / results[bottom]["jobs_per_s"]["median"]
            print(f"ratio {top} / {bottom}: {ratio:.2f}x")
    for measure in peers.EQUIVALENTS:
        for peer in peers.PEERS:
            key = f"{peer}.{measure}"
            if measure in results and key in results:
                ratio = (
                    results[measure]["jobs_per_s"]["median"] / results[key]["jobs_per_s"]["median"]
                )
                print(
                    f"ratio awa / {peer} ({results[key]['runs'][0]['version']}), {measure}: {ratio:.2f}x"
                )


def run_measure(server: BenchServer, label: str, fn: Any, repeat: int, jobs: int) -> dict[str, Any]:
    runs = []
    for i in range(repeat):
        dsn = server.fresh_database(f"bench_{label.replace('.', '_')}_{i}")
        try:
            run = fn(server, dsn, jobs)
        finally:
            server.drop_database(dsn)
        print(
            f"  {label} #{i + 1}: "
            + ", ".join(
                f"{k}={v:,.3f}" if isinstance(v, float) else f"{k}={v}" for k, v in run.items()
            ),
            flush=True,
        )
        runs.append(run)
    return summarise(label, runs)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks", description=__doc__.splitlines()[0]
    )
    parser.add_argument(
        "--database-url", help="a PostgreSQL server to use (a superuser: it creates databases)"
    )
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--only", help="comma-separated measures: " + ",".join(MEASURES))
    parser.add_argument("--jobs", type=int, default=20_000, help="jobs per drain")
    parser.add_argument("--json", dest="json_path", help="also write the results as JSON here")
    parser.add_argument(
        "--compare",
        action="store_true",
        help="also run procrastinate and pgqueuer (pip install -e '.[bench]') where they "
        "have an equivalent measure: " + ",".join(peers.EQUIVALENTS),
    )
    args = parser.parse_args(argv)
    chosen = args.only.split(",") if args.only else list(MEASURES)
    unknown = [m for m in chosen if m not in MEASURES]
    if unknown:
        parser.error(f"unknown measure {unknown[0]!r}")
    tmp = Path(tempfile.mkdtemp(prefix="awa-bench-"))
    server = BenchServer(args.database_url, tmp)
    results: dict[str, dict[str, Any]] = {}
    try:
        print(
            f"awa benchmarks on {platform.node()} ({os.cpu_count()} cores, Python {platform.python_version()}), "
            f"PostgreSQL {server.version()} fsync={server.setting('fsync')} "
            f"synchronous_commit={server.setting('synchronous_commit')}",
            flush=True,
        )
        compared: list[peers.Peer] = []
        if args.compare:
            for peer in peers.PEERS.values():
                if peer.installed():
                    compared.append(peer)
                else:
                    print(
                        f"--compare: {peer.name} is not installed (pip install -e '.[bench]'): skipped"
                    )
        for name in chosen:
            results[name] = run_measure(server, name, MEASURES[name], args.repeat, args.jobs)
            if name not in peers.EQUIVALENTS:
                continue
            for peer in compared:
                label = f"{peer.name}.{name}"
                try:
                    results[label] = run_measure(
                        server,
                        label,
                        getattr(peer, peers.EQUIVALENTS[name]),
                        args.repeat,
                        args.jobs,
                    )
                except Exception as exc:  # a peer's failure must not lose awa's results
                    print(f"  {label} failed, skipped: {type(exc).__name__}: {exc}", flush=True)
    finally:
        server.close()
        shutil.rmtree(tmp, ignore_errors=True)
    report(results)
    if args.json_path:
        Path(args.json_path).write_text(json.dumps(results, indent=2, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
