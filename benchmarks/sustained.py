"""``sustained_load``: a steady offered load instead of a drain. A separate producer process
(benchmarks/producer.py) offers ``--rate`` jobs/s for ``--duration`` s to one ``awa worker``
at concurrency 50; latency is enqueue commit → handler start, per job."""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import psycopg

from benchmarks.measures import (
    OPTIONS,
    ROOT,
    quantiles_ms,
    table_stats,
    wait_for_state,
    worker_env,
    worker_loop,
    worker_process,
)
from benchmarks.server import BenchServer, tree_cpu

BACKLOG = "SELECT count(*) FROM awa.jobs WHERE queue = 'bench' AND state = 'available'"


class BacklogSampler:
    """Counts the available jobs every 100 ms on its own connection; keeps the maximum."""

    def __init__(self, dsn: str) -> None:
        self.dsn = dsn
        self.max = 0
        self.samples = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="backlog", daemon=True)

    def __enter__(self) -> BacklogSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        with psycopg.connect(self.dsn, autocommit=True) as conn:
            while not self._stop.wait(0.1):
                self.max = max(self.max, int(conn.execute(BACKLOG).fetchone()[0]))  # type: ignore[index]
                self.samples += 1


def sustained_load(server: BenchServer, dsn: str, jobs: int) -> dict[str, Any]:
    """A producer process offers 5,000 jobs/s for 60 s to one worker at concurrency 50:
    enqueue commit → handler start, the backlog, and commits, WAL and dead tuples per job."""
    rate, duration = OPTIONS.rate, OPTIONS.duration
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "producer.json"
        cmd = [sys.executable, "-m", "benchmarks.producer", str(out)]
        cmd += ["--rate", str(rate), "--duration", str(duration)]
        with worker_process(dsn, concurrency=50, app="benchmarks.latency_app") as proc:
            time.sleep(1.5)  # the worker is up and idle
            before = server.snapshot(dsn)
            idle_cpu = tree_cpu(proc.pid)  # its start-up, not counted per job
            with BacklogSampler(dsn) as backlog:
                # The producer runs on the standard loop whatever --loop says: only the
                # worker's loop is under test.
                env = {**worker_env(dsn), "PYTHONPATH": str(ROOT)}
                subprocess.run(cmd, env=env, cwd=ROOT, check=True, timeout=duration + 120)
                produced = json.loads(out.read_text())
                wait_for_state(dsn, "completed", produced["sent"], timeout=600)
            worker_cpu = tree_cpu(proc.pid) - idle_cpu
    after = server.snapshot(dsn)
    sent = int(produced["sent"])
    commits = produced["commit_times"]
    with psycopg.connect(dsn) as conn:
        rows = conn.execute(
            "SELECT (args->>'b')::int, (output->>'started')::float8 FROM awa.jobs"
        ).fetchall()
    stats = table_stats(dsn, sent)
    return {
        **quantiles_ms([(started - commits[b]) * 1000 for b, started in rows]),
        "jobs": sent,
        "offered_per_s": rate,
        "sent_per_s": sent / produced["seconds"],
        "max_batch": produced["max_batch"],
        "max_backlog_jobs": backlog.max,
        "max_backlog_s": backlog.max / rate,
        "backlog_samples": backlog.samples,
        "commits_per_job": (after["commits"] - before["commits"]) / sent,
        "wal_bytes_per_job": server.wal_bytes(before["lsn"], after["lsn"]) / sent,
        "cpu_worker_s": worker_cpu,
        "cpu_postgres_s": after["cpu"] - before["cpu"],
        "cpu_worker_us_per_job": worker_cpu / sent * 1e6,
        "cpu_postgres_us_per_job": (after["cpu"] - before["cpu"]) / sent * 1e6,
        "dead_tuples_per_job": stats.pop("dead_tuples_per_job"),
        **stats,
        "loop": worker_loop(dsn),
    }
