"""The benchmark runner still runs (tiny sizes; no timing is asserted)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from tests.helpers import ROOT

pytestmark = [pytest.mark.integration]


def test_benchmark_runner_end_to_end(pg_server, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
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
            "--jobs",
            "300",
            "--only",
            "drain,enqueue_one,insert_many,claim_complete_sql,enqueue_one_sql,insert_many_copy_sql",
            "--json",
            str(out),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    results = json.loads(out.read_text())
    assert set(results) == {
        "drain",
        "enqueue_one",
        "insert_many",
        "claim_complete_sql",
        "enqueue_one_sql",
        "insert_many_copy_sql",
    }
    assert results["drain"]["jobs_per_s"]["median"] > 0
    assert results["drain"]["commits_per_job"]["median"] > 0
    # the bare loop completed every job it claimed: one durable commit per claim of up to 10
    assert results["claim_complete_sql"]["commits_per_job"]["median"] >= 0.2
    assert results["enqueue_one_sql"]["commits_per_job"]["median"] >= 1
    assert "jobs/s" in done.stdout
    assert "ratio drain / claim_complete_sql:" in done.stdout
    assert "ratio enqueue_one / enqueue_one_sql:" in done.stdout
    assert results["insert_many_copy_sql"]["wal_bytes_per_job"]["median"] > 0
