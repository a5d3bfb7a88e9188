"""The benchmark runner still runs (tiny sizes; no timing is asserted)."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from tests.helpers import ROOT

pytestmark = [pytest.mark.integration]


def run_benchmarks(pg_server: Any, tmp_path: Path, *options: str) -> tuple[dict[str, Any], str]:
    """``python -m benchmarks --repeat 1 OPTIONS`` on the test server: (summary, stdout)."""
    out = tmp_path / "results.json"
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "benchmarks",
            "--database-url",
            pg_server.dsn_for("postgres"),
            "--repeat",
            "1",
            "--json",
            str(out),
            *options,
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    document = json.loads(out.read_text())
    assert document["machine"]["settings"]["fsync"] in ("on", "off")
    return document["summary"], done.stdout


def test_benchmark_runner_end_to_end(pg_server, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    results, stdout = run_benchmarks(
        pg_server,
        tmp_path,
        "--jobs",
        "300",
        "--only",
        "drain,enqueue_one,insert_many,claim_complete_sql,enqueue_one_sql,insert_many_copy_sql,"
        "claim_complete_overlap_sql,drain_limited,drain_follow_up,drain_without_claim_ahead,"
        "enqueue_one_function",
    )
    assert set(results) == {
        "drain",
        "drain_limited",
        "drain_follow_up",
        "drain_without_claim_ahead",
        "enqueue_one",
        "enqueue_one_function",
        "insert_many",
        "claim_complete_sql",
        "enqueue_one_sql",
        "insert_many_copy_sql",
        "claim_complete_overlap_sql",
    }
    assert results["drain"]["jobs_per_s"]["median"] > 0
    assert results["drain"]["commits_per_job"]["median"] > 0
    # every drained job was claimed and finalised: two row versions each, until vacuumed
    table = results["drain"]["runs"][0]["table"]
    assert table["n_tup_upd"] >= 2 * 300
    assert table["index_bytes"]["jobs_claim_idx"] > 0
    # the bare loop completed every job it claimed: one durable commit per claim of up to 10
    assert results["claim_complete_sql"]["commits_per_job"]["median"] >= 0.2
    assert results["claim_complete_overlap_sql"]["commits_per_job"]["median"] >= 0.2
    assert results["enqueue_one_sql"]["commits_per_job"]["median"] >= 1
    assert "jobs/s" in stdout
    assert "ratio drain / claim_complete_sql:" in stdout
    assert "ratio drain / drain_without_claim_ahead:" in stdout
    # the limited and follow-up drains wait for their own jobs (queue bench), not a kind
    assert results["drain_limited"]["jobs_per_s"]["median"] > 0
    assert results["drain_follow_up"]["jobs_per_s"]["median"] > 0
    assert "ratio enqueue_one / enqueue_one_sql:" in stdout
    # one awa.enqueue call per transaction, printed beside the Python insert and its statement
    assert results["enqueue_one_function"]["commits_per_job"]["median"] >= 1
    assert "ratio enqueue_one_function / enqueue_one_sql:" in stdout
    assert "ratio enqueue_one_function / enqueue_one:" in stdout
    assert results["insert_many_copy_sql"]["wal_bytes_per_job"]["median"] > 0

    # The README's targets table from the same JSON: the measures of this run get a figure
    # and a verdict, the ones it left out say so; the machine line names the server settings.
    targets = subprocess.run(
        [sys.executable, "-m", "benchmarks.targets", str(tmp_path / "results.json")],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    ).stdout
    rows = {line.split(" | ")[0].lstrip("| "): line for line in targets.splitlines() if "|" in line}
    drain_rate = f"{results['drain']['jobs_per_s']['median']:,.0f} jobs/s"
    assert drain_rate in rows["`drain`, concurrency 10"]
    insert_ratio = (
        results["insert_many"]["jobs_per_s"]["median"]
        / results["insert_many_copy_sql"]["jobs_per_s"]["median"]
    )
    assert f"{insert_ratio:.2f}×" in rows["`insert_many` / `insert_many_copy_sql`"]
    assert "not run" in rows["`drain_deep` / `drain`"]
    assert "not run" in rows["`drain` / `pgqueuer@defaults` drain"]  # no --compare
    assert "fsync=" in targets.splitlines()[0]


def test_history_deep_and_sustained_measures(pg_server, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    results, stdout = run_benchmarks(
        pg_server,
        tmp_path,
        "--jobs",
        "200",
        "--history",
        "2000",
        "--deep",
        "2000",
        "--rate",
        "400",
        "--duration",
        "1",
        "--only",
        "drain,drain_with_history,drain_deep,drain_deep_vacuumed,sustained_load,"
        "insert_one_no_trigger_sql,insert_one_no_notify_sql,insert_one_no_conflict_sql,"
        "insert_one_bare_sql",
    )
    history = results["drain_with_history"]
    assert history["jobs_per_s"]["median"] > 0
    run = history["runs"][0]
    assert (run["history_completed"], run["history_scheduled"]) == (2000, 200)
    # the history is still there, untouched: 2,200 rows besides the 200 drained
    assert run["table"]["n_live_tup"] >= 2200
    assert "ratio drain_with_history / drain:" in stdout

    deep = results["drain_deep"]
    assert deep["runs"][0]["backlog"] == 2000
    assert deep["first_10pct_jobs_per_s"]["median"] > 0
    assert deep["last_10pct_jobs_per_s"]["median"] > 0
    assert "ratio drain_deep / drain:" in stdout

    load = results["sustained_load"]
    assert load["runs"][0]["jobs"] == 400
    assert 0 < load["p50_ms"]["median"] <= load["p99_ms"]["median"] <= load["max_ms"]["median"]
    assert load["max_backlog_jobs"]["median"] >= 0
    assert load["runs"][0]["backlog_samples"] > 0
    assert load["commits_per_job"]["median"] > 0
    assert load["wal_bytes_per_job"]["median"] > 0
    assert load["dead_tuples_per_job"]["median"] >= 0
    assert load["runs"][0]["loop"].startswith("asyncio")

    # the vacuuming thread ran at least its first VACUUM only if the drain lasted 5 s: the
    # count is reported either way
    assert results["drain_deep_vacuumed"]["runs"][0]["vacuums"] >= 0
    assert "ratio drain_deep_vacuumed / drain_deep:" in stdout

    # the insert references: one durable commit per row each, and WAL counted for each. Their
    # order by WAL is not asserted: a checkpoint by any other test on the shared server makes
    # the next writes carry full-page images (a CI run saw the no-conflict insert at 784
    # bytes/row against 576 for the full one), so the order is the benchmark's to report
    for name in (
        "insert_one_no_trigger_sql",
        "insert_one_no_notify_sql",
        "insert_one_no_conflict_sql",
        "insert_one_bare_sql",
    ):
        assert results[name]["commits_per_job"]["median"] >= 1, name
        # (CPU is counted in clock ticks of 10 ms: 200 inserts may show none)
        assert "cpu_postgres_us_per_job" in results[name], name
        assert results[name]["wal_bytes_per_job"]["median"] > 0, name


@pytest.mark.skipif(importlib.util.find_spec("uvloop") is None, reason="uvloop not installed")
def test_loop_both_runs_the_worker_on_uvloop(pg_server, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    results, stdout = run_benchmarks(
        pg_server, tmp_path, "--jobs", "200", "--only", "pickup_latency", "--loop", "both"
    )
    # the latency jobs record their loop, and the runner fails a run on the wrong one
    assert results["pickup_latency"]["runs"][0]["loop"].startswith("asyncio")
    assert results["uvloop.pickup_latency"]["runs"][0]["loop"] == "uvloop"
    assert "ratio uvloop.pickup_latency / pickup_latency" in stdout


def test_batch_measures(pg_server, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    # 200 --jobs: a 1,000-member batch (and the plain drain of 200 beside it); the measure
    # itself checks that on_success and on_complete were each enqueued exactly once
    results, stdout = run_benchmarks(
        pg_server, tmp_path, "--jobs", "200", "--only", "drain,batch_100k,batch_100k_one_shard"
    )
    for name, shards in (("batch_100k", 16), ("batch_100k_one_shard", 1)):
        run = results[name]["runs"][0]
        assert (run["members"], run["shards"]) == (1000, shards)
        assert results[name]["jobs_per_s"]["median"] > 0
        assert results[name]["wal_bytes_per_job"]["median"] > 0
        assert "cpu_postgres_us_per_job" in results[name]
    assert "ratio batch_100k / drain:" in stdout
    assert "ratio batch_100k_one_shard / batch_100k:" in stdout


def test_compare_runs_each_peer_as_its_authors_do(pg_server, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """``--compare``: pgqueuer on asyncpg and uvloop in two rows (awa's in-flight budget and
    ``pgq run``'s defaults), procrastinate with a pool for every sub-worker; the runs of awa
    and its peers interleaved with the order rotated; every peer's settings printed."""
    results, stdout = run_benchmarks(
        pg_server, tmp_path, "--jobs", "200", "--only", "drain", "--compare", "--repeat", "3"
    )
    labels = ("drain", "procrastinate.drain", "pgqueuer.drain", "pgqueuer@defaults.drain")
    assert set(results) >= set(labels)
    for label in labels:
        assert len(results[label]["runs"]) == 3
        assert results[label]["jobs_per_s"]["median"] > 0
    settings = {label: results[label]["runs"][0]["settings"] for label in labels[1:]}
    assert "asyncpg" in settings["pgqueuer.drain"] and "uvloop" in settings["pgqueuer.drain"]
    assert "max_concurrent_tasks=20" in settings["pgqueuer.drain"]
    assert "no cap" in settings["pgqueuer@defaults.drain"]
    assert "max_size=11" in settings["procrastinate.drain"]
    for label in labels[1:]:
        assert f"  {label.split('.')[0]}: {settings[label]}" in stdout
    # one run of each per round, and each round starts with the next contestant
    firsts = [
        next(line.split()[0] for line in stdout.splitlines() if f" #{i + 1}:" in line)
        for i in range(3)
    ]
    assert firsts == ["drain", "procrastinate.drain", "pgqueuer.drain"]


def test_workflow_fan_measure(pg_server, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """A short workflow_fan (a 150-wide fan-out, then a 150-to-1 fan-in) beside the drain."""
    results, stdout = run_benchmarks(
        pg_server, tmp_path, "--jobs", "300", "--only", "drain,workflow_fan"
    )
    fan = results["workflow_fan"]
    assert fan["jobs_per_s"]["median"] > 0
    assert fan["cpu_postgres_us_per_job"]["median"] > 0 and fan["wal_bytes_per_job"]["median"] > 0
    assert "ratio workflow_fan / drain:" in stdout
