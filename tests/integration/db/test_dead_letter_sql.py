"""The dead-letter queue's statements (awa_cli/db/sql/dead_letters.sql) against a real database:
each one's effect, its batch bound, and that a move never leaves a job in neither table."""

from __future__ import annotations

import threading
import uuid
from typing import Any

import psycopg
import pytest
from psycopg.types.json import Jsonb

from awa_cli.db.statements import SQL
from awa_cli.dead_letters import DeadLetter, DeadReason, DlqDepth
from awa_cli.jobs import JobRow, JobState
from tests.integration.db.rows import add_jobs, dead_record, fail, ids_in, job_record, rowcount, run

pytestmark = pytest.mark.integration

FILTERS: dict[str, Any] = {"ids": None, "queue": None, "kind": None, "older_than": None}
NO_OVERRIDES: dict[str, Any] = {"queue": None, "priority": None, "run_at": None}

# Every column set, so a column the move forgets or mangles shows up in the comparison.
FULL_JOB = """
INSERT INTO awa.jobs (kind, queue, args, state, priority, attempt, max_attempts, run_at,
    run_lease, heartbeat_at, deadline_at, deadline_duration, callback_id, callback_timeout_at,
    callback_in_handler, callback_result, errors, metadata, tags, unique_key, unique_states,
    output, ordering_key, created_at, attempted_at, finalized_at)
VALUES ('send_email', 'mail', '{"to": "a@example.com", "n": [1, 2.5]}', 'failed', 3, 5, 5,
    '2026-01-02 03:04:05.123456+00', 9, now(), now() + interval '1 hour', 1.25, %(callback)s,
    now() + interval '2 hours', true, '{"r": 1}',
    '[{"error": "RuntimeError: boom", "attempt": 5, "at": "2026-01-02T03:04:05+00:00"}]',
    '{"m": {"deep": true}}', '{a,b}', '\\x00ff10', '{available,failed}', '{"o": [null]}',
    'order-1', now() - interval '1 day', now() - interval '1 minute', now())
RETURNING id
"""


def full_job(db: psycopg.Connection) -> int:
    row = db.execute(FULL_JOB, {"callback": uuid.uuid4()}).fetchone()
    assert row is not None
    return int(row[0])


def move(
    db: psycopg.Connection, ids: list[int], reason: str = "exhausted", *, only_flagged: bool = False
) -> list[dict[str, Any]]:
    return run(
        db, "dead_letter_move", ids=ids, reasons=[reason] * len(ids), only_flagged=only_flagged
    )


def test_move_keeps_the_id_and_every_column(db: psycopg.Connection) -> None:
    job_id = full_job(db)
    before = job_record(db, job_id)
    assert before is not None
    moved = move(db, [job_id], "terminal_error")
    db.commit()
    assert [m["id"] for m in moved] == [job_id]
    assert job_record(db, job_id) is None
    after = dead_record(db, job_id)
    assert after is not None
    assert {name: after[name] for name in before} == before
    assert after["dead_reason"] == "terminal_error"
    assert after["dead_at"] is not None and after["dead_at"] >= before["finalized_at"]

    dead = DeadLetter.from_record(after)
    assert dead.dead_reason is DeadReason.TERMINAL_ERROR and dead.state is JobState.FAILED
    assert dead.job_row() == JobRow.from_record(before)
    assert isinstance(dead, JobRow) and dead.to_json()["dead_reason"] == "terminal_error"


def test_move_takes_only_failed_jobs_without_pending_rescue_follow_ups(
    db: psycopg.Connection,
) -> None:
    failed = add_jobs(db, 2)
    fail(db, failed)
    available = add_jobs(db, 1)
    pending = add_jobs(db, 1)
    fail(db, pending)
    db.execute("UPDATE awa.jobs SET rescue_pending = 'stale_heartbeat' WHERE id = %s", pending)
    moved = move(db, failed + available + pending)
    assert sorted(m["id"] for m in moved) == failed
    assert ids_in(db, "jobs") == sorted(available + pending)


def test_move_gives_each_job_its_reason(db: psycopg.Connection) -> None:
    ids = add_jobs(db, 3)
    fail(db, ids)
    reasons = ["exhausted", "terminal_error", "callback_failed"]
    moved = run(db, "dead_letter_move", ids=ids, reasons=reasons, only_flagged=False)
    assert {m["id"]: m["dead_reason"] for m in moved} == dict(zip(ids, reasons, strict=True))


def test_move_only_flagged_follows_the_announced_queues(db: psycopg.Connection) -> None:
    on = add_jobs(db, 2, queue="on")
    off = add_jobs(db, 1, queue="off")
    unknown = add_jobs(db, 1, queue="unknown")
    fail(db, on + off + unknown)
    run(db, "queue_register", names=["on", "off"], dead_letter=[True, False])
    moved = move(db, on + off + unknown, only_flagged=True)
    assert sorted(m["id"] for m in moved) == on
    assert ids_in(db, "jobs") == sorted(off + unknown)
    assert sorted(m["id"] for m in move(db, off + unknown)) == sorted(off + unknown)


def test_move_refuses_an_unknown_reason_and_moves_nothing(db: psycopg.Connection) -> None:
    ids = add_jobs(db, 3)
    fail(db, ids)
    db.commit()
    with pytest.raises(psycopg.errors.CheckViolation):
        move(db, ids, "bored")
    db.rollback()
    assert ids_in(db, "jobs") == ids and ids_in(db, "dead_letters") == []


def test_a_moved_job_releases_its_unique_key(db: psycopg.Connection) -> None:
    key = b"\x01\x02"
    (job_id,) = add_jobs(db, 1, unique_key=key)
    db.execute("UPDATE awa.jobs SET unique_states = '{available,failed}' WHERE id = %s", (job_id,))
    fail(db, [job_id])
    with pytest.raises(psycopg.errors.UniqueViolation):
        with db.transaction():
            add_jobs(db, 1, unique_key=key, unique_states="{available}")
    move(db, [job_id])
    add_jobs(db, 1, unique_key=key, unique_states="{available}")  # the key is free again


def test_a_job_is_in_exactly_one_table_at_every_moment(dsn: str, db: psycopg.Connection) -> None:
    """A reader in another connection counts the ids in both tables with one snapshot per
    statement while they move to the DLQ and back, batch after batch: always each once."""
    ids = add_jobs(db, 300)
    fail(db, ids)
    db.commit()
    done = threading.Event()
    seen: list[int] = []

    def read() -> None:
        with psycopg.connect(dsn, autocommit=True) as reader:
            while not done.is_set():
                row = reader.execute(
                    "SELECT (SELECT count(*) FROM awa.jobs WHERE id = ANY (%(ids)s))"
                    " + (SELECT count(*) FROM awa.dead_letters WHERE id = ANY (%(ids)s))",
                    {"ids": ids},
                ).fetchone()
                assert row is not None
                seen.append(int(row[0]))

    reader = threading.Thread(target=read)
    reader.start()
    try:
        for _ in range(15):
            for start in range(0, len(ids), 100):
                move(db, ids[start : start + 100])
                db.commit()
            for start in range(0, len(ids), 100):
                run(db, "dead_letter_retry", ids=ids[start : start + 100], **NO_OVERRIDES)
                db.commit()
            fail(db, ids)
            db.commit()
    finally:
        done.set()
        reader.join(30)
    assert seen and set(seen) == {len(ids)}, sorted(set(seen))


def test_finalize_fails_running_attempts_into_the_dlq(db: psycopg.Connection) -> None:
    live = add_jobs(db, 2, state="running", run_lease=3, attempt=25, max_attempts=25)
    db.execute(
        "UPDATE awa.jobs SET heartbeat_at = now(), deadline_at = now() + interval '1 minute',"
        " output = '{\"partial\": 1}' WHERE id = ANY (%s)",
        (live,),
    )
    (stale,) = add_jobs(db, 1, state="running", run_lease=4)
    (finished,) = add_jobs(db, 1, state="completed", run_lease=3)
    entry = {"error": "RuntimeError: boom", "attempt": 25, "at": "2026-12-01T00:00:00+00:00"}
    moved = run(
        db,
        "dead_letter_finalize",
        ids=[*live, stale, finished],
        leases=[3, 3, 3, 3],  # the stale attempt's lease is an older one
        errors=[Jsonb(entry), None, Jsonb(entry), Jsonb(entry)],
        reasons=["exhausted", "terminal_error", "exhausted", "exhausted"],
        progress=[Jsonb({"percent": 40}), None, None, None],  # the attempt's latest, if any
    )
    db.commit()
    assert sorted(m["id"] for m in moved) == live
    assert ids_in(db, "jobs") == [stale, finished] and ids_in(db, "dead_letters") == live
    first, second = (DeadLetter.from_record(dead_record(db, i) or {}) for i in live)
    assert first.state is JobState.FAILED and first.finalized_at is not None
    assert first.errors == [entry] and second.errors == []
    assert (first.dead_reason, second.dead_reason) == (
        DeadReason.EXHAUSTED,
        DeadReason.TERMINAL_ERROR,
    )
    assert first.heartbeat_at is None and first.deadline_at is None and first.callback_id is None
    assert first.output == {"partial": 1} and first.attempt == 25 and first.run_lease == 3
    assert first.progress == {"percent": 40} and second.progress is None


def test_move_failed_by_filter_in_bounded_batches(db: psycopg.Connection) -> None:
    mail = add_jobs(db, 25, queue="mail")
    other = add_jobs(db, 5, queue="other")
    fail(db, mail + other)
    add_jobs(db, 3, queue="mail")  # available: never moved
    params = {"queue": "mail", "kind": None, "note": "downstream outage", "batch": 10}
    assert [rowcount(db, "dead_letter_move_failed", **params) for _ in range(4)] == [10, 10, 5, 0]
    assert ids_in(db, "dead_letters") == mail
    dead = DeadLetter.from_record(dead_record(db, mail[0]) or {})
    assert dead.dead_reason is DeadReason.MANUAL
    assert dead.errors[-1]["error"] == "moved to the dead-letter queue: downstream outage"
    assert dead.errors[-1]["attempt"] == dead.attempt and len(dead.errors) == 2

    fail(db, add_jobs(db, 2, queue="other", kind="special"))
    assert (
        rowcount(db, "dead_letter_move_failed", **{**params, "queue": None, "kind": "special"}) == 2
    )
    bare = {"queue": None, "kind": None, "note": None, "batch": 100}
    assert rowcount(db, "dead_letter_move_failed", **bare) == len(other)
    last = DeadLetter.from_record(dead_record(db, other[0]) or {})
    assert last.errors[-1]["error"] == "moved to the dead-letter queue"


def test_move_failed_skips_locked_jobs(dsn: str, db: psycopg.Connection) -> None:
    ids = add_jobs(db, 4)
    fail(db, ids)
    db.commit()
    with psycopg.connect(dsn) as other:
        other.execute("SELECT id FROM awa.jobs WHERE id = %s FOR UPDATE", (ids[0],))
        db.execute("SET LOCAL lock_timeout = '5s'")  # waiting for the lock would fail, not hang
        moved = rowcount(db, "dead_letter_move_failed", queue=None, kind=None, note=None, batch=10)
        db.commit()
    assert moved == 3 and ids_in(db, "jobs") == [ids[0]]


def test_get_list_depth_and_count(db: psycopg.Connection) -> None:
    assert DlqDepth.from_rows(run(db, "dead_letter_depth", queue=None)).to_json() == {
        "total": 0,
        "queues": {},
    }
    a = add_jobs(db, 3, queue="a", kind="x")
    b = add_jobs(db, 2, queue="b", kind="y")
    fail(db, a + b)
    move(db, a + b)
    db.execute(
        "UPDATE awa.dead_letters SET dead_at = now() - interval '2 days' WHERE id = %s", (a[0],)
    )

    assert DeadLetter.from_record(run(db, "dead_letter_get", id=b[0])[0]).queue == "b"
    assert run(db, "dead_letter_get", id=-1) == []
    listed = run(db, "dead_letter_list", queue=None, kind=None, limit=10)
    assert [r["id"] for r in listed] == sorted(a[1:] + b, reverse=True) + [a[0]]  # newest first
    assert [r["id"] for r in run(db, "dead_letter_list", queue="a", kind=None, limit=10)] == [
        a[2],
        a[1],
        a[0],
    ]
    assert len(run(db, "dead_letter_list", queue=None, kind="y", limit=1)) == 1
    assert run(db, "dead_letter_list", queue="a", kind="y", limit=10) == []

    depth = DlqDepth.from_rows(run(db, "dead_letter_depth", queue=None))
    assert depth.to_json() == {"total": 5, "queues": {"a": 3, "b": 2}}
    assert DlqDepth.from_rows(run(db, "dead_letter_depth", queue="b")).total == 2

    def count(**filters: Any) -> int:
        return int(run(db, "dead_letter_count", **{**FILTERS, **filters})[0]["count"])

    assert count() == 5 and count(queue="a") == 3 and count(kind="y", queue="a") == 0
    assert count(older_than=86400.0) == 1 and count(ids=[a[0], b[0], -5]) == 2


def test_retry_puts_the_job_back_under_its_id(db: psycopg.Connection) -> None:
    job_id = full_job(db)
    before = job_record(db, job_id)
    assert before is not None
    move(db, [job_id], "exhausted")
    db.commit()
    db.execute("LISTEN awa_mail")
    db.commit()
    (row,) = run(db, "dead_letter_retry", ids=[job_id], **NO_OVERRIDES)
    db.commit()
    assert row["id"] == job_id and dead_record(db, job_id) is None
    job = JobRow.from_record(job_record(db, job_id) or {})
    assert job.state is JobState.AVAILABLE and job.attempt == 0 and job.queue == "mail"
    assert job.errors[:-1] == before["errors"]
    assert job.errors[-1]["error"] == "retried from the dead-letter queue"
    assert job.errors[-1]["attempt"] == 5 and job.errors[-1]["at"]
    assert job.callback_id is None and job.callback_timeout_at is None
    assert job.heartbeat_at is None and job.deadline_at is None and job.finalized_at is None
    assert job.callback_result is None
    kept = ("args", "metadata", "tags", "unique_key", "output", "run_lease", "created_at", "kind")
    assert all(getattr(job, name) == before[name] for name in kept)
    assert [n.channel for n in db.notifies(timeout=5, stop_after=1)] == ["awa_mail"]


def test_retry_with_overrides(db: psycopg.Connection) -> None:
    ids = add_jobs(db, 2, queue="mail", priority=2)
    fail(db, ids)
    move(db, ids)
    later = db.execute("SELECT now() + interval '1 hour'").fetchone()
    assert later is not None
    (moved,) = run(db, "dead_letter_retry", ids=[ids[0]], queue="slow", priority=4, run_at=later[0])
    assert (moved["queue"], moved["priority"], moved["state"]) == ("slow", 4, "scheduled")
    assert moved["run_at"] == later[0]
    (now,) = run(db, "dead_letter_retry", ids=[ids[1]], queue=None, priority=1, run_at=None)
    assert (now["queue"], now["priority"], now["state"]) == ("mail", 1, "available")


def test_retry_skips_a_dead_letter_whose_unique_key_is_held_again(db: psycopg.Connection) -> None:
    key = b"\x07"
    first, second = add_jobs(db, 2, unique_key=key, unique_states="{available}", state="failed")
    move(db, [first, second])
    (holder,) = add_jobs(db, 1, unique_key=key, unique_states="{available}")
    assert run(db, "dead_letter_retry", ids=[first, second], **NO_OVERRIDES) == []
    assert ids_in(db, "dead_letters") == [first, second]  # nothing lost
    db.execute("UPDATE awa.jobs SET state = 'completed' WHERE id = %s", (holder,))
    # Two dead letters with one key: one goes back, the other waits in the DLQ.
    retried = run(db, "dead_letter_retry", ids=[first, second], **NO_OVERRIDES)
    assert len(retried) == 1
    assert sorted(ids_in(db, "dead_letters") + [retried[0]["id"]]) == [first, second]


def test_retry_by_filter_walks_past_skipped_dead_letters(db: psycopg.Connection) -> None:
    key = b"\x09"
    ids = add_jobs(db, 23, queue="q", state="failed")
    blocked = add_jobs(
        db, 2, queue="q", state="failed", unique_key=key, unique_states="{available}"
    )
    move(db, ids + blocked)
    add_jobs(db, 1, unique_key=key, unique_states="{available}")
    other = add_jobs(db, 1, queue="r", state="failed")
    move(db, other)
    db.commit()
    after, batches, retried = 0, 0, 0
    while True:
        picked = [
            r["id"]
            for r in run(
                db, "dead_letter_select", after=after, batch=10, **{**FILTERS, "queue": "q"}
            )
        ]
        retried += len(run(db, "dead_letter_retry", ids=picked, **NO_OVERRIDES))
        db.commit()
        batches += 1
        assert len(picked) <= 10
        if len(picked) < 10:
            break
        after = picked[-1]
    assert (batches, retried) == (3, 23)
    assert ids_in(db, "dead_letters") == sorted(blocked + other)


def test_purge_by_each_filter_in_bounded_batches(db: psycopg.Connection) -> None:
    a = add_jobs(db, 12, queue="a", kind="x", state="failed")
    b = add_jobs(db, 3, queue="b", kind="y", state="failed")
    move(db, a + b)
    db.execute(
        "UPDATE awa.dead_letters SET dead_at = now() - interval '40 days' WHERE id = ANY (%s)",
        (b[:2],),
    )

    def purge(**filters: Any) -> int:
        return rowcount(db, "dead_letter_purge", batch=5, **{**FILTERS, **filters})

    assert purge(ids=[a[0], b[2]]) == 2
    assert purge(older_than=30 * 86400.0) == 2
    assert purge(kind="y") == 0
    assert [purge(queue="a") for _ in range(4)] == [5, 5, 1, 0]
    assert ids_in(db, "dead_letters") == []


def test_prune_deletes_only_past_retention_in_batches(db: psycopg.Connection) -> None:
    ids = add_jobs(db, 7, state="failed")
    move(db, ids)
    db.execute(
        "UPDATE awa.dead_letters SET dead_at = now() - interval '31 days' WHERE id <> %s", (ids[0],)
    )
    retention = 30 * 86400.0
    assert [rowcount(db, "dead_letter_prune", retention=retention, batch=4) for _ in range(3)] == [
        4,
        2,
        0,
    ]
    assert ids_in(db, "dead_letters") == [ids[0]]


def test_the_statements_are_loaded_by_name() -> None:
    names = {n for n in SQL if SQL.origin(n) == "dead_letters.sql"}
    assert names == {
        "dead_letter_move",
        "dead_letter_finalize",
        "dead_letter_move_failed",
        "dead_letter_get",
        "dead_letter_list",
        "dead_letter_depth",
        "dead_letter_count",
        "dead_letter_select",
        "dead_letter_retry",
        "dead_letter_purge",
        "dead_letter_prune",
    }
