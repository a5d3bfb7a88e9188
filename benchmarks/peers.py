"""The peers of ``python -m benchmarks --compare``: procrastinate and pgqueuer (the ``bench`` extra).

Every peer runs as its authors recommend (architecture §18): pgqueuer on asyncpg and uvloop, as its
README and ``pgq run`` do, in two rows: ``pgqueuer`` at awa's in-flight budget (batches of 10, at
most 20 picked: awa's concurrency 10 plus its claim-ahead) and ``pgqueuer@defaults`` at
``pgq run``'s own settings (batches of 10, no cap); procrastinate on its psycopg connector with
a pool of concurrency + 1 connections (one per sub-worker and the listener: its docs' "mind the
size of your PostgreSQL pool"; psycopg_pool's default of 4 would starve 10 sub-workers). Each
peer's ``settings`` are printed with its numbers and kept in the JSON.

Each peer runs on a fresh database of the same server as awa's measures (which already holds
awa's schema: harmless), with the same job count. Every peer offers:

* ``drain(server, dsn, jobs)``: ``jobs`` no-op jobs pre-enqueued with the peer's bulk API, then
  the peer's own worker in a subprocess with concurrency 10; first start → last completion, from
  the peer's own table timestamps (``method`` says which), else wall clock from the worker's
  first job to the last completion seen by polling.
* ``enqueue_one(server, dsn, jobs)``: the peer's single-job enqueue, one by one, each in its own
  transaction (min(jobs, 5,000) jobs, like awa's).

Commits and WAL bytes per job, and the worker's and PostgreSQL's CPU, are measured as for awa.
Only the peers' public APIs are used.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib.metadata
import importlib.util
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import psycopg

from benchmarks.measures import drain_result, per_job, python_path, running
from benchmarks.server import BenchServer, tree_cpu

ROOT = Path(__file__).resolve().parents[1]
CONCURRENCY = 10
BATCH = 5000


@contextlib.contextmanager
def peer_worker(
    module: str, dsn: str, first_job_file: Path, extra: dict[str, str]
) -> Iterator[subprocess.Popen[bytes]]:
    """``python -m benchmarks.peer_workers.<module>``; stopped with SIGTERM afterwards."""
    env = {
        **extra,
        **os.environ,
        "BENCH_DSN": dsn,
        "BENCH_CONCURRENCY": str(CONCURRENCY),
        "BENCH_FIRST_JOB_FILE": str(first_job_file),
        "PYTHONPATH": python_path(),  # uvloop's sitecustomize too with --loop uvloop
    }
    with running([sys.executable, "-m", f"benchmarks.peer_workers.{module}"], env) as proc:
        yield proc


# A count(*) over a growing table costs the server real CPU; the drains are timed from the
# queues' own timestamps, so polling only decides when to stop and can be unhurried.
POLL_SECONDS = 0.25


def wait_for_count(
    dsn: str, query: str, count: int, proc: subprocess.Popen[bytes], timeout: float = 600
) -> float:
    """Poll ``query`` (a count) until it reaches ``count``; the wall clock when it did."""
    deadline = time.monotonic() + timeout
    with psycopg.connect(dsn, autocommit=True) as conn:
        while conn.execute(query).fetchone()[0] < count:  # type: ignore[index]
            if proc.poll() is not None:
                raise RuntimeError(
                    f"the worker exited with {proc.returncode} before {count} jobs were done"
                )
            if time.monotonic() > deadline:
                raise TimeoutError(f"{count} jobs not done in {timeout}s")
            time.sleep(POLL_SECONDS)
        return time.time()


class Peer:
    name = ""
    package = ""
    worker_module = ""
    done_query = ""  # count of jobs completed
    span_query = ""  # seconds from first start to last completion, from the peer's tables
    span_method = ""
    settings = ""  # how the peer is run: printed with its results
    requires: tuple[str, ...] = ()  # modules beyond the package itself

    def installed(self) -> bool:
        names = (self.package.replace("-", "_"), *self.requires)
        return all(importlib.util.find_spec(name) is not None for name in names)

    def worker_env(self) -> dict[str, str]:
        return {}

    def version(self) -> str:
        return importlib.metadata.version(self.package)

    def install_schema(self, dsn: str) -> None:
        raise NotImplementedError

    def enqueue_bulk(self, dsn: str, jobs: int) -> None:
        raise NotImplementedError

    def enqueue_each(self, dsn: str, count: int) -> float:
        """Enqueue ``count`` jobs one by one; the seconds it took."""
        raise NotImplementedError

    def drain(self, server: BenchServer, dsn: str, jobs: int) -> dict[str, Any]:
        """Pre-enqueued no-op jobs, concurrency 10: first start → last completion."""
        self.install_schema(dsn)
        self.enqueue_bulk(dsn, jobs)
        before = server.snapshot(dsn)
        with tempfile.TemporaryDirectory() as tmp:
            first_job_file = Path(tmp) / "first_job"
            with peer_worker(self.worker_module, dsn, first_job_file, self.worker_env()) as proc:
                last_seen = wait_for_count(dsn, self.done_query, jobs, proc)
                worker_cpu = tree_cpu(proc.pid)
            first_job = float(first_job_file.read_text()) if first_job_file.exists() else None
        after = server.snapshot(dsn)
        with psycopg.connect(dsn) as conn:
            span = conn.execute(self.span_query).fetchone()[0]  # type: ignore[index]
        method = self.span_method
        if span is None:
            if first_job is None:
                raise RuntimeError(f"{self.name}: no timestamps to measure the drain with")
            span = last_seen - first_job
            method = "wall clock: worker's first job → last completion seen by polling"
        return {
            **drain_result(server, jobs, float(span), before, after, worker_cpu),
            "method": method,
            "settings": self.settings,
            "version": self.version(),
        }

    def enqueue_one(self, server: BenchServer, dsn: str, jobs: int) -> dict[str, Any]:
        """The peer's single-job enqueue one by one, each in its own transaction."""
        self.install_schema(dsn)
        count = min(jobs, 5000)
        return {
            **per_job(server, dsn, count, lambda: self.enqueue_each(dsn, count)),
            "settings": self.settings,
            "version": self.version(),
        }


class Procrastinate(Peer):
    name = "procrastinate"
    package = "procrastinate"
    worker_module = "procrastinate_worker"
    done_query = "SELECT count(*) FROM procrastinate_jobs WHERE status = 'succeeded'"
    span_query = (
        "SELECT extract(epoch FROM max(at) FILTER (WHERE type = 'succeeded') "
        "- min(at) FILTER (WHERE type = 'started')) FROM procrastinate_events"
    )
    span_method = "procrastinate_events: first 'started' → last 'succeeded'"
    settings = (
        f"run_worker_async(queues=['bench'], concurrency={CONCURRENCY}), PsycopgConnector "
        f"pool min_size=max_size={CONCURRENCY + 1}, standard asyncio loop"
    )

    def _run(self, dsn: str, body: Callable[[Any], Any]) -> Any:
        from benchmarks.peer_workers.procrastinate_app import make_app

        async def run() -> Any:
            app, noop = make_app(dsn)
            async with app.open_async():
                return await body((app, noop))

        return asyncio.run(run())

    def install_schema(self, dsn: str) -> None:
        async def apply(pair: Any) -> None:
            await pair[0].schema_manager.apply_schema_async()

        self._run(dsn, apply)

    def enqueue_bulk(self, dsn: str, jobs: int) -> None:
        async def defer(pair: Any) -> None:
            for start in range(0, jobs, BATCH):
                await pair[1].batch_defer_async(
                    *({"n": i} for i in range(start, min(jobs, start + BATCH)))
                )

        self._run(dsn, defer)

    def enqueue_each(self, dsn: str, count: int) -> float:
        async def defer(pair: Any) -> float:
            start = time.perf_counter()
            for i in range(count):
                await pair[1].defer_async(n=i)
            return time.perf_counter() - start

        return float(self._run(dsn, defer))


class PgQueuer(Peer):
    """pgqueuer on one asyncpg connection and uvloop, its README's and ``pgq run``'s setup."""

    package = "pgqueuer"
    requires = ("asyncpg", "uvloop")
    worker_module = "pgqueuer_worker"
    done_query = "SELECT count(*) FROM pgqueuer_log WHERE status = 'successful'"
    span_query = (
        "SELECT extract(epoch FROM max(created) FILTER (WHERE status = 'successful') "
        "- min(created) FILTER (WHERE status = 'picked')) FROM pgqueuer_log"
    )
    span_method = "pgqueuer_log: first 'picked' → last 'successful'"

    def __init__(self, name: str, batch: int, cap: int | None) -> None:
        self.name, self.batch, self.cap = name, batch, cap
        limit = "no cap" if cap is None else f"max_concurrent_tasks={cap}"
        self.settings = (
            f"QueueManager.run(batch_size={batch}, {limit}), AsyncpgDriver on one asyncpg "
            "connection, uvloop (worker and enqueue)"
        )

    def worker_env(self) -> dict[str, str]:
        return {"BENCH_PGQ_BATCH": str(self.batch), "BENCH_PGQ_CAP": str(self.cap or "")}

    def _run(self, dsn: str, body: Callable[[Any], Any]) -> Any:
        import uvloop
        from pgqueuer.queries import Queries

        from benchmarks.peer_workers.pgqueuer_worker import connect

        async def run() -> Any:
            conn = await connect(dsn)
            try:
                return await body(Queries.from_asyncpg_connection(conn))
            finally:
                await conn.close()

        return uvloop.run(run())

    def install_schema(self, dsn: str) -> None:
        async def install(queries: Any) -> None:
            await queries.install()

        self._run(dsn, install)

    def enqueue_bulk(self, dsn: str, jobs: int) -> None:
        async def enqueue(queries: Any) -> None:
            for start in range(0, jobs, BATCH):
                n = min(jobs, start + BATCH) - start
                payloads: list[bytes | None] = [b'{"n": %d}' % i for i in range(start, start + n)]
                await queries.enqueue(["noop"] * n, payloads, [0] * n)

        self._run(dsn, enqueue)

    def enqueue_each(self, dsn: str, count: int) -> float:
        async def enqueue(queries: Any) -> float:
            start = time.perf_counter()
            for i in range(count):
                await queries.enqueue("noop", b'{"n": %d}' % i)
            return time.perf_counter() - start

        return float(self._run(dsn, enqueue))


# pgqueuer at awa's in-flight budget (awa's 10 running + up to 10 claimed ahead) and at pgq run's
# defaults. The JSON names them pgqueuer.<measure> and pgqueuer@defaults.<measure>.
PEERS: dict[str, Peer] = {
    p.name: p
    for p in (
        Procrastinate(),
        PgQueuer("pgqueuer", batch=10, cap=2 * CONCURRENCY),
        PgQueuer("pgqueuer@defaults", batch=10, cap=None),
    )
}
# awa measure → the method of a peer that measures the same thing
EQUIVALENTS = {"drain": "drain", "enqueue_one": "enqueue_one"}
