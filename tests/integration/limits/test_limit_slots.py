"""Migration 0016 (issue 29): a limited attempt stores the slot it was claimed under
(awa.jobs.limit_slot), and the claim counts a key by looking its slot up instead of keying
every running job. Attempts without a slot (started before 0016, or by an earlier worker
during a deploy) are still keyed and counted; the plain claim stores '' (no slot)."""

from __future__ import annotations

from typing import Any

import psycopg
import pytest

from awa_cli.db import migrations
from awa_cli.limits import ClaimPlan, Limit
from tests.integration.limits.test_claim_limited import Core, _finish, _insert, _tenants

pytestmark = [pytest.mark.integration]

ONE_EACH = Limit("per_tenant", key="args.tenant", max_running=1, kind="tenant_work")
SEP = chr(31)


def _slots(dsn: str) -> dict[int, Any]:
    with psycopg.connect(dsn) as conn:
        return dict(conn.execute("SELECT id, limit_slot FROM awa.jobs ORDER BY id").fetchall())


def test_0016_is_limit_slots() -> None:
    found = {m.version: m for m in migrations.available()}
    assert found[16].name == "limit_slots" and "limit_slot" in found[16].sql


@pytest.mark.asyncio
async def test_a_limited_attempt_stores_its_slot_and_keys_with_any_characters_count(
    dsn: str,
) -> None:
    # keys that need quoting in an array literal: the claim's parameters carry them intact
    awkward = ['a"b', "c\\d", "e,f", "{g}", "NULL", "", "ü ß", " sp "]
    ids = _insert(dsn, awkward * 2)
    async with Core(dsn, ClaimPlan((ONE_EACH,))) as core:
        first = await core.claim("default", 50)
        assert _tenants(first) == dict.fromkeys(awkward, 1)  # one slot per key, every key
        assert await core.claim("default", 50) == []
        slots = _slots(dsn)
        assert {slots[r.id] for r in first} == {f"per_tenant{SEP}{t}" for t in awkward}
        assert all(slots[i] is None for i in ids if i not in {r.id for r in first})
        # a finished attempt frees its key's slot: the key's second job runs next
        done = next(r for r in first if r.args["tenant"] == 'a"b')
        _finish(dsn, [done.id])
        again = await core.claim("default", 50)
    assert _tenants(again) == {'a"b': 1}


@pytest.mark.asyncio
async def test_attempts_without_a_slot_are_keyed_and_counted(dsn: str) -> None:
    # as an earlier worker leaves a running job: no slot stored
    ids = _insert(dsn, ["a"] * 3)
    with psycopg.connect(dsn) as conn:
        conn.execute(
            "UPDATE awa.jobs SET state = 'running', attempt = 1, limit_slot = NULL WHERE id = %s",
            (ids[0],),
        )
    two = Limit("per_tenant", key="args.tenant", max_running=2, kind="tenant_work")
    async with Core(dsn, ClaimPlan((two,))) as core:
        got = await core.claim("default", 10)
    assert len(got) == 1  # the unslotted attempt holds one of the two slots


@pytest.mark.asyncio
async def test_the_plain_claim_stores_no_slot_and_a_later_limit_does_not_count_it(
    dsn: str,
) -> None:
    ids = _insert(dsn, ["a"] * 3)
    async with Core(dsn, ClaimPlan()) as core:  # no limit: the plain claim
        plain = await core.claim("default", 1)
    assert _slots(dsn)[plain[0].id] == ""
    # a limit configured afterwards applies to the jobs claimed after it, not to the
    # attempt already running (it was claimed under no slot): migration 0016's header
    async with Core(dsn, ClaimPlan((ONE_EACH,))) as core:
        limited = await core.claim("default", 10)
    assert len(limited) == 1 and limited[0].id in ids


@pytest.mark.asyncio
async def test_a_retried_job_takes_the_slot_of_its_new_claim(dsn: str) -> None:
    (job_id,) = _insert(dsn, ["a"])
    async with Core(dsn, ClaimPlan((ONE_EACH,))) as core:
        (row,) = await core.claim("default", 1)
        with psycopg.connect(dsn) as conn:  # the attempt failed and waits for its retry
            conn.execute(
                "UPDATE awa.jobs SET state = 'available', concurrency_key = 'other' WHERE id = %s",
                (job_id,),
            )
        (again,) = await core.claim("default", 1)
    assert again.id == row.id and again.attempt == 2
    assert _slots(dsn)[job_id] == f"per_tenant{SEP}other"


def test_a_key_is_counted_by_a_lookup_of_its_slot_even_on_stale_statistics(dsn: str) -> None:
    # the per-key count of awa.limit_usage (sql/0016_limit_slots.sql) uses the partial index,
    # whose predicate it repeats, also when the statistics date from before any slot was
    # written (autoanalyze after a bulk insert): one `limit_slot = ANY (...)` was planned
    # there as a scan of every running job through jobs_heartbeat_idx
    with psycopg.connect(dsn) as conn:
        conn.execute(
            "INSERT INTO awa.jobs (kind, queue, args) SELECT 'tenant_work', 'default',"
            " jsonb_build_object('tenant', 't' || (i % 100)) FROM generate_series(1, 5000) i"
        )
        conn.execute("ANALYZE awa.jobs")
        conn.execute(
            "UPDATE awa.jobs SET state = 'running', attempt = 1,"
            " limit_slot = 'per_tenant' || chr(31) || (args->>'tenant')"
            " WHERE id <= (SELECT min(id) + 1500 FROM awa.jobs)"
        )
        lookup = conn.execute(
            "EXPLAIN SELECT p.slot, n.c FROM unnest(ARRAY['per_tenant' || chr(31) || 't1',"
            " 'per_tenant' || chr(31) || 't2']) AS p(slot) CROSS JOIN LATERAL ("
            " SELECT count(*) AS c FROM awa.jobs j WHERE j.limit_slot = p.slot"
            " AND j.limit_slot <> '' AND (j.state = 'running'"
            " OR (j.state = 'waiting_external' AND j.callback_in_handler))) n"
        ).fetchall()
        unslotted = conn.execute(
            "EXPLAIN SELECT * FROM awa.jobs j WHERE j.limit_slot IS NULL"
            " AND (j.state = 'running' OR (j.state = 'waiting_external' AND j.callback_in_handler))"
        ).fetchall()
        source = conn.execute(
            "SELECT prosrc FROM pg_proc WHERE proname = 'limit_usage'"
        ).fetchone()[0]  # type: ignore[index]
    assert any("jobs_limit_slot_idx" in line[0] for line in lookup), lookup
    assert any("jobs_limit_unslotted_idx" in line[0] for line in unslotted), unslotted
    assert "WHERE j.limit_slot = p.slot AND j.limit_slot <> ''" in source  # the shape above
