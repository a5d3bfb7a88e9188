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
import contextlib
import json
import os
import platform
import shutil
import statistics
import sys
import tempfile
from pathlib import Path
from collections.abc import Callable, Iterator
from typing import Any

from benchmarks import batches, history, limited, measures, peers, periodic, references, sustained
from benchmarks.server import BenchServer

MEASURES = {
    "drain": measures.drain,
    "enqueue_one": measures.enqueue_one,
    "enqueue_one_function": measures.enqueue_one_function,
    "insert_many": measures.insert_many,
    "pickup_latency": measures.pickup_latency,
    "drain_follow_up": measures.drain_follow_up,
    "drain_processes_2": measures.drain_processes_2,
    "drain_limited": measures.drain_limited,
    "limited_one_key": limited.limited_one_key,
    "limited_rate": limited.limited_rate,
    "periodic_sweep_idle": periodic.periodic_sweep_idle,
    "periodic_sweep_100_due": periodic.periodic_sweep_100_due,
    "drain_with_history": history.drain_with_history,
    "drain_deep": history.drain_deep,
    "sustained_load": sustained.sustained_load,
    "batch_100k": batches.batch_100k,
    "batch_100k_one_shard": batches.batch_100k_one_shard,
    # references: what bounds the measures above on this machine (README, "What bounds the rest")
    "drain_concurrency_100": measures.drain_concurrency_100,
    "drain_without_claim_ahead": measures.drain_without_claim_ahead,
    "claim_complete_sql": references.claim_complete_sql,
    "claim_complete_overlap_sql": references.claim_complete_overlap_sql,
    "enqueue_one_sql": references.enqueue_one_sql,
    "insert_many_copy_sql": references.insert_many_copy_sql,
    "insert_one_no_trigger_sql": references.insert_one_no_trigger_sql,
    "insert_one_no_notify_sql": references.insert_one_no_notify_sql,
    "insert_one_no_conflict_sql": references.insert_one_no_conflict_sql,
    "insert_one_bare_sql": references.insert_one_bare_sql,
    "drain_deep_vacuumed": history.drain_deep_vacuumed,
    "drain_without_batch_triggers": batches.drain_without_batch_triggers,
}

# Run only when named in --only: long, and only of interest next to the measure they vary.
OPT_IN = {"drain_deep_vacuumed", "batch_100k_one_shard", "drain_without_batch_triggers"}

# Measured again on uvloop (``uvloop.<name>``) with ``--loop both``: those that run an awa
# worker, or awa's client in this process.
LOOP_SENSITIVE = [
    m
    for m in MEASURES
    if not m.endswith("_sql") and m not in ("drain_deep_vacuumed", "enqueue_one_function")
]

RATIOS = [  # (numerator, denominator) printed when both ran
    ("drain_follow_up", "drain"),
    ("drain_processes_2", "drain"),
    ("drain_limited", "drain"),
    ("drain_with_history", "drain"),
    ("drain_deep", "drain"),
    ("batch_100k", "drain"),
    ("batch_100k_one_shard", "batch_100k"),
    ("drain", "drain_without_batch_triggers"),
    ("drain_deep_vacuumed", "drain_deep"),
    ("drain", "claim_complete_sql"),
    ("drain", "claim_complete_overlap_sql"),
    ("drain_concurrency_100", "drain"),
    ("drain", "drain_without_claim_ahead"),
    ("enqueue_one", "enqueue_one_sql"),
    ("enqueue_one_function", "enqueue_one_sql"),
    ("enqueue_one_function", "enqueue_one"),
    ("insert_many", "insert_many_copy_sql"),
    ("insert_one_no_notify_sql", "enqueue_one_sql"),
    ("insert_one_no_trigger_sql", "enqueue_one_sql"),
    ("insert_one_no_conflict_sql", "enqueue_one_sql"),
    ("insert_one_bare_sql", "enqueue_one_sql"),
    *((f"uvloop.{m}", m) for m in LOOP_SENSITIVE),
]


def summarise(name: str, runs: list[dict[str, Any]]) -> dict[str, Any]:
    keys = [k for k, v in runs[0].items() if isinstance(v, (int, float))]
    out: dict[str, Any] = {"measure": name, "runs": runs}
    for key in keys:
        values = [r[key] for r in runs]
        out[key] = {"median": statistics.median(values), "min": min(values), "max": max(values)}
    return out


def fmt(stat: dict[str, float], unit: str = "", digits: int = 1) -> str:
    return (
        f"{stat['median']:,.{digits}f}{unit} ({stat['min']:,.{digits}f}–{stat['max']:,.{digits}f})"
    )


def report(results: dict[str, dict[str, Any]]) -> None:
    print()
    width = max([18, *(len(name) for name in results)])
    print(
        f"{'measure':<{width}} {'result (median, min–max)':<44} {'commits/job':>11} "
        f"{'WAL B/job':>10} {'CPU worker/pg':>14} {'CPU µs/job w|c/pg':>17}"
    )
    for name, res in results.items():
        if "jobs_per_s" in res:
            main = fmt(res["jobs_per_s"], " jobs/s")
        else:
            main = "p50 " + fmt(res["p50_ms"], " ms")
        print(f"{name:<{width}} {main:<44} {costs(res)}")
        for line in details(res):
            print(f"{'':<{width}} {line}")
    for top, bottom in RATIOS:
        if top in results and bottom in results:
            ratio = ratio_of(results[top], results[bottom])
            inverted = "" if "jobs_per_s" in results[top] else f" (p99 of {bottom} / p99 of {top})"
            print(f"ratio {top} / {bottom}{inverted}: {ratio:.2f}x")
    for measure in peers.EQUIVALENTS:
        for peer in peers.PEERS:
            key = f"{peer}.{measure}"
            if measure in results and key in results:
                ratio = (
                    results[measure]["jobs_per_s"]["median"] / results[key]["jobs_per_s"]["median"]
                )
                run = results[key]["runs"][0]
                print(f"ratio awa / {peer} ({run['version']}), {measure}: {ratio:.2f}x")
                print(f"  {peer}: {run.get('settings', '')}")


def costs(res: dict[str, Any]) -> str:
    """The cost columns: commits and WAL per job, CPU seconds, CPU µs per job (worker or
    client / PostgreSQL)."""

    def median(key: str) -> float | None:
        value = res.get(key, {}).get("median")
        return None if value is None else float(value)

    commits, wal = median("commits_per_job"), median("wal_bytes_per_job")
    cpu_w, cpu_p = median("cpu_worker_s"), median("cpu_postgres_s")
    us_w = median("cpu_worker_us_per_job")
    us_w = median("cpu_client_us_per_job") if us_w is None else us_w
    us_p = median("cpu_postgres_us_per_job")
    cpu = f"{cpu_w:.2f}s/{cpu_p:.2f}s" if cpu_w is not None and cpu_p is not None else "-"
    us = f"{us_w:,.0f}/{us_p:,.0f}" if us_w is not None and us_p is not None else "-"
    commits_text = "-" if commits is None else f"{commits:.3f}"
    wal_text = "-" if wal is None else f"{wal:,.0f}"
    return f"{commits_text:>11} {wal_text:>10} {cpu:>14} {us:>17}"


def details(res: dict[str, Any]) -> list[str]:
    """The second lines of the latency measures and the deep drain."""
    lines = []
    if "p99_ms" in res:
        lines.append(
            f"p95 {fmt(res['p95_ms'], ' ms')}  p99 {fmt(res['p99_ms'], ' ms')}"
            f"  max {fmt(res['max_ms'], ' ms')}"
        )
    if "max_backlog_s" in res:
        lines.append(
            f"sent {fmt(res['sent_per_s'], ' jobs/s')}  max backlog "
            f"{fmt(res['max_backlog_s'], ' s', 3)}  dead tuples/job {fmt(res['dead_tuples_per_job'], '', 2)}"
        )
    if "last_over_first" in res:
        lines.append(
            f"first 10% {fmt(res['first_10pct_jobs_per_s'], ' jobs/s')}  last 10% "
            f"{fmt(res['last_10pct_jobs_per_s'], ' jobs/s')}  last/first "
            f"{res['last_over_first']['median']:.2f}x"
        )
    if "starts_per_s" in res:
        lines.append(f"starts {fmt(res['starts_per_s'], '/s')} of one key (target ≥ 30/s)")
    if "max_starts_per_window" in res:
        lines.append(
            f"starts per full 1 s window: max {fmt(res['max_starts_per_window'], '', 0)}, min "
            f"{fmt(res['min_starts_per_window'], '', 0)}; most in any 1 s span "
            f"{fmt(res['max_starts_any_1s'], '', 0)} (target 100 ± 5, never above 100)"
        )
    if "claim_probe_ms_start" in res:
        lines.append(
            f"claim probe start {fmt(res['claim_probe_ms_start'], ' ms', 3)} "
            f"{res['claim_probe_buffers_start']['median']:,.0f} buffers, end "
            f"{fmt(res['claim_probe_ms_end'], ' ms', 3)} "
            f"{res['claim_probe_buffers_end']['median']:,.0f} buffers"
        )
    return lines


def ratio_of(top: dict[str, Any], bottom: dict[str, Any]) -> float:
    """Throughput ratio, or for latency measures bottom's p99 over top's (above 1: top wins)."""
    if "jobs_per_s" in top:
        return float(top["jobs_per_s"]["median"] / bottom["jobs_per_s"]["median"])
    return float(bottom["p99_ms"]["median"] / top["p99_ms"]["median"])


@contextlib.contextmanager
def event_loop(name: str) -> Iterator[None]:
    """Workers (and this process's asyncio.run) on ``name`` for the block."""
    import asyncio

    saved_policy, saved_loop = asyncio.get_event_loop_policy(), measures.OPTIONS.loop
    if name == "uvloop":
        import uvloop

        asyncio.set_event_loop_policy(uvloop.EventLoopPolicy())
    measures.OPTIONS.loop = name
    try:
        yield
    finally:
        asyncio.set_event_loop_policy(saved_policy)
        measures.OPTIONS.loop = saved_loop


def run_once(server: BenchServer, label: str, fn: Any, i: int, jobs: int) -> dict[str, Any]:
    """Run ``i`` of one measure on a fresh database, printed as it ends."""
    dsn = server.fresh_database(f"bench_{label.replace('.', '_').replace('@', '_')}_{i}")
    try:
        run: dict[str, Any] = fn(server, dsn, jobs)
    finally:
        server.drop_database(dsn)
    print(
        f"  {label} #{i + 1}: "
        + ", ".join(
            f"{k}={v:,.3f}" if isinstance(v, float) else f"{k}={v}"
            for k, v in run.items()
            if not isinstance(v, (dict, list)) and k != "settings"  # in the JSON only
        ),
        flush=True,
    )
    return run


def run_measure(server: BenchServer, label: str, fn: Any, repeat: int, jobs: int) -> dict[str, Any]:
    return summarise(label, [run_once(server, label, fn, i, jobs) for i in range(repeat)])


def run_interleaved(
    server: BenchServer, contestants: list[tuple[str, Any]], repeat: int, jobs: int
) -> dict[str, dict[str, Any]]:
    """awa's measure and its peers' equivalents, one run of each per round, the order rotated
    every round, so a slow spell of a shared machine falls on every side alike. A peer that
    fails is dropped from the rest of the rounds (awa's results are kept)."""
    runs: dict[str, list[dict[str, Any]]] = {label: [] for label, _ in contestants}
    failed: set[str] = set()
    for i in range(repeat):
        order = contestants[i % len(contestants) :] + contestants[: i % len(contestants)]
        for label, fn in order:
            if label in failed:
                continue
            try:
                runs[label].append(run_once(server, label, fn, i, jobs))
            except Exception as exc:
                if label == contestants[0][0]:
                    raise
                failed.add(label)
                print(f"  {label} failed, skipped: {type(exc).__name__}: {exc}", flush=True)
    return {label: summarise(label, done) for label, done in runs.items() if done}


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks", description=__doc__.splitlines()[0]
    )
    parser.add_argument(
        "--database-url", help="a PostgreSQL server to use (a superuser: it creates databases)"
    )
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--only", help="comma-separated measures: " + ",".join(MEASURES))
    parser.add_argument("--jobs", type=int, default=20_000, help="jobs per drain")
    parser.add_argument(
        "--history",
        type=int,
        help="completed rows before drain_with_history, plus a tenth as many scheduled "
        "(default 50 x --jobs, at most 1,000,000)",
    )
    parser.add_argument(
        "--deep", type=int, help="drain_deep's backlog (default 50 x --jobs, at most 1,000,000)"
    )
    parser.add_argument("--rate", type=float, default=5000.0, help="sustained_load: jobs/s offered")
    parser.add_argument(
        "--duration", type=float, default=60.0, help="sustained_load: seconds offered"
    )
    parser.add_argument(
        "--loop",
        choices=["asyncio", "uvloop", "both"],
        default="asyncio",
        help="the event loop of awa's workers and clients; both: every measure but the "
        "*_sql references again on uvloop, as uvloop.<measure>",
    )
    parser.add_argument("--json", dest="json_path", help="also write the results as JSON here")
    parser.add_argument(
        "--compare",
        action="store_true",
        help="also run procrastinate and pgqueuer (pip install -e '.[bench]') where they "
        "have an equivalent measure: " + ",".join(peers.EQUIVALENTS),
    )
    args = parser.parse_args(argv)
    args.chosen = args.only.split(",") if args.only else [m for m in MEASURES if m not in OPT_IN]
    unknown = [m for m in args.chosen if m not in MEASURES]
    if unknown:
        parser.error(f"unknown measure {unknown[0]!r}")
    if args.loop != "asyncio":
        try:
            import uvloop  # noqa: F401
        except ImportError:
            parser.error("--loop: uvloop is not installed (pip install uvloop)")
    return args


def run_all(
    server: BenchServer, args: argparse.Namespace, save: Callable[[dict[str, Any]], None]
) -> dict[str, dict[str, Any]]:
    """Every chosen measure (on uvloop too with --loop both), each followed by its peers;
    ``save`` gets the results so far after each, so a run cut short keeps what it measured."""
    compared: list[peers.Peer] = []
    if args.compare:
        for peer in peers.PEERS.values():
            if peer.installed():
                compared.append(peer)
            else:
                print(
                    f"--compare: {peer.name} is not installed (pip install -e '.[bench]'): skipped"
                )
    results: dict[str, dict[str, Any]] = {}
    loop = "uvloop" if args.loop == "uvloop" else "asyncio"
    for name in args.chosen:
        contestants = [(name, MEASURES[name])] + [
            (f"{peer.name}.{name}", getattr(peer, peers.EQUIVALENTS[name]))
            for peer in (compared if name in peers.EQUIVALENTS else [])
        ]
        # awa on the loop asked for; each peer as its authors run it (its own setup, printed)
        with event_loop(loop):
            results.update(run_interleaved(server, contestants, args.repeat, args.jobs))
        if args.loop == "both" and name in LOOP_SENSITIVE:
            with event_loop("uvloop"):
                label = f"uvloop.{name}"
                results[label] = run_measure(server, label, MEASURES[name], args.repeat, args.jobs)
        save(results)
    return results


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    measures.OPTIONS.history = args.history
    measures.OPTIONS.deep = args.deep
    measures.OPTIONS.rate = args.rate
    measures.OPTIONS.duration = args.duration
    tmp = Path(tempfile.mkdtemp(prefix="awa-bench-"))
    server = BenchServer(args.database_url, tmp)
    options = {k: v for k, v in vars(args).items() if k not in ("database_url", "json_path")}

    def save(results: dict[str, Any]) -> None:
        if args.json_path:
            document = {
                "machine": machine,
                "options": options,
                "ratios": ratios(results),
                "summary": results,
            }
            Path(args.json_path).write_text(json.dumps(document, indent=2, default=str))

    try:
        machine = describe(server)
        print(
            f"awa benchmarks on {machine['host']} ({machine['cores']} cores, "
            f"{machine['memory']}, Python {machine['python']}), PostgreSQL "
            f"{machine['postgresql']} "
            + " ".join(f"{k}={v}" for k, v in machine["settings"].items()),
            flush=True,
        )
        results = run_all(server, args, save)
    finally:
        server.close()
        shutil.rmtree(tmp, ignore_errors=True)
    report(results)
    return 0


def ratios(results: dict[str, dict[str, Any]]) -> dict[str, float]:
    """``"top / bottom"`` → the ratio, for each pair of RATIOS and each peer that both ran."""
    out = {}
    for top, bottom in RATIOS:
        if top in results and bottom in results:
            out[f"{top} / {bottom}"] = ratio_of(results[top], results[bottom])
    for measure in peers.EQUIVALENTS:
        for peer in peers.PEERS:
            key = f"{peer}.{measure}"
            if measure in results and key in results:
                out[f"{measure} / {key}"] = ratio_of(results[measure], results[key])
    return out


SETTINGS = [
    "fsync",
    "synchronous_commit",
    "full_page_writes",
    "shared_buffers",
    "max_connections",
    "wal_level",
    "max_wal_size",
    "checkpoint_timeout",
    "autovacuum",
]


def describe(server: BenchServer) -> dict[str, Any]:
    """The machine and the server's settings, for the report and the JSON."""
    try:
        kib = int(Path("/proc/meminfo").read_text().split()[1])
        memory = f"{kib / 1024 / 1024:.1f} GiB RAM"
    except (OSError, ValueError, IndexError):
        memory = "RAM unknown"
    return {
        "host": platform.node(),
        "cores": os.cpu_count(),
        "memory": memory,
        "python": platform.python_version(),
        "postgresql": server.version(),
        "settings": {name: server.setting(name) for name in SETTINGS},
    }


if __name__ == "__main__":
    sys.exit(main())
