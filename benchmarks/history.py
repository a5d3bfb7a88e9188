"""The drains on a table that is not empty: a day of history (``drain_with_history``) and a
deep backlog (``drain_deep``)."""

from __future__ import annotations

import json
import statistics
import threading
import time
from typing import Any

import psycopg

from benchmarks.app import Noop
from benchmarks.measures import (
    OPTIONS,
    _drain,
    drain_result,
    pre_enqueue_n,
    startup_cpu,
    table_stats,
    wait_for_state,
    worker_process,
)
from benchmarks.server import BenchServer, tree_cpu

# A day of finished work: no-op jobs of the drain's own kind and queue, finalised 4 ms after
# they were created, spread evenly over the last 24 hours, as awa's completion writes them.
COMPLETED_HISTORY = """
INSERT INTO awa.jobs (kind, queue, args, state, attempt, run_lease, run_at, created_at,
                      attempted_at, finalized_at)
SELECT 'noop', 'bench', jsonb_build_object('n', i), 'completed', 1, 1, t, t,
       t + interval '2 ms', t + interval '4 ms'
FROM (SELECT i, now() - interval '1 day' + i * (interval '1 day' / greatest(%(n)s::float8, 1)) AS t
      FROM generate_series(1, %(n)s::int) AS i) AS s
"""

# Work scheduled over the next day, due no earlier than an hour from now: in the claim's
# partial index (state 'scheduled'), never due during the drain.
SCHEDULED_HISTORY = """
INSERT INTO awa.jobs (kind, queue, args, state, run_at, created_at)
SELECT 'noop', 'bench', jsonb_build_object('n', i), 'scheduled',
       now() + interval '1 hour' + i * (interval '1 day' / greatest(%(n)s::float8, 1)), now() - interval '1 hour'
FROM generate_series(1, %(n)s::int) AS i
"""

# The claim's row selection (awa_cli/worker/queues.py CLAIM) without its lock and update:
# what finding the next 10 jobs costs, read-only, next to the running worker.
CLAIM_PROBE = """
EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON)
SELECT id FROM awa.jobs
WHERE queue = 'bench' AND state IN ('available', 'scheduled', 'retryable') AND run_at <= now()
ORDER BY priority, run_at, id
LIMIT 10
"""


def history_sizes(jobs: int) -> tuple[int, int]:
    """Completed and scheduled history rows: ``--history`` or 50 × ``--jobs`` (1,000,000 at
    the default 20,000 jobs, and at most that), and a tenth as many scheduled."""
    completed = OPTIONS.history if OPTIONS.history is not None else min(1_000_000, 50 * jobs)
    return completed, completed // 10


def drain_with_history(server: BenchServer, dsn: str, jobs: int) -> dict[str, Any]:
    """The drain with a day of history in the table: 1,000,000 completed and 100,000
    scheduled rows inserted (and ANALYZEd) before the drain's jobs are enqueued."""
    completed, scheduled = history_sizes(jobs)
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(COMPLETED_HISTORY, {"n": completed})
        conn.execute(SCHEDULED_HISTORY, {"n": scheduled})
        # As a day-old table is: vacuumed (visibility map), analysed, and checkpointed (so
        # writing the history out does not land on the drain's CPU and WAL).
        conn.execute("VACUUM (ANALYZE) awa.jobs")
        conn.execute("CHECKPOINT")
        boundary = int(conn.execute("SELECT coalesce(max(id), 0) FROM awa.jobs").fetchone()[0])  # type: ignore[index]
    # The scheduled history stays in queue bench: the drain is done when no job is due.
    result = _drain(server, dsn, jobs, Noop, after_id=boundary, due_only=True)
    return {**result, "history_completed": completed, "history_scheduled": scheduled}


def deep_size(jobs: int) -> int:
    """drain_deep's backlog: ``--deep`` or 50 × ``--jobs`` (1,000,000 at the default), at most
    1,000,000."""
    return OPTIONS.deep if OPTIONS.deep is not None else min(1_000_000, 50 * jobs)


def drain_deep(server: BenchServer, dsn: str, jobs: int) -> dict[str, Any]:
    """1,000,000 available jobs drained to the end by one worker at concurrency 10: jobs/s
    overall and over the first and the last 10% of completions, and the claim's cost (a
    read-only probe of its row selection) while the backlog is full and when nearly empty."""
    return _drain_deep(server, dsn, jobs)


def drain_deep_vacuumed(server: BenchServer, dsn: str, jobs: int) -> dict[str, Any]:
    """Reference: drain_deep with ``VACUUM awa.jobs`` every 5 s from the runner (what a
    maintenance-driven vacuum would buy the claim, and cost)."""
    return _drain_deep(server, dsn, jobs, vacuum_every=5.0)


def _drain_deep(
    server: BenchServer, dsn: str, jobs: int, vacuum_every: float | None = None
) -> dict[str, Any]:
    count = deep_size(jobs)
    pre_enqueue_n(dsn, count, Noop)
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("ANALYZE awa.jobs")
    before = server.snapshot(dsn)
    probe = ClaimProbe(dsn, vacuum_every)
    probe.start()
    try:
        with worker_process(dsn, concurrency=10) as proc:
            startup = startup_cpu(dsn, proc.pid)
            wait_for_state(dsn, "completed", count, timeout=max(600, count / 500))
            worker_cpu = tree_cpu(proc.pid)
    finally:
        probe.stop()
    after = server.snapshot(dsn)
    start, first, last, end = windows(dsn, count)
    result = drain_result(server, count, end - start, before, after, worker_cpu, startup)
    return {
        **result,
        "backlog": count,
        "first_10pct_jobs_per_s": first,
        "last_10pct_jobs_per_s": last,
        "last_over_first": last / first,
        **probe.summary(),
        **table_stats(dsn, count),
    }


def windows(dsn: str, count: int) -> tuple[float, float, float, float]:
    """The drain's first claim, its rates over the first and the last tenth of completions
    (by finalized_at), and its last completion."""
    with psycopg.connect(dsn) as conn:
        start, p10, p90, end = (
            float(v)
            for v in conn.execute(
                "SELECT extract(epoch FROM min(attempted_at)), "
                "extract(epoch FROM percentile_disc(0.1) WITHIN GROUP (ORDER BY finalized_at)), "
                "extract(epoch FROM percentile_disc(0.9) WITHIN GROUP (ORDER BY finalized_at)), "
                "extract(epoch FROM max(finalized_at)) FROM awa.jobs WHERE state = 'completed'"
            ).fetchone()  # type: ignore[union-attr]
        )
    tenth = count / 10
    return start, tenth / max(p10 - start, 1e-6), tenth / max(end - p90, 1e-6), end


class ClaimProbe:
    """Runs CLAIM_PROBE once a second on its own connection while the worker drains, keeping
    the execution time and the shared buffers touched of each probe that found 10 jobs; with
    ``vacuum_every``, also runs ``VACUUM awa.jobs`` that often (one at a time)."""

    def __init__(self, dsn: str, vacuum_every: float | None = None) -> None:
        self.dsn = dsn
        self.vacuum_every = vacuum_every
        self.vacuums: list[float] = []  # seconds each VACUUM took
        self.samples: list[tuple[float, int]] = []
        self.series: list[tuple[float, float, int, int]] = []  # s, ms, buffers, rows
        self._began = time.monotonic()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="claim-probe", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        with psycopg.connect(self.dsn, autocommit=True) as conn:
            last_vacuum = time.monotonic()
            while True:
                if self.vacuum_every and time.monotonic() - last_vacuum >= self.vacuum_every:
                    began = time.monotonic()
                    conn.execute("VACUUM awa.jobs")
                    last_vacuum = time.monotonic()
                    self.vacuums.append(last_vacuum - began)
                raw = conn.execute(CLAIM_PROBE).fetchone()[0]  # type: ignore[index]
                plan = (json.loads(raw) if isinstance(raw, str) else raw)[0]
                top = plan["Plan"]
                buffers = int(top.get("Shared Hit Blocks", 0) + top.get("Shared Read Blocks", 0))
                ms, rows = float(plan["Execution Time"]), int(top.get("Actual Rows", 0))
                self.series.append((round(time.monotonic() - self._began, 1), ms, buffers, rows))
                if rows >= 10:
                    self.samples.append((ms, buffers))
                if self._stop.wait(1.0):
                    return

    def summary(self) -> dict[str, Any]:
        """Median of the first three and of the last three probes (backlog full / nearly
        empty): ms and buffers per claim of 10; empty if fewer than two probes ran."""
        vacuums = {"vacuums": len(self.vacuums), "vacuum_s": sum(self.vacuums)}
        if len(self.samples) < 2:
            return {"claim_probes": self.series, **(vacuums if self.vacuum_every else {})}
        k = min(3, len(self.samples) // 2)
        head, tail = self.samples[:k], self.samples[-k:]
        return {
            "claim_probe_ms_start": statistics.median(s[0] for s in head),
            "claim_probe_ms_end": statistics.median(s[0] for s in tail),
            "claim_probe_buffers_start": statistics.median(s[1] for s in head),
            "claim_probe_buffers_end": statistics.median(s[1] for s in tail),
            "claim_probes": self.series,  # every probe: seconds, ms, buffers, rows found
            **(vacuums if self.vacuum_every else {}),
        }
