"""A real failover (issue 27 item 5, architecture §18): a primary and a synchronous
streaming standby (tests/pgreplica.py), two real `awa worker` processes on the multi-host
DSN with ``target_session_attrs=read-write``. In the middle of a drain of jobs with durable
follow-ups, with a handler waiting inside ``wait_for_callback``, the standby is promoted and
the primary stopped: every job completes, none runs twice, each follow-up exists exactly
once, and the drain is done within 60 s of the promotion."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest

import awa_cli as awa
from awa_cli.db.migrations import migrate_dsn
from tests.apps.outage import Chain, Waiter, app
from tests.helpers import stopped_at_exit
from tests.pgreplica import Pair, start_pair
from tests.reliability.workers import FAST, WorkerProcess, runs, wait_for, write_config

pytestmark = [pytest.mark.integration]


@pytest.fixture
def pair() -> Iterator[Pair]:
    with stopped_at_exit(start_pair()) as servers:
        yield servers


def counts(dsn: str) -> dict[tuple[str, str], int]:
    with psycopg.connect(dsn, connect_timeout=3) as conn:
        rows = conn.execute("SELECT kind, state::text, count(*) FROM awa.jobs GROUP BY 1, 2")
        return {(r[0], r[1]): r[2] for r in rows.fetchall()}


def completed(dsn: str, kind: str = "chain") -> int:
    return counts(dsn).get((kind, "completed"), 0)


def failover(pair: Pair, tmp_path: Path, jobs: int) -> dict[str, float]:
    dsn = pair.dsn
    migrate_dsn(dsn)
    config = write_config(tmp_path, FAST, concurrency=10)
    path = tmp_path / "runs.txt"
    procs = [WorkerProcess(tmp_path, f"worker{i}", config, dsn, path) for i in range(2)]
    try:
        with awa.Client(dsn) as client:
            waiting = client.insert(Waiter(n=0))
            for start in range(0, jobs, 500):
                count = min(500, jobs - start)
                client.insert_many([Chain(n=i) for i in range(start, start + count)])
        wait_for(lambda: completed(dsn) >= jobs // 3, 120, "a third of the drain", *procs)
        with psycopg.connect(dsn) as conn:  # the wait is in flight
            row = conn.execute(
                "SELECT callback_id FROM awa.jobs WHERE id = %s", (waiting.id,)
            ).fetchone()
        assert row is not None and row[0] is not None
        pair.promote()
        promoted = time.monotonic()
        new_primary = pair.standby.dsn_for("postgres")
        with psycopg.connect(new_primary) as conn:
            promoted_at = conn.execute("SELECT now()").fetchone()[0]  # type: ignore[index]
        pair.stop_primary()

        def completed_since_promotion() -> bool:
            with psycopg.connect(new_primary, connect_timeout=3) as conn:
                return bool(
                    conn.execute(
                        "SELECT count(*) FROM awa.jobs WHERE finalized_at > %s", (promoted_at,)
                    ).fetchone()[0]  # type: ignore[index]
                )

        wait_for(completed_since_promotion, 60, "a completion on the new primary", *procs)
        first = time.monotonic() - promoted  # counted from the promotion
        with awa.Client(dsn, app=app) as client:  # the partner answers after the failover
            client.complete_external(row[0], {"answer": 42})
        wait_for(
            lambda: (
                completed(new_primary) == jobs
                and completed(new_primary, "chain_done") == jobs
                and completed(new_primary, "waiter") == 1
            ),
            60 - (time.monotonic() - promoted),
            "the whole drain within 60 s of the promotion",
            *procs,
        )
        took = time.monotonic() - promoted
        assert sum(counts(new_primary).values()) == 2 * jobs + 1  # nothing lost, none extra
        with psycopg.connect(new_primary) as conn:
            attempts = conn.execute(
                "SELECT max(attempt), count(*) FILTER (WHERE errors <> '[]') FROM awa.jobs"
            ).fetchone()
            triggers = conn.execute(
                "SELECT count(DISTINCT (args->>'trigger_id')) FROM awa.jobs WHERE kind = 'chain_done'"
            ).fetchone()
        assert attempts == (1, 0), attempts  # every job on its first attempt, no rescue
        assert triggers == (jobs,)  # one follow-up per job, exactly
        ran = runs(path)
        assert len(ran) == 2 * jobs + 1 and set(ran.values()) == {1}, ran.most_common(3)
        logs = "".join(p.log() for p in procs)
        assert "action=rescued" not in logs
        return {"first_completion_after_promotion": round(first, 1), "drain_done": round(took, 1)}
    finally:
        for proc in procs:
            proc.stop()


def test_promoted_standby_mid_drain(pair: Pair, tmp_path: Path) -> None:
    print("failover:", failover(pair, tmp_path, 400))


@pytest.mark.slow
def test_promoted_standby_mid_drain_of_2000_jobs(pair: Pair, tmp_path: Path) -> None:
    print("failover:", failover(pair, tmp_path, 2000))
