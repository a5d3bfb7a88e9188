"""The limit-aware claim against PostgreSQL, through the outcome core (architecture §13, §15.1):
max_running per key, explicit keys, round-robin between keys, rate windows, priority aging,
and concurrent claimers that cannot over-run a key."""

from __future__ import annotations

import asyncio
from collections import Counter
from datetime import datetime, timedelta, UTC
from typing import Any

import psycopg
import pytest
from psycopg_pool import AsyncConnectionPool

import awa_cli as awa
from awa_cli.limits import ClaimPlan, Limit
from awa_cli.outcomes import OutcomeCore

pytestmark = [pytest.mark.integration]

PER_TENANT = Limit("per_tenant", key="args.tenant", max_running=2, kind="tenant_work")


def _insert(dsn: str, tenants: list[str], **options: Any) -> list[int]:
    with awa.Client(dsn) as client:
        return [
            client.insert({"tenant": t, "n": i}, kind="tenant_work", **options).id
            for i, t in enumerate(tenants)
        ]


class Core:
    """An outcome core on its own pool, with one claim plan for the default queue."""

    def __init__(self, dsn: str, plan: ClaimPlan) -> None:
        self.pool = AsyncConnectionPool(
            dsn, min_size=1, max_size=4, open=False, kwargs={"autocommit": True}
        )
        self.core = OutcomeCore(self.pool)
        self.core.plan_claims("default", plan)

    async def __aenter__(self) -> OutcomeCore:
        await self.pool.open()
        return self.core

    async def __aexit__(self, *exc: object) -> None:
        await self.pool.close()


def _tenants(rows: list[awa.JobRow]) -> Counter[str]:
    return Counter(r.args["tenant"] for r in rows)


def _finish(dsn: str, ids: list[int]) -> None:
    with psycopg.connect(dsn) as conn:
        conn.execute(
            "UPDATE awa.jobs SET state = 'completed', finalized_at = now() WHERE id = ANY(%s)",
            (ids,),
        )


@pytest.mark.asyncio
async def test_at_most_max_running_per_key_and_the_rest_stays_available(dsn: str) -> None:
    _insert(dsn, ["a"] * 5 + ["b"] * 5)
    async with Core(dsn, ClaimPlan((PER_TENANT,))) as core:
        first = await core.claim("default", 20)
        assert _tenants(first) == {"a": 2, "b": 2}
        assert await core.claim("default", 20) == []  # both keys at their limit
        _finish(dsn, [r.id for r in first if r.args["tenant"] == "a"][:1])
        again = await core.claim("default", 20)
        assert _tenants(again) == {"a": 1}
    with psycopg.connect(dsn) as conn:
        counts = dict(conn.execute("SELECT state::text, count(*) FROM awa.jobs GROUP BY 1"))
    assert counts == {"running": 4, "completed": 1, "available": 5}


@pytest.mark.asyncio
async def test_an_explicit_concurrency_key_overrides_the_computed_one(dsn: str) -> None:
    _insert(dsn, ["a", "b", "c"], concurrency_key="shared")
    _insert(dsn, ["d"])
    async with Core(dsn, ClaimPlan((PER_TENANT,))) as core:
        rows = await core.claim("default", 10)
    assert len(rows) == 3  # two of the shared key, and d's own
    assert _tenants(rows)["d"] == 1
    with psycopg.connect(dsn) as conn:
        stored = conn.execute(
            "SELECT count(*) FROM awa.jobs WHERE concurrency_key = 'shared'"
        ).fetchone()
    assert stored == (3,)


@pytest.mark.asyncio
async def test_keys_are_served_round_robin(dsn: str) -> None:
    generous = Limit("per_tenant", key="args.tenant", max_running=1000, kind="tenant_work")
    _insert(dsn, ["big"] * 300)
    _insert(dsn, ["small"] * 3)  # enqueued later, and lower in priority order than all of big
    async with Core(dsn, ClaimPlan((generous,))) as core:
        rows = await core.claim("default", 6)
    assert _tenants(rows) == {"big": 3, "small": 3}


@pytest.mark.asyncio
async def test_a_key_inserted_after_the_scan_joins_the_cached_ranking(dsn: str) -> None:
    """Between full scans the claim ranks only the jobs inserted since its last look and
    merges them in: a new key's first job goes ahead of the cached backlog, and a new job
    of a cached key goes after that key's cached jobs."""
    generous = Limit("per_tenant", key="args.tenant", max_running=1000, kind="tenant_work")
    _insert(dsn, ["big"] * 300)
    async with Core(dsn, ClaimPlan((generous,))) as core:
        first = await core.claim("default", 4)  # the full scan: every candidate is big's
        assert _tenants(first) == {"big": 4}
        _insert(dsn, ["small", "small", "big"])
        await asyncio.sleep(0.6)  # past CANDIDATES_MAX_AGE: the next claim looks for arrivals
        rows = await core.claim("default", 4)
        assert _tenants(rows) == {"big": 2, "small": 2}, _tenants(rows)
        assert all(r.args["n"] != 2 or r.args["tenant"] != "big" for r in rows)


@pytest.mark.asyncio
async def test_a_kind_limit_wins_over_the_queue_limit(dsn: str) -> None:
    by_queue = Limit("whole_queue", key="queue", max_running=1, queue="default")
    _insert(dsn, ["a"] * 3)
    with awa.Client(dsn) as client:
        for i in range(3):
            client.insert({"i": i}, kind="other")
    async with Core(dsn, ClaimPlan((PER_TENANT, by_queue))) as core:
        rows = await core.claim("default", 10)
    kinds = Counter(r.kind for r in rows)
    assert kinds == {"tenant_work": 2, "other": 1}


@pytest.mark.asyncio
async def test_rate_window_counts_starts_not_running_jobs(dsn: str) -> None:
    rated = Limit(
        "per_tenant",
        key="args.tenant",
        max_running=100,
        kind="tenant_work",
        rate_count=3,
        rate_window=3600.0,
    )
    _insert(dsn, ["a"] * 10)
    async with Core(dsn, ClaimPlan((rated,))) as core:
        first = await core.claim("default", 10)
        assert len(first) == 3
        _finish(dsn, [r.id for r in first])
        assert await core.claim("default", 10) == []  # nothing running, but 3 starts this hour
        with psycopg.connect(dsn) as conn:  # the window moves on: back-date the starts
            conn.execute("UPDATE awa.limit_starts SET started_at = started_at - interval '2h'")
        second = await core.claim("default", 10)
        assert len(second) == 3
    with psycopg.connect(dsn) as conn:
        logged = conn.execute("SELECT count(*) FROM awa.limit_starts").fetchone()
    assert logged == (3,)  # the back-dated ones were pruned by the claim of the same key


@pytest.mark.asyncio
async def test_priority_aging_lifts_a_waiting_job(dsn: str) -> None:
    now = datetime.now(UTC)
    with awa.Client(dsn) as client:
        old = client.insert(
            {"tenant": "x"}, kind="plain", priority=4, run_at=now - timedelta(minutes=31)
        ).id
        urgent = [client.insert({"tenant": "x"}, kind="plain", priority=1).id for _ in range(3)]
    async with Core(dsn, ClaimPlan((), priority_aging=600.0)) as core:
        # 31 minutes at 10 minutes a level: 4 -> 1, and older than every urgent job
        rows = await core.claim("default", 1)
    assert [r.id for r in rows] == [old]
    async with Core(dsn, ClaimPlan()) as core:  # without aging: the urgent ones first
        rows = await core.claim("default", 1)
    assert [r.id for r in rows] == [urgent[0]]


@pytest.mark.asyncio
async def test_concurrent_claimers_never_over_run_a_key(dsn: str) -> None:
    one = Limit("per_tenant", key="args.tenant", max_running=2, kind="tenant_work")
    _insert(dsn, ["a"] * 40 + ["b"] * 40)
    cores = [Core(dsn, ClaimPlan((one,))) for _ in range(8)]
    opened = [await c.__aenter__() for c in cores]
    try:
        for _ in range(5):  # rounds of eight simultaneous claims
            await asyncio.gather(*(core.claim("default", 10) for core in opened))
            with psycopg.connect(dsn) as conn:
                running = dict(
                    conn.execute(
                        "SELECT args->>'tenant', count(*) FROM awa.jobs"
                        " WHERE state = 'running' GROUP BY 1"
                    ).fetchall()
                )
            assert running == {"a": 2, "b": 2}
            with psycopg.connect(dsn) as conn:  # free every slot for the next round
                conn.execute(
                    "UPDATE awa.jobs SET state = 'completed', finalized_at = now()"
                    " WHERE state = 'running'"
                )
    finally:
        for c in cores:
            await c.__aexit__()


@pytest.mark.asyncio
async def test_a_claimer_waits_for_the_key_lock_and_recounts_after_it(dsn: str) -> None:
    # The interleaving that over-runs a count taken without the lock: claimer X has claimed
    # a1 and a2 (max_running 2) but not committed; a more urgent a0 arrives; claimer Y sees
    # a1 and a2 still available (X's claim is invisible to it), so a0 ranks first for it and
    # a count without the lock would say 0 running: Y would claim a0, and three would run.
    from awa_cli.outcomes.claims import claim_limited_on

    plan = ClaimPlan((PER_TENANT,))
    _insert(dsn, ["a", "a"])
    async with Core(dsn, plan) as y, await psycopg.AsyncConnection.connect(dsn) as x_conn:
        async with x_conn.transaction():
            claimed = await claim_limited_on(x_conn, "default", 2, 0, plan)
            assert len(claimed) == 2
            _insert(dsn, ["a"], priority=1)
            y_claim = asyncio.create_task(y.claim("default", 10))
            await _wait_for_lock_wait(dsn)  # Y waits on the key's advisory lock
            assert not y_claim.done()
        # X committed: Y's recount after the lock sees two running
        assert await asyncio.wait_for(y_claim, timeout=10) == []
    with psycopg.connect(dsn) as conn:
        running = conn.execute("SELECT count(*) FROM awa.jobs WHERE state = 'running'").fetchone()
    assert running == (2,)


async def _wait_for_lock_wait(dsn: str) -> None:
    from tests.helpers import wait_until

    def waiting() -> bool:
        with psycopg.connect(dsn) as conn:
            row = conn.execute(
                "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted"
            ).fetchone()
        return row is not None and row[0] > 0

    await wait_until(lambda: asyncio.to_thread(waiting), timeout=10)


@pytest.mark.asyncio
async def test_every_insert_path_stores_the_concurrency_key(dsn: str) -> None:
    from awa_cli.enqueue import InsertOpts, prepare
    from awa_cli.outcomes.follow_ups import insert_follow_ups

    async with awa.AsyncClient(dsn) as client:
        await client.insert({"n": 0}, kind="one", concurrency_key="k-one")
        # insert_many: COPY without unique options, the insert_many statement with them
        await client.insert_many([{"n": 1}, {"n": 2}], kind="copied", concurrency_key="k-copy")
        await client.insert_many(
            [{"n": 3}], kind="unique", concurrency_key="k-unique", unique_opts={}
        )
    follow_up = prepare({"n": 4}, InsertOpts(kind="follow", concurrency_key="k-follow"))
    async with await psycopg.AsyncConnection.connect(dsn) as conn:
        await insert_follow_ups(conn, [follow_up])
        await conn.commit()
    with psycopg.connect(dsn) as conn:
        stored = dict(conn.execute("SELECT kind, concurrency_key FROM awa.jobs").fetchall())
    assert stored == {
        "one": "k-one",
        "copied": "k-copy",
        "unique": "k-unique",
        "follow": "k-follow",
    }
