"""Migration 0005 (issue 20): awa.workers and the indexes the dashboard reads through."""

from __future__ import annotations

import psycopg
import pytest

from awa_cli.db import migrations

pytestmark = [pytest.mark.integration]


def test_0005_is_the_workers_migration() -> None:
    found = {m.version: m for m in migrations.available()}
    assert found[5].name == "workers" and "CREATE TABLE awa.workers" in found[5].sql


def test_workers_table(db: psycopg.Connection) -> None:
    columns = dict(
        db.execute(
            "SELECT attname, format_type(atttypid, atttypmod) FROM pg_attribute"
            " WHERE attrelid = 'awa.workers'::regclass AND attnum > 0 AND NOT attisdropped"
        ).fetchall()
    )
    assert columns == {
        "id": "text",
        "host": "text",
        "pid": "integer",
        "queues": "jsonb",
        "kinds": "jsonb",
        "started_at": "timestamp with time zone",
        "heartbeat_at": "timestamp with time zone",
        "running": "integer",
        "version": "text",
        "limits_digest": "text",  # migration 0009
        "claim_failing_since": "timestamp with time zone",  # migration 0013
        "claim_error": "text",
        "leader_backend_pid": "integer",
    }
    db.execute("INSERT INTO awa.workers (id, host, pid) VALUES ('h:1:1', 'h', 1)")
    with pytest.raises(psycopg.errors.UniqueViolation):
        db.execute("INSERT INTO awa.workers (id, host, pid) VALUES ('h:1:1', 'h', 1)")


def test_dashboard_indexes(db: psycopg.Connection) -> None:
    defs = dict(
        db.execute(
            "SELECT indexname, indexdef FROM pg_indexes WHERE schemaname = 'awa'"
            " AND indexname IN ('jobs_state_id_idx', 'jobs_kind_id_idx', 'jobs_active_idx',"
            " 'workers_heartbeat_idx')"
        ).fetchall()
    )
    assert "(state, id)" in defs["jobs_state_id_idx"] and "completed" in defs["jobs_state_id_idx"]
    assert "jobs_kind_id_idx" not in defs  # a kind filter walks the primary key (no write cost)
    active = defs["jobs_active_idx"]
    assert "(queue, state, run_at)" in active and "WHERE" in active
    for terminal in ("completed", "failed", "cancelled"):
        assert terminal in active
    assert "(heartbeat_at)" in defs["workers_heartbeat_idx"]
