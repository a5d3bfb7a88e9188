"""The measures. Each takes the server, a fresh migrated database and the job count, and
returns numbers; workers run as real ``awa worker`` processes."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, LiteralString

import psycopg

import awa_cli as awa
from benchmarks.app import Noop, NoopWithFollowUp, Tenanted
from benchmarks.server import BenchServer, tree_cpu

ROOT = Path(__file__).resolve().parents[1]
AWA = str(Path(sys.executable).parent / "awa")
# On PYTHONPATH, its sitecustomize.py makes every Python process started with it use uvloop.
UVLOOP_SITE = Path(__file__).resolve().parent / "uvloop_site"


@dataclass
class Options:
    """The runner's sizes beyond ``--jobs`` (None: derived from it) and the workers' loop."""

    history: int | None = None  # completed rows before drain_with_history (+ a tenth scheduled)
    deep: int | None = None  # available jobs of drain_deep
    rate: float = 5000.0  # sustained_load: offered jobs/s
    duration: float = 60.0  # sustained_load: seconds offered
    loop: str = "asyncio"  # the awa worker processes' event loop: asyncio or uvloop


OPTIONS = Options()


def python_path() -> str:
    """PYTHONPATH of a worker process (awa's or a peer's): this checkout, and uvloop's
    sitecustomize first when the workers run on uvloop."""
    path = [str(ROOT)]
    if OPTIONS.loop == "uvloop":
        path.insert(0, str(UVLOOP_SITE))
    return os.pathsep.join(path)


def worker_env(dsn: str) -> dict[str, str]:
    """The environment of a worker process: the database, this checkout, and the loop."""
    return {**os.environ, "AWA_DATABASE_URL": dsn, "PYTHONPATH": python_path()}


@contextlib.contextmanager
def worker_process(
    dsn: str,
    concurrency: int = 10,
    processes: int = 1,
    app: str = "benchmarks.app",
    extra_config: str = "",
) -> Iterator[subprocess.Popen[bytes]]:
    """A real ``awa worker`` on queue ``bench``; stopped with SIGTERM afterwards."""
    with tempfile.TemporaryDirectory() as tmp:
        config = Path(tmp) / "awa.toml"
        config.write_text(
            f'[app]\nmodules = ["{app}"]\n[queues.bench]\nconcurrency = {concurrency}\n'
            + extra_config
        )
        env = worker_env(dsn)
        cmd = [AWA, "--config", str(config), "-q", "worker", "--processes", str(processes)]
        with running(cmd, env) as proc:
            yield proc


@contextlib.contextmanager
def running(cmd: list[str], env: dict[str, str]) -> Iterator[subprocess.Popen[bytes]]:
    """A worker process, stopped with SIGTERM (then killed) when the block ends."""
    proc = subprocess.Popen(cmd, env=env, cwd=ROOT)
    try:
        yield proc
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def wait_for_state(
    dsn: str,
    state: str,
    count: int,
    timeout: float = 600,
    queue: str | None = None,
    after_id: int = 0,
    due_only: bool = False,
) -> None:
    """Wait until ``count`` jobs (of ``queue``, with ids above ``after_id``) are in ``state``,
    without loading the server: a cheap index probe for unfinished work in queue ``bench``
    (runnable rows — only those due with ``due_only`` — or running) every 200 ms, and the
    exact count only once that is empty. The drains are timed from the jobs' own timestamps,
    so the interval only delays the return; it is long because the probe's own CPU counts in
    PostgreSQL's CPU per job and grows with the dead index entries of a deep queue (every
    20 ms it was 28 of ~230 samples of the server's activity through ``batch_100k``)."""
    deadline = time.monotonic() + timeout
    pending = (
        "SELECT EXISTS (SELECT 1 FROM awa.jobs WHERE queue = 'bench' "
        "AND state IN ('available', 'scheduled', 'retryable')"
        + (" AND run_at <= now()) " if due_only else ") ")
        + "OR EXISTS (SELECT 1 FROM awa.jobs WHERE state = 'running' AND queue = 'bench')"
    )
    query = "SELECT count(*) FROM awa.jobs WHERE state = %(state)s AND id > %(after)s" + (
        " AND queue = %(queue)s" if queue else ""
    )
    params = {"state": state, "queue": queue, "after": after_id}
    with psycopg.connect(dsn, autocommit=True) as conn:
        while True:
            if not conn.execute(pending, params).fetchone()[0]:  # type: ignore[index]
                if conn.execute(query, params).fetchone()[0] >= count:  # type: ignore[index]
                    return
            if time.monotonic() > deadline:
                raise TimeoutError(f"{count} {state} jobs not reached in {timeout}s")
            time.sleep(0.2)


def per_job(server: BenchServer, dsn: str, jobs: int, run: Callable[[], float]) -> dict[str, Any]:
    """Rate, commits and WAL bytes per job of ``run`` (which returns the seconds it timed),
    from server snapshots taken before and after it."""
    before = server.snapshot(dsn)
    client_cpu = time.process_time()
    elapsed = run()
    client_cpu = time.process_time() - client_cpu
    after = server.snapshot(dsn)
    return {
        "jobs_per_s": jobs / elapsed,
        "commits_per_job": (after["commits"] - before["commits"]) / jobs,
        "wal_bytes_per_job": server.wal_bytes(before["lsn"], after["lsn"]) / jobs,
        # CPU per job moves much less than the rate when the machine is shared
        "cpu_client_us_per_job": client_cpu / jobs * 1e6,
        "cpu_postgres_us_per_job": (after["cpu"] - before["cpu"]) / jobs * 1e6,
    }


def pre_enqueue(dsn: str, args: list[Any]) -> None:
    with awa.Client(dsn) as client:
        for i in range(0, len(args), 5000):
            client.insert_many(args[i : i + 5000], queue="bench")


def pre_enqueue_n(dsn: str, count: int, make: Any) -> None:
    """``count`` jobs ``make(i)`` with insert_many, 5,000 a batch, built a batch at a time."""
    with awa.Client(dsn) as client:
        for i in range(0, count, 5000):
            client.insert_many([make(n) for n in range(i, min(count, i + 5000))], queue="bench")


def _drain(
    server: BenchServer,
    dsn: str,
    jobs: int,
    make: Any,
    processes: int = 1,
    concurrency: int = 10,
    extra_config: str = "",
    after_id: int = 0,
    due_only: bool = False,
) -> dict[str, Any]:
    """Enqueue ``jobs`` (ids above ``after_id``: rows already there are not counted), drain
    them with one ``awa worker``, and report the drain (``drain_result``) and the table."""
    pre_enqueue_n(dsn, jobs, make)
    before = server.snapshot(dsn)
    with worker_process(
        dsn, concurrency=concurrency, processes=processes, extra_config=extra_config
    ) as proc:
        startup = startup_cpu(dsn, proc.pid, after_id)
        wait_for_state(
            dsn,
            "completed",
            jobs,
            timeout=max(600, jobs / 500),
            queue="bench",  # not the follow-ups (queue follow_ups), which nothing works
            after_id=after_id,
            due_only=due_only,
        )
        worker_cpu = tree_cpu(proc.pid)
    after = server.snapshot(dsn)
    with psycopg.connect(dsn) as conn:
        span = completed_span(conn, "queue = 'bench' AND id > %s", (after_id,))
    result = drain_result(server, jobs, span, before, after, worker_cpu, startup)
    return {**result, **table_stats(dsn, jobs)}


def completed_span(conn: psycopg.Connection[Any], where: LiteralString, params: Any) -> float:
    """The drain's span: seconds from the first claim to the last durable completion of the
    completed jobs matching ``where`` (awa's own timestamps, so start-up is not counted)."""
    row = conn.execute(
        "SELECT extract(epoch FROM max(finalized_at) - min(attempted_at)) FROM awa.jobs "
        "WHERE state = 'completed' AND " + where,
        params,
    ).fetchone()
    return float(row[0])  # type: ignore[index]


def startup_cpu(dsn: str, pid: int, after_id: int = 0, timeout: float = 60) -> float:
    """The worker's CPU seconds when its first job (the lowest id above ``after_id``, which
    the first claim takes) has left 'available', polled every 10 ms by primary key: its
    start-up, taken off its CPU per job."""
    deadline = time.monotonic() + timeout
    probe = (
        "SELECT coalesce(bool_or(state <> 'available'), false) FROM awa.jobs "
        "WHERE id = (SELECT min(id) FROM awa.jobs WHERE id > %s)"
    )
    with psycopg.connect(dsn, autocommit=True) as conn:
        while not conn.execute(probe, (after_id,)).fetchone()[0]:  # type: ignore[index]
            if time.monotonic() > deadline:
                raise TimeoutError(f"the worker claimed nothing in {timeout}s")
            time.sleep(0.01)
    return tree_cpu(pid)


def table_stats(dsn: str, jobs: int) -> dict[str, Any]:
    """awa.jobs after a run, once the worker has stopped (its backends flush their statistics
    when they exit): dead tuples per job, HOT updates, heap and index sizes. Reference only:
    in the JSON, not in the printed table; autovacuum may have run (``autovacuums``)."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        live, dead, upd, hot, heap, vacuums = conn.execute(
            "SELECT n_live_tup, n_dead_tup, n_tup_upd, n_tup_hot_upd, pg_relation_size(relid), "
            "autovacuum_count FROM pg_stat_user_tables "
            "WHERE schemaname = 'awa' AND relname = 'jobs'"
        ).fetchone()  # type: ignore[misc]
        indexes = dict(
            conn.execute(
                "SELECT indexrelname, pg_relation_size(indexrelid) FROM pg_stat_user_indexes "
                "WHERE schemaname = 'awa' AND relname = 'jobs' ORDER BY indexrelname"
            ).fetchall()
        )
    return {
        "dead_tuples_per_job": dead / jobs,
        "hot_update_share": hot / upd if upd else 0.0,
        "index_bytes": sum(indexes.values()),
        "table": {
            "n_live_tup": live,
            "n_dead_tup": dead,
            "n_tup_upd": upd,
            "n_tup_hot_upd": hot,
            "autovacuums": vacuums,
            "heap_bytes": heap,
            "index_bytes": indexes,
        },
    }


def drain_result(
    server: BenchServer,
    jobs: int,
    span: float,
    before: dict[str, Any],
    after: dict[str, Any],
    worker_cpu: float,
    startup: float = 0.0,
) -> dict[str, Any]:
    """A drain's numbers: rate over the measured span, commits, WAL and CPU per the snapshots."""
    return {
        "jobs_per_s": jobs / span,
        "seconds": span,
        "commits_per_job": (after["commits"] - before["commits"]) / jobs,
        "wal_bytes_per_job": server.wal_bytes(before["lsn"], after["lsn"]) / jobs,
        "cpu_worker_s": worker_cpu,
        "cpu_postgres_s": after["cpu"] - before["cpu"],
        "cpu_worker_startup_s": startup,
        # the worker's without its start-up
        "cpu_worker_us_per_job": (worker_cpu - startup) / jobs * 1e6,
        "cpu_postgres_us_per_job": (after["cpu"] - before["cpu"]) / jobs * 1e6,
    }


def drain(server: BenchServer, dsn: str, jobs: int) -> dict[str, Any]:
    """Pre-enqueued no-op jobs, concurrency 10: first claim → last durable completion."""
    return _drain(server, dsn, jobs, Noop)


# Every job of drain_limited is under this limit: 100 tenants, a limit none of them reaches.
GENEROUS_LIMIT = '[limits.per_tenant]\nkind = "tenanted"\nkey = "args.tenant"\nmax_running = 1000\n'


def drain_limited(server: BenchServer, dsn: str, jobs: int) -> dict[str, Any]:
    """The drain with every job under a generous per-tenant limit (100 tenants)."""
    return _drain(
        server, dsn, jobs, lambda i: Tenanted(i, f"t{i % 100}"), extra_config=GENEROUS_LIMIT
    )


def drain_follow_up(server: BenchServer, dsn: str, jobs: int) -> dict[str, Any]:
    """The drain with one on_completed_enqueue spec per job (a follow-up insert each)."""
    return _drain(server, dsn, jobs, NoopWithFollowUp)


def drain_processes_2(server: BenchServer, dsn: str, jobs: int) -> dict[str, Any]:
    """The drain with ``--processes 2``."""
    return _drain(server, dsn, jobs, Noop, processes=2)


def drain_concurrency_100(server: BenchServer, dsn: str, jobs: int) -> dict[str, Any]:
    """Reference: the drain with concurrency 100 (claims of up to 100 jobs)."""
    return _drain(server, dsn, jobs, Noop, concurrency=100)


def drain_without_claim_ahead(server: BenchServer, dsn: str, jobs: int) -> dict[str, Any]:
    """Reference: the drain with ``claim_ahead = false`` (claims of the free slots only)."""
    return _drain(server, dsn, jobs, Noop, extra_config="claim_ahead = false\n")


def enqueue_one(server: BenchServer, dsn: str, jobs: int) -> dict[str, Any]:
    """``insert`` one by one, each in its own transaction."""
    count = min(jobs, 5000)

    async def run() -> float:
        async with awa.AsyncClient(dsn) as client:
            start = time.perf_counter()
            for i in range(count):
                await client.insert(Noop(i), queue="bench")
            return time.perf_counter() - start

    return per_job(server, dsn, count, lambda: asyncio.run(run()))


def enqueue_one_function(server: BenchServer, dsn: str, jobs: int) -> dict[str, Any]:
    """``awa.enqueue`` (the SQL function other languages call) one by one, each in its own
    transaction, from a bare psycopg connection: what a Node or Go producer gets."""
    count = min(jobs, 5000)
    statement = "SELECT awa.enqueue(kind => %(kind)s, args => %(args)s::jsonb, queue => 'bench')"

    def run() -> float:
        with psycopg.connect(dsn, autocommit=True) as conn:
            start = time.perf_counter()
            for i in range(count):
                params = {"kind": "noop", "args": f'{{"n":{i}}}'}
                conn.execute(statement, params, prepare=True).fetchone()
            return time.perf_counter() - start

    return per_job(server, dsn, count, run)


def insert_many(server: BenchServer, dsn: str, jobs: int) -> dict[str, Any]:
    """``insert_many`` in batches of 1,000."""
    batches = max(1, jobs * 5 // 1000)
    payload = [[Noop(b * 1000 + i) for i in range(1000)] for b in range(batches)]

    async def run() -> float:
        async with awa.AsyncClient(dsn) as client:
            start = time.perf_counter()
            for batch in payload:
                await client.insert_many(batch, queue="bench")
            return time.perf_counter() - start

    return per_job(server, dsn, batches * 1000, lambda: asyncio.run(run()))


def pickup_latency(server: BenchServer, dsn: str, jobs: int) -> dict[str, Any]:
    """An idle worker; 500 jobs enqueued 5 ms apart: handler start − enqueue commit."""
    count = 500
    commits: dict[int, float] = {}
    with worker_process(dsn, concurrency=10, app="benchmarks.latency_app"):
        with awa.Client(dsn) as client:
            client.list_jobs(limit=1)
            time.sleep(1.5)  # the worker is up and idle
            for i in range(count):
                row = client.insert({"n": i}, kind="stamp", queue="bench")
                commits[row.id] = time.time()
                time.sleep(0.005)
        wait_for_state(dsn, "completed", count)
    with psycopg.connect(dsn) as conn:
        started = dict(
            conn.execute("SELECT id, (output->>'started')::float8 FROM awa.jobs").fetchall()
        )
    return {
        **quantiles_ms([(started[i] - commits[i]) * 1000 for i in commits]),
        **{"loop": worker_loop(dsn)},
    }


def quantiles_ms(latencies: list[float]) -> dict[str, float]:
    """p50, p95, p99 and max of latencies in ms."""
    latencies = sorted(latencies)
    q = statistics.quantiles(latencies, n=100)
    return {
        "p50_ms": statistics.median(latencies),
        "p95_ms": q[94],
        "p99_ms": q[98],
        "max_ms": latencies[-1],
    }


def worker_loop(dsn: str) -> str:
    """The event loop module the latency jobs ran on; fails if it is not the one asked for."""
    with psycopg.connect(dsn) as conn:
        loops = {r[0] for r in conn.execute("SELECT DISTINCT output->>'loop' FROM awa.jobs")}
    expected = "uvloop" if OPTIONS.loop == "uvloop" else "asyncio"
    if len(loops) != 1 or not str(next(iter(loops))).startswith(expected):
        raise RuntimeError(f"the worker ran on {sorted(map(str, loops))}, not {expected}")
    return str(next(iter(loops)))
