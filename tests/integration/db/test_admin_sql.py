"""Queue controls, bulk operations and the audit log (awa_cli/db/sql/queues.sql, bulk.sql,
audit.sql) against a real database: each statement's effect and its batch bound."""

from __future__ import annotations

from typing import Any

import psycopg
import pytest
from psycopg.types.json import Jsonb

from awa_cli.audit import AuditEntry
from awa_cli.queues import QueueInfo
from awa_cli.db.statements import SQL
from awa_cli.jobs import JobRow, JobState
from tests.integration.db.rows import add_jobs, fail, ids_in, job_record, rowcount, run

pytestmark = pytest.mark.integration

NO_FILTER: dict[str, Any] = {"queue": None, "kind": None, "tag": None, "ids": None}


def queue(db: psycopg.Connection, name: str) -> QueueInfo | None:
    rows = run(db, "queue_get", queue=name)
    return QueueInfo.from_record(rows[0]) if rows else None


# --- pause and resume ------------------------------------------------------------------------


def test_pause_is_an_idempotent_upsert(db: psycopg.Connection) -> None:
    assert queue(db, "mail") is None
    (first,) = run(db, "queue_pause", queue="mail", actor="cli:alice")
    db.commit()
    paused = QueueInfo.from_record(first)
    assert paused.paused and paused.paused_by == "cli:alice" and paused.paused_at is not None
    (again,) = run(db, "queue_pause", queue="mail", actor="cli:bob")
    db.commit()
    assert (again["paused_at"], again["paused_by"]) == (paused.paused_at, "cli:alice")
    assert again["updated_at"] > paused.updated_at
    assert [r["name"] for r in run(db, "queue_paused_names")] == ["mail"]


def test_resume_clears_the_pause_and_wakes_the_queue(db: psycopg.Connection) -> None:
    run(db, "queue_pause", queue="mail", actor="cli:alice")
    db.commit()
    db.execute("LISTEN awa_mail")
    db.commit()
    (resumed,) = run(db, "queue_resume", queue="mail")
    db.commit()
    assert QueueInfo.from_record(resumed) == QueueInfo(
        queue="mail", paused=False, updated_at=resumed["updated_at"]
    )
    assert [n.channel for n in db.notifies(timeout=5, stop_after=1)] == ["awa_mail"]
    (never,) = run(db, "queue_resume", queue="fresh")  # resuming an unknown queue is harmless
    assert never["paused"] is False
    assert run(db, "queue_paused_names") == []


def test_register_keeps_the_pause_and_takes_the_dead_letter_flag(db: psycopg.Connection) -> None:
    run(db, "queue_pause", queue="mail", actor="cli:alice")
    names = ["mail", "default", "default"]
    assert rowcount(db, "queue_register", names=names, dead_letter=[True, False, False]) == 2
    mail = queue(db, "mail")
    assert mail is not None and mail.paused and mail.dead_letter
    default = queue(db, "default")
    assert default is not None and not default.paused and not default.dead_letter
    # unchanged flags write nothing; a changed one is taken
    assert rowcount(db, "queue_register", names=["mail"], dead_letter=[True]) == 0
    assert rowcount(db, "queue_register", names=["mail"], dead_letter=[False]) == 1
    run(db, "queue_register", names=["default"], dead_letter=[True])
    assert [r["name"] for r in run(db, "queue_dead_letter_names")] == ["default"]
    still = queue(db, "mail")
    assert still is not None and still.paused and not still.dead_letter


def test_list_joins_control_rows_runnable_queues_and_configured_names(
    db: psycopg.Connection,
) -> None:
    add_jobs(db, 2, queue="busy")
    add_jobs(db, 1, queue="later", state="scheduled")
    add_jobs(db, 1, queue="done", state="completed")  # only finished jobs: not found by the scan
    run(db, "queue_pause", queue="stopped", actor="cli:alice")
    run(db, "queue_register", names=["registered"], dead_letter=[True])
    rows = run(db, "queue_list", configured=["email", "busy"])
    listed = {r["queue"]: QueueInfo.from_record(r).paused for r in rows}
    assert {r["queue"] for r in rows if r["dead_letter"]} == {"registered"}
    assert listed == {
        "busy": False,
        "email": False,
        "later": False,
        "registered": False,
        "stopped": True,
    }
    assert [r["queue"] for r in rows] == sorted(listed)
    assert {r["queue"] for r in run(db, "queue_list", configured=None)} == listed.keys() - {"email"}


def test_list_finds_runnable_queues_through_the_claim_index(db: psycopg.Connection) -> None:
    for name in ("a", "b", "c"):
        add_jobs(db, 50, queue=name)
    db.execute("ANALYZE awa.jobs")
    db.execute("SET LOCAL enable_seqscan = off")
    plan = "\n".join(
        row[0]
        for row in db.execute(
            b"EXPLAIN " + SQL["queue_list"].encode(), {"configured": None}
        ).fetchall()
    )
    assert "jobs_claim_idx" in plan and "Seq Scan on jobs" not in plan, plan
    db.rollback()


# --- bulk retry, cancel, purge ---------------------------------------------------------------


def batches(
    db: psycopg.Connection, operation: str, states: list[str], batch: int, **filters: Any
) -> list[list[dict[str, Any]]]:
    """Run a bulk operation as the core will: select a batch, change it, commit; repeat."""
    done, after = [], 0
    while True:
        picked = [
            r["id"]
            for r in run(
                db,
                "bulk_select_jobs",
                states=states,
                after=after,
                batch=batch,
                **{**NO_FILTER, **filters},
            )
        ]
        done.append(run(db, operation, ids=picked))
        db.commit()
        assert len(picked) <= batch
        if len(picked) < batch:
            return done
        after = picked[-1]


def test_bulk_retry_in_bounded_batches(db: psycopg.Connection) -> None:
    failed = add_jobs(db, 12, queue="q")
    fail(db, failed)
    cancelled = add_jobs(db, 3, queue="q", state="cancelled")
    elsewhere = add_jobs(db, 4, queue="r")
    fail(db, elsewhere)
    running = add_jobs(db, 2, queue="q", state="running")
    db.commit()
    count = run(
        db,
        "bulk_count_jobs",
        **{**NO_FILTER, "queue": "q"},
        states=["failed", "cancelled"],
        older_than=None,
    )
    assert count == [{"count": 15}]
    done = batches(db, "bulk_retry_jobs", ["failed", "cancelled"], 5, queue="q")
    assert [len(b) for b in done] == [5, 5, 5, 0]
    rows = [JobRow.from_record(r) for b in done for r in b]
    assert sorted(r.id for r in rows) == sorted(failed + cancelled)
    assert all(
        r.state is JobState.AVAILABLE and r.attempt == 0 and r.finalized_at is None for r in rows
    )
    assert all(len(r.errors) == 1 for r in rows if r.id in failed)  # errors kept
    states = dict(db.execute("SELECT id, state::text FROM awa.jobs").fetchall())
    assert {states[i] for i in elsewhere} == {"failed"} and {states[i] for i in running} == {
        "running"
    }
    # The guard: ids of jobs in other states are left alone.
    assert run(db, "bulk_retry_jobs", ids=running) == []


def test_bulk_retry_skips_jobs_whose_unique_key_is_held(db: psycopg.Connection) -> None:
    held, free = b"\x01", b"\x02"
    blocked = add_jobs(db, 1, unique_key=held, unique_states="{available}", state="failed")
    add_jobs(db, 1, unique_key=held, unique_states="{available}")  # the holder
    twins = add_jobs(db, 2, unique_key=free, unique_states="{available}", state="failed")
    plain = add_jobs(db, 1, unique_key=free, unique_states="{completed}", state="failed")
    retried = run(db, "bulk_retry_jobs", ids=blocked + twins + plain)
    assert sorted(r["id"] for r in retried) == sorted([twins[0]] + plain)
    again = run(db, "bulk_retry_jobs", ids=blocked + twins)  # the twin's key is now held
    assert again == []


def test_bulk_cancel_returns_the_rows_and_guards_states(db: psycopg.Connection) -> None:
    cancellable = (
        add_jobs(db, 3, kind="x")
        + add_jobs(db, 1, kind="x", state="scheduled")
        + add_jobs(db, 1, kind="x", state="retryable")
    )
    (waiting,) = add_jobs(db, 1, kind="x", state="waiting_external")
    db.execute(
        "UPDATE awa.jobs SET callback_id = gen_random_uuid(), callback_timeout_at = now()"
        " WHERE id = %s",
        (waiting,),
    )
    running = add_jobs(db, 1, kind="x", state="running")
    other = add_jobs(db, 2, kind="y")
    db.commit()
    states = ["available", "scheduled", "retryable", "waiting_external"]
    done = batches(db, "bulk_cancel_jobs", states, 4, kind="x")
    assert [len(b) for b in done] == [4, 2]
    rows = [JobRow.from_record(r) for b in done for r in b]
    assert sorted(r.id for r in rows) == sorted(cancellable + [waiting])
    assert all(r.state is JobState.CANCELLED and r.finalized_at is not None for r in rows)
    assert all(r.callback_id is None and r.callback_timeout_at is None for r in rows)
    assert run(db, "bulk_cancel_jobs", ids=running) == []
    assert {r["state"] for r in map(lambda i: job_record(db, i) or {}, other)} == {"available"}


def test_bulk_purge_deletes_finished_jobs_only_in_batches(db: psycopg.Connection) -> None:
    old = add_jobs(db, 9, state="completed")
    db.execute(
        "UPDATE awa.jobs SET finalized_at = now() - interval '2 days' WHERE id = ANY (%s)", (old,)
    )
    recent = add_jobs(db, 2, state="completed", finalized_at=None)
    db.execute("UPDATE awa.jobs SET finalized_at = now() WHERE id = ANY (%s)", (recent,))
    pending = add_jobs(db, 1, state="failed", rescue_pending="stale_heartbeat")
    alive = add_jobs(db, 2)
    params = {"states": ["completed", "available", "failed"], "older_than": 86400.0, **NO_FILTER}
    count = run(db, "bulk_count_jobs", **{**params, "states": ["completed"]})
    assert count == [{"count": 9}]
    assert [rowcount(db, "bulk_purge_jobs", batch=4, **params) for _ in range(4)] == [4, 4, 1, 0]
    assert ids_in(db, "jobs") == sorted(recent + pending + alive)
    assert rowcount(db, "bulk_purge_jobs", batch=10, **{**params, "older_than": None}) == 2
    assert ids_in(db, "jobs") == sorted(pending + alive)


def test_cancel_by_unique_key(db: psycopg.Connection) -> None:
    key = b"\xaa\xbb"
    (holder,) = add_jobs(
        db, 1, kind="send", unique_key=key, unique_states="{available,running,completed}"
    )
    (row,) = run(db, "cancel_by_unique_key", unique_key=key)
    assert row["id"] == holder and row["state"] == "cancelled"
    assert run(db, "cancel_by_unique_key", unique_key=key) == []  # cancelled: holds no key
    (done,) = add_jobs(
        db, 1, kind="send", unique_key=key, unique_states="{completed}", state="completed"
    )
    assert run(db, "cancel_by_unique_key", unique_key=key) == []  # finished: nothing to cancel
    assert (job_record(db, done) or {})["state"] == "completed"


# --- audit -----------------------------------------------------------------------------------


def test_audit_insert_and_list(db: psycopg.Connection) -> None:
    def add(
        actor: str, action: str, target: str | None, result: str, detail: Any = None
    ) -> AuditEntry:
        (row,) = run(
            db,
            "audit_insert",
            actor=actor,
            action=action,
            target=target,
            result=result,
            detail=detail,
        )
        return AuditEntry.from_record(row)

    first = add("cli:alice", "queue.pause", "mail", "ok")
    assert first.detail == {} and first.at is not None
    add("cli:bob", "dlq.purge", None, "3", Jsonb({"queue": "mail", "count": 3}))
    add("cli:alice", "queue.resume", "mail", "ok")
    everything = {
        "actor": None,
        "action": None,
        "target": None,
        "targets": None,
        "since": None,
        "limit": 10,
    }
    listed = [AuditEntry.from_record(r) for r in run(db, "audit_list", **everything)]
    assert [e.action for e in listed] == ["queue.resume", "dlq.purge", "queue.pause"]
    assert listed[1].detail == {"queue": "mail", "count": 3} and listed[1].target is None
    assert listed[1].to_json()["detail"] == {"queue": "mail", "count": 3}
    by = {**everything, "actor": "cli:alice", "target": "mail"}
    assert [r["action"] for r in run(db, "audit_list", **by)] == ["queue.resume", "queue.pause"]
    assert len(run(db, "audit_list", **{**everything, "limit": 1})) == 1
    assert run(db, "audit_list", **{**everything, "action": "nothing"}) == []


def test_audit_list_of_one_job_matches_every_way_its_target_is_written(
    db: psycopg.Connection,
) -> None:
    """``targets``: the rows of one job, whichever surface wrote them (``job:42``, ``42``,
    ``id=42``), and no other job's."""
    for target in ("job:42", "42", "id=42", "job:420"):
        db.execute(
            "INSERT INTO awa.audit_log (actor, action, target, result) VALUES ('cli:a', 'x', %s, 'ok')",
            (target,),
        )
    where = {"actor": None, "action": None, "target": None, "since": None, "limit": 10}
    rows = run(db, "audit_list", **where, targets=["job:42", "42", "id=42"])
    assert sorted(r["target"] for r in rows) == ["42", "id=42", "job:42"]
