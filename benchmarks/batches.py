"""``batch_100k``: one batch of 100,000 no-op members with its three callbacks, drained by
one ``awa worker`` (architecture §16), next to the plain ``drain`` of the same run; and
``batch_100k_one_shard``, the same batch counted on a single counter row; and the reference
``drain_without_batch_triggers``, the plain drain without the counting triggers."""

from __future__ import annotations

from typing import Any

import time

import psycopg

import awa_cli as awa
from benchmarks.app import BatchDone, Noop, app
from benchmarks.measures import (
    completed_span,
    drain,
    drain_result,
    startup_cpu,
    table_stats,
    wait_for_state,
    worker_process,
)
from benchmarks.server import BenchServer, tree_cpu

MEMBERS_PER_JOB = 5  # --jobs 20,000 (the default) -> a 100,000-member batch
CHUNK = 5000


def members_for(jobs: int) -> int:
    return jobs * MEMBERS_PER_JOB


def enqueue_batch(dsn: str, members: int, shards: int) -> int:
    """One open batch filled 5,000 members a statement, then sealed; its id."""
    batch = awa.Batch(
        on_success=BatchDone("success"),
        on_complete=BatchDone("complete"),
        on_death=BatchDone("death"),
        shards=shards,
    )
    with awa.Client(dsn, app) as client, client.batch(batch) as b:
        for start in range(0, members, CHUNK):
            b.insert_many([Noop(n) for n in range(start, min(members, start + CHUNK))])
        return b.id


def wait_for_batch(dsn: str, batch_id: int, members: int, timeout: float) -> None:
    """Wait until the batch's counter rows say no member is pending, then check the exact
    count. The batch's own 16 counter rows are the probe: ``wait_for_state``'s probe for
    unfinished work walks the claim index's dead entries of a 100,000-deep queue, and through
    this drain took 25 of PostgreSQL's 63 CPU seconds (``pg_stat_statements``, 2026-12-03)."""
    deadline = time.monotonic() + timeout
    with psycopg.connect(dsn, autocommit=True) as conn:
        while conn.execute(
            "SELECT coalesce(sum(pending), 0) FROM awa.batch_shards WHERE batch_id = %s",
            (batch_id,),
        ).fetchone()[0]:  # type: ignore[index]
            if time.monotonic() > deadline:
                raise TimeoutError(f"batch {batch_id}: members pending after {timeout}s")
            time.sleep(0.2)
    wait_for_state(dsn, "completed", members, timeout=timeout, queue="bench")


def _drain_batch(server: BenchServer, dsn: str, jobs: int, shards: int) -> dict[str, Any]:
    members = members_for(jobs)
    batch_id = enqueue_batch(dsn, members, shards)
    before = server.snapshot(dsn)
    with worker_process(dsn) as proc:
        startup = startup_cpu(dsn, proc.pid)
        wait_for_batch(dsn, batch_id, members, timeout=max(600, members / 500))
        worker_cpu = tree_cpu(proc.pid)
    after = server.snapshot(dsn)
    with psycopg.connect(dsn) as conn:
        span = completed_span(conn, "batch_id = %s", (batch_id,))
        callbacks = dict(
            conn.execute(
                "SELECT metadata ->> 'awa.batch_callback', count(*) FROM awa.jobs "
                "WHERE batch_id IS NULL AND metadata ->> 'awa.batch_id' = %s GROUP BY 1",
                (str(batch_id),),
            ).fetchall()
        )
    # exactly once each, in the transaction of the last member's completion
    if callbacks != {"on_success": 1, "on_complete": 1}:
        raise AssertionError(f"batch {batch_id}: callbacks {callbacks}")
    result = drain_result(server, members, span, before, after, worker_cpu, startup)
    return {**result, **table_stats(dsn, members), "members": members, "shards": shards}


def batch_100k(server: BenchServer, dsn: str, jobs: int) -> dict[str, Any]:
    """A 100,000-member batch with on_success, on_complete and on_death, concurrency 10:
    first claim → last durable completion (16 counter shards, the default)."""
    return _drain_batch(server, dsn, jobs, awa.Batch().shards)


def batch_100k_one_shard(server: BenchServer, dsn: str, jobs: int) -> dict[str, Any]:
    """``batch_100k`` counted on one counter row (``shards=1``): the cost of a hot row."""
    return _drain_batch(server, dsn, jobs, 1)


def drain_without_batch_triggers(server: BenchServer, dsn: str, jobs: int) -> dict[str, Any]:
    """Reference: the plain ``drain`` with the batch counting triggers dropped — what they
    cost jobs that are in no batch."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("DROP TRIGGER jobs_batch_members_updated ON awa.jobs")
        conn.execute("DROP TRIGGER jobs_batch_members_removed ON awa.jobs")
    return drain(server, dsn, jobs)
