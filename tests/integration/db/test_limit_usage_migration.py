"""Migration 0010 (issue 29): awa.limit_usage, the key locks and the recount of the limited
claim in one call, its counts taken after its locks."""

from __future__ import annotations

import psycopg
import pytest

from awa_cli.db import migrations
from awa_cli.limits import LIMIT_LOCK_CLASS, ClaimPlan, Limit

pytestmark = [pytest.mark.integration]

PER_TENANT = Limit(
    "per_tenant", key="args.tenant", max_running=2, kind="k", rate_count=5, rate_window=60.0
)
BY_QUEUE = Limit("by_queue", key="queue", max_running=1, queue="q")


def _usage(
    db: psycopg.Connection, pairs: list[tuple[str, str]]
) -> dict[tuple[str, str], tuple[int, int]]:
    p = ClaimPlan((PER_TENANT, BY_QUEUE)).params
    rows = db.execute(
        "SELECT limit_name, key, running, starts, at FROM awa.limit_usage(%s, %s, %s, %s, %s,"
        " %s, %s, %s, %s)",
        (
            LIMIT_LOCK_CLASS,
            [n for n, _ in pairs],
            [k for _, k in pairs],
            p["l_names"],
            p["l_kinds"],
            p["l_queues"],
            p["l_sources"],
            p["l_paths"],
            p["l_rate_w"],
        ),
    ).fetchall()
    return {(r[0], r[1]): (r[2], r[3]) for r in rows}


def test_0010_is_limit_usage() -> None:
    found = {m.version: m for m in migrations.available()}
    assert found[10].name == "limit_usage" and "awa.limit_usage" in found[10].sql


def test_counts_the_slots_and_the_window_per_key(db: psycopg.Connection) -> None:
    def job(
        kind: str,
        queue: str,
        state: str,
        tenant: str,
        key: str | None = None,
        in_handler: bool = False,
    ) -> None:
        db.execute(
            "INSERT INTO awa.jobs (kind, queue, state, args, concurrency_key, callback_in_handler,"
            " callback_id, callback_timeout_at)"
            " VALUES (%s, %s, %s, jsonb_build_object('tenant', %s::text), %s, %s,"
            " CASE WHEN %s = 'waiting_external' THEN gen_random_uuid() END,"
            " CASE WHEN %s = 'waiting_external' THEN now() + interval '1 hour' END)",
            (kind, queue, state, tenant, key, in_handler, state, state),
        )

    job("k", "default", "running", "a")
    job("k", "default", "running", "a")
    job("k", "default", "running", "b", key="a")  # an explicit key wins over the args
    job("k", "default", "waiting_external", "b", in_handler=True)  # a slot: waits in handler
    job("k", "default", "waiting_external", "b")  # not a slot
    job("k", "default", "available", "b")
    job("other", "q", "running", "x")  # the queue's limit, key "q"
    job("k", "q", "running", "c")  # the kind limit wins over the queue's
    db.execute(
        "INSERT INTO awa.limit_starts (limit_name, key, started_at) VALUES"
        " ('per_tenant', 'a', now() - interval '10 seconds'),"
        " ('per_tenant', 'a', now() - interval '2 minutes')"  # out of the 60 s window
    )
    got = _usage(
        db,
        [
            ("per_tenant", "a"),
            ("per_tenant", "b"),
            ("per_tenant", "a"),
            ("by_queue", "q"),
            ("per_tenant", "none"),
        ],
    )
    assert got == {
        ("per_tenant", "a"): (3, 1),
        ("per_tenant", "b"): (1, 0),
        ("by_queue", "q"): (1, 0),  # no rate: no starts counted
        ("per_tenant", "none"): (0, 0),
    }


def test_holds_each_key_lock_until_the_transaction_ends(db: psycopg.Connection) -> None:
    _usage(db, [("per_tenant", "a"), ("per_tenant", "b")])
    held = db.execute(
        "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND granted"
        " AND classid = %s AND pid = pg_backend_pid()",
        (LIMIT_LOCK_CLASS,),
    ).fetchone()
    assert held == (2,)
