"""The references: awa's own statements (or variants of them) from a bare psycopg connection,
with no worker, pool or validation — what bounds the measures on the machine they run on.

These use awa's internals (its SQL text, row and outcome helpers) on purpose: they time exactly
what awa sends."""

from __future__ import annotations

import queue
import threading
import time
from typing import Any

import psycopg

from awa_cli.attempts import AttemptResult
from awa_cli.db.copy import copy_encoder
from awa_cli.db.params import finalize_params, insert_params
from awa_cli.db.statements import SQL
from awa_cli.jobs import InsertOpts, JobRow, prepare, prepare_many

from benchmarks.app import Noop
from benchmarks.measures import per_job, pre_enqueue_n
from benchmarks.server import BenchServer

CLAIM = SQL["claim_by_queue"]  # its records: JOB_ROW_FIELDS, then the parents (r[:-1] is the row)
FINALIZE_CHANGED = SQL["finalize_changed"]
INSERT_ONE = SQL["insert_one"]
ON_UNIQUE_CONFLICT = "ON CONFLICT (unique_key) WHERE unique_key IS NOT NULL AND state = ANY (unique_states) DO NOTHING"


def claim_complete_sql(server: BenchServer, dsn: str, jobs: int) -> dict[str, Any]:
    """Reference: awa's own claim and completion statements in a bare loop, 10 jobs a time."""
    pre_enqueue_n(dsn, jobs, Noop)
    params = {"queue": "bench", "limit": 10, "deadline": 0.0, "worker": "bench:1"}

    def run() -> float:
        with (
            psycopg.connect(dsn, autocommit=True) as claimer,
            psycopg.connect(dsn, autocommit=True) as completer,
        ):
            claimer.execute("SET synchronous_commit = off")  # as the worker's claims
            start = time.perf_counter()
            done = 0
            while done < jobs:
                rows = claimer.execute(CLAIM, params).fetchall()
                if not rows:
                    raise RuntimeError("the queue ran dry before every job was completed")
                results = [
                    AttemptResult(job=JobRow.from_values(r[:-1]), action="complete") for r in rows
                ]
                completer.execute(FINALIZE_CHANGED, finalize_params(results)).fetchall()
                done += len(rows)
            return time.perf_counter() - start

    return per_job(server, dsn, jobs, run)


def claim_complete_overlap_sql(server: BenchServer, dsn: str, jobs: int) -> dict[str, Any]:
    """Reference: claim_complete_sql with the claims and the completions in two threads, the
    claimer running ahead by up to two claims: the ceiling of a worker that overlaps every
    claim with the previous batches' work (claim-ahead) and spends nothing on the jobs."""
    pre_enqueue_n(dsn, jobs, Noop)
    params = {"queue": "bench", "limit": 10, "deadline": 0.0, "worker": "bench:1"}
    batches: queue.Queue[list[Any] | None] = queue.Queue(maxsize=2)

    def claim_all(conn: psycopg.Connection[Any]) -> None:
        claimed = 0
        while claimed < jobs:
            rows = conn.execute(CLAIM, params).fetchall()
            if not rows:
                break
            batches.put(rows)
            claimed += len(rows)
        batches.put(None)

    def run() -> float:
        with (
            psycopg.connect(dsn, autocommit=True) as claimer,
            psycopg.connect(dsn, autocommit=True) as completer,
        ):
            claimer.execute("SET synchronous_commit = off")  # as the worker's claims
            thread = threading.Thread(target=claim_all, args=(claimer,), daemon=True)
            start = time.perf_counter()
            thread.start()
            done = 0
            while (rows := batches.get()) is not None:
                results = [
                    AttemptResult(job=JobRow.from_values(r[:-1]), action="complete") for r in rows
                ]
                completer.execute(FINALIZE_CHANGED, finalize_params(results)).fetchall()
                done += len(rows)
            elapsed = time.perf_counter() - start
            thread.join()
        if done < jobs:
            raise RuntimeError("the queue ran dry before every job was completed")
        return elapsed

    return per_job(server, dsn, jobs, run)


def insert_many_copy_sql(server: BenchServer, dsn: str, jobs: int) -> dict[str, Any]:
    """Reference: the COPY text insert_many writes, pre-built, sent in batches of 1,000."""
    batches = max(1, jobs * 5 // 1000)
    statement, encode = copy_encoder(prepare(Noop(0), InsertOpts(queue="bench")))
    payload = [
        encode(prepare_many([Noop(b * 1000 + i) for i in range(1000)], InsertOpts(queue="bench")))
        for b in range(batches)
    ]

    def run() -> float:
        with psycopg.connect(dsn, autocommit=True) as conn:
            start = time.perf_counter()
            for data in payload:
                with conn.cursor() as cur, cur.copy(statement) as copy:
                    copy.write(data)
            return time.perf_counter() - start

    return per_job(server, dsn, batches * 1000, run)


def enqueue_one_sql(server: BenchServer, dsn: str, jobs: int) -> dict[str, Any]:
    """Reference: the statement awa's insert sends, one by one, from a bare psycopg connection."""
    return _insert_one_sql(server, dsn, jobs)


def insert_one_no_trigger_sql(server: BenchServer, dsn: str, jobs: int) -> dict[str, Any]:
    """Reference: enqueue_one_sql with the insert trigger (jobs_notify_inserted) disabled."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("ALTER TABLE awa.jobs DISABLE TRIGGER jobs_notify_inserted")
    return _insert_one_sql(server, dsn, jobs)


def insert_one_no_notify_sql(server: BenchServer, dsn: str, jobs: int) -> dict[str, Any]:
    """Reference: enqueue_one_sql with the trigger firing but skipping its NOTIFY (as in a
    worker's own sessions, ``awa.defer_notify = on``)."""
    return _insert_one_sql(server, dsn, jobs, "SET awa.defer_notify = 'on'")


def insert_one_no_conflict_sql(server: BenchServer, dsn: str, jobs: int) -> dict[str, Any]:
    """Reference: enqueue_one_sql without its ON CONFLICT clause (the job has no unique key):
    a plain insert instead of a speculative one."""
    statement = INSERT_ONE.replace(ON_UNIQUE_CONFLICT, "")
    if statement == INSERT_ONE:
        raise RuntimeError("INSERT_ONE has no ON CONFLICT clause to take out")
    return _insert_one_sql(server, dsn, jobs, statement=statement)


def insert_one_bare_sql(server: BenchServer, dsn: str, jobs: int) -> dict[str, Any]:
    """Reference: a one-row INSERT (returning its row) into a one-column table, one by one,
    from a bare psycopg connection: a durable commit's floor on this server."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE bench_one (n integer)")
    return _insert_one_sql(
        server,
        dsn,
        jobs,
        statement="INSERT INTO bench_one (n) VALUES (%(n)s) RETURNING n",
        params={"n": 1},
    )


def _insert_one_sql(
    server: BenchServer,
    dsn: str,
    jobs: int,
    setup: str | None = None,
    statement: str = INSERT_ONE,
    params: dict[str, Any] | None = None,
) -> dict[str, Any]:
    count = min(jobs, 5000)
    if params is None:
        params = insert_params(prepare(Noop(0), InsertOpts(queue="bench")))

    def run() -> float:
        with psycopg.connect(dsn, autocommit=True) as conn:
            if setup:
                conn.execute(setup)
            start = time.perf_counter()
            for _ in range(count):
                conn.execute(statement, params, prepare=True).fetchone()
            return time.perf_counter() - start

    return per_job(server, dsn, count, run)
