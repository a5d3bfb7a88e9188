"""The periodic statements (awa_cli/db/sql/periodic.sql) against the real database: what the
second phase's leader, Client and `awa cron` commands are built on."""

from __future__ import annotations

import threading
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
import pytest
from psycopg.rows import dict_row

from awa_cli.db.params import insert_each_params
from awa_cli.db.periodic import (
    advance_params,
    fire_job,
    fire_params,
    sweep_advance_params,
    upsert_params,
)
from awa_cli.db.statements import SQL
from awa_cli.periodic import DueRow, PeriodicJob, Schedule, due_fires, plan_sweep
from tests.helpers import results_in_threads

pytestmark = pytest.mark.integration

NIGHTLY = Schedule(
    "nightly",
    "0 3 * * *",
    "report",
    {"day": "yesterday"},
    "Europe/Berlin",
    "latest",
    {"queue": "reports", "priority": 1, "metadata": {"team": "bi"}},
)
HOURLY = Schedule("hourly", "@hourly", "tick", {}, options={"queue": "default"})


def run(
    db: psycopg.Connection, name: str, params: dict[str, Any] | None = None
) -> list[dict[str, Any]]:
    with db.cursor(row_factory=dict_row) as cur:
        cur.execute(SQL[name], params or {})
        return cur.fetchall() if cur.description else []


def fire(db: psycopg.Connection, fires: list[tuple[Schedule, datetime]]) -> list[dict[str, Any]]:
    """What the sweep does with its fire times: record them (periodic_fire), then insert the
    jobs of the new ones with insert_each; each row gets its job_id (None: no job)."""
    rows = run(db, "periodic_fire", fire_params(fires))
    new = [(r, fire_job(s, t)) for r, (s, t) in zip(rows, fires, strict=True) if r["new_fire"]]
    for r in rows:
        r["job_id"] = None
    if new:
        ids = run(db, "insert_each", insert_each_params([job for _, job in new]))
        for (r, _), inserted in zip(new, ids, strict=True):
            r["job_id"] = inserted["id"]
    return rows


def row(db: psycopg.Connection, name: str) -> dict[str, Any]:
    rows = run(db, "periodic_get", {"name": name})
    assert len(rows) == 1
    return rows[0]


def test_upsert_inserts_then_leaves_an_unchanged_definition_alone(db: psycopg.Connection) -> None:
    first = run(db, "periodic_upsert", upsert_params([NIGHTLY, HOURLY]))
    db.commit()
    assert [(r["name"], r["inserted"], r["paused"]) for r in first] == [
        ("hourly", True, False),
        ("nightly", True, False),
    ]
    stored = row(db, "nightly")
    assert Schedule.from_definition("nightly", stored["definition"]) == NIGHTLY
    assert stored["next_fire_at"] == stored["created_at"]  # due at once: the leader computes it
    before = row(db, "nightly")["updated_at"]
    again = run(db, "periodic_upsert", upsert_params([NIGHTLY, HOURLY]))
    db.commit()
    assert again == []  # nothing written
    assert row(db, "nightly")["updated_at"] == before


def test_upsert_keeps_pause_and_fire_state_and_resets_next_fire_only_on_a_new_time(
    db: psycopg.Connection,
) -> None:
    run(db, "periodic_upsert", upsert_params([NIGHTLY]))
    run(db, "periodic_pause", {"name": "nightly"})
    fired, following = datetime(2026, 5, 5, 1, tzinfo=UTC), datetime(2026, 5, 6, 1, tzinfo=UTC)
    run(db, "periodic_advance", advance_params([("nightly", fired, following, 42)]))
    db.commit()
    created = row(db, "nightly")["created_at"]

    # Another option (priority): the definition is replaced, the rest is kept.
    changed = Schedule(**{**NIGHTLY.__dict__, "options": {"queue": "reports", "priority": 3}})
    written = run(
        db,
        "periodic_upsert",
        upsert_params([changed], {"nightly": datetime(2030, 1, 1, tzinfo=UTC)}),
    )
    assert [(r["inserted"], r["paused"]) for r in written] == [(False, True)]
    stored = row(db, "nightly")
    assert stored["definition"]["options"]["priority"] == 3
    assert (
        stored["paused"],
        stored["last_fire_at"],
        stored["next_fire_at"],
        stored["last_job_id"],
    ) == (
        True,
        fired,
        following,
        42,
    )
    assert stored["created_at"] == stored["active_since"] == created

    # Another time of day: next_fire_at is the caller's (or due at once when it gives none).
    moved = Schedule(**{**changed.__dict__, "cron": "0 4 * * *"})
    new_next = datetime(2026, 5, 6, 2, tzinfo=UTC)
    db.commit()
    run(db, "periodic_upsert", upsert_params([moved], {"nightly": new_next}))
    stored = row(db, "nightly")
    assert stored["next_fire_at"] == new_next
    # ... and fire times of the new expression before the change are not caught up.
    assert stored["active_since"] > created
    rezoned = Schedule(**{**moved.__dict__, "timezone": "UTC"})
    run(db, "periodic_upsert", upsert_params([rezoned]))
    stored = row(db, "nightly")
    assert stored["next_fire_at"] == stored["updated_at"]  # due at once
    assert (stored["paused"], stored["last_fire_at"], stored["created_at"]) == (
        True,
        fired,
        created,
    )


def test_concurrent_upserts_of_the_same_schedules(dsn: str, db: psycopg.Connection) -> None:
    schedules = [Schedule(f"s{i}", "@hourly", "k") for i in range(50)]
    barrier = threading.Barrier(4)

    def upsert(index: int) -> None:
        with psycopg.connect(dsn) as conn:
            barrier.wait(timeout=10)
            params = upsert_params(reversed(schedules) if index % 2 else schedules)
            conn.execute(SQL["periodic_upsert"], params)

    assert results_in_threads(4, upsert, timeout=30) == [None] * 4
    assert db.execute("SELECT count(*) FROM awa.periodic_jobs").fetchone() == (50,)


def test_due_locks_skip_and_respect_pause(dsn: str, db: psycopg.Connection) -> None:
    run(db, "periodic_upsert", upsert_params([NIGHTLY, HOURLY]))
    db.commit()
    now = datetime.now(UTC) + timedelta(minutes=1)
    due = run(db, "periodic_due", {"now": now, "limit": 100})
    assert [r["name"] for r in due] == ["hourly", "nightly"]  # both due at once
    assert all(r["now"] == now and r["active_since"] == r["created_at"] for r in due)
    with psycopg.connect(dsn) as other:  # a second sweep meanwhile takes nothing, at once
        other.execute("SET lock_timeout = '2s'")
        assert other.execute(SQL["periodic_due"], {"now": now, "limit": 100}).fetchall() == []
    db.rollback()
    run(db, "periodic_pause", {"name": "hourly"})
    db.commit()
    assert [r["name"] for r in run(db, "periodic_due", {"now": now, "limit": 100})] == ["nightly"]
    assert [r["name"] for r in run(db, "periodic_due", {"now": now, "limit": 1})] == ["nightly"]
    db.rollback()
    # With the database's clock: nothing is due once next_fire_at is in the future.
    run(
        db,
        "periodic_advance",
        advance_params([("nightly", None, datetime(2999, 1, 1, tzinfo=UTC), None)]),
    )
    assert run(db, "periodic_due", {"now": None, "limit": 100}) == []
    next_due = run(db, "periodic_next_due")
    assert next_due[0]["next_fire_at"] == datetime(2999, 1, 1, tzinfo=UTC)  # hourly is paused
    assert next_due[0]["seconds"] > 3e10  # from now, by the database's clock


def test_a_sweep_fires_once_per_fire_time(db: psycopg.Connection) -> None:
    run(db, "periodic_upsert", upsert_params([NIGHTLY, HOURLY]))
    db.commit()
    # The leader's sweep, by hand: two missed hours (catch_up latest fires one), and nightly.
    now = datetime(2026, 5, 5, 12, 0, 20, tzinfo=UTC)
    fires = []
    advance = []
    since = datetime(2026, 5, 5, 9, 0, 5, tzinfo=UTC)  # as if created three hours before now
    for r in run(db, "periodic_due", {"now": None, "limit": 100}):
        schedule = Schedule.from_definition(r["name"], r["definition"])
        due = due_fires(schedule, r["last_fire_at"], since, now)
        fires += [(schedule, t) for t in due.fires]
        advance.append((schedule.name, due.fires[-1] if due.fires else None, due.next_fire_at))
    assert [(s.name, t) for s, t in fires] == [
        ("hourly", datetime(2026, 5, 5, 11, tzinfo=UTC)),  # the most recent missed hour
        ("hourly", datetime(2026, 5, 5, 12, tzinfo=UTC)),  # on time
    ]
    result = fire(db, fires)
    assert [r["new_fire"] for r in result] == [True, True]
    ids = {r["fire_at"]: r["job_id"] for r in result}
    run(
        db,
        "periodic_advance",
        advance_params([(n, last, nxt, ids.get(last)) for n, last, nxt in advance]),
    )
    db.commit()

    job = db.execute(
        "SELECT kind, queue, state::text, run_at, metadata FROM awa.jobs WHERE id = %s",
        (ids[datetime(2026, 5, 5, 12, tzinfo=UTC)],),
    ).fetchone()
    assert job == (
        "tick",
        "default",
        "available",
        datetime(2026, 5, 5, 12, tzinfo=UTC),
        {"awa.periodic": "hourly", "awa.fire_at": "2026-05-05T12:00:00Z"},
    )
    listed = {r["name"]: r for r in run(db, "periodic_list")}
    assert list(listed) == ["hourly", "nightly"]
    assert listed["hourly"]["last_fire_at"] == datetime(2026, 5, 5, 12, tzinfo=UTC)
    assert listed["hourly"]["next_fire_at"] == datetime(2026, 5, 5, 13, tzinfo=UTC)
    assert listed["hourly"]["last_job_id"] == ids[datetime(2026, 5, 5, 12, tzinfo=UTC)]
    assert listed["hourly"]["last_job_state"] == "available"
    assert listed["nightly"]["last_job_id"] is None and listed["nightly"]["last_job_state"] is None
    assert listed["nightly"]["next_fire_at"] == datetime(2026, 5, 6, 1, tzinfo=UTC)  # 03:00 CEST
    shown = PeriodicJob.from_record(listed["hourly"])
    assert (shown.cron, shown.kind, shown.last_job_state) == ("@hourly", "tick", "available")
    assert shown.to_json()["last_fire_at"] == "2026-05-05T12:00:00Z"
    assert shown.to_json()["options"] == {"queue": "default"}

    # The same fire times again (a second leader, a replayed sweep): recorded, no job.
    again = fire(db, fires + fires[:1])
    assert [(r["new_fire"], r["job_id"]) for r in again] == [(False, None)] * 3
    db.commit()
    assert db.execute("SELECT count(*) FROM awa.jobs").fetchone() == (2,)
    # The last job's state follows the job; gone (retention) shows as none.
    db.execute("DELETE FROM awa.jobs WHERE id = %s", (listed["hourly"]["last_job_id"],))
    assert row(db, "hourly")["last_job_state"] is None


def test_a_fire_in_one_call_twice_is_one_job(db: psycopg.Connection) -> None:
    run(db, "periodic_upsert", upsert_params([HOURLY]))
    t = datetime(2026, 5, 5, 12, tzinfo=UTC)
    result = fire(db, [(HOURLY, t), (HOURLY, t)])
    assert [r["new_fire"] for r in result] == [True, False]
    assert result[0]["job_id"] is not None and result[1]["job_id"] is None
    assert db.execute("SELECT count(*) FROM awa.jobs").fetchone() == (1,)


def test_a_killed_leader_leaves_nothing_and_concurrent_leaders_fire_once(
    dsn: str, db: psycopg.Connection
) -> None:
    run(db, "periodic_upsert", upsert_params([HOURLY]))
    db.commit()
    t = datetime(2026, 5, 5, 12, tzinfo=UTC)
    # A leader that dies between the insert and the commit: its connection goes, so does all.
    dead = psycopg.connect(dsn)
    assert fire(dead, [(HOURLY, t)])[0]["job_id"] is not None
    dead.close()
    assert db.execute("SELECT count(*) FROM awa.periodic_fires").fetchone() == (0,)
    assert db.execute("SELECT count(*) FROM awa.jobs").fetchone() == (0,)
    # Two leaders firing the same time at once: the second waits on the first's fire row and
    # then finds it taken.
    first = psycopg.connect(dsn)
    fire(first, [(HOURLY, t)])
    results: list[Any] = []

    def second() -> None:
        with psycopg.connect(dsn) as conn:
            results.append(
                conn.execute(SQL["periodic_fire"], fire_params([(HOURLY, t)])).fetchall()
            )

    thread = threading.Thread(target=second)
    thread.start()
    thread.join(0.5)
    assert thread.is_alive()  # blocked on the uncommitted fire row
    first.commit()
    first.close()
    thread.join(10)
    assert results and results[0][0][2] is False  # new_fire
    assert db.execute("SELECT count(*) FROM awa.jobs").fetchone() == (1,)


def test_a_held_unique_key_counts_the_fire_done(db: psycopg.Connection) -> None:
    unique = Schedule(
        "u", "* * * * *", "k", options={"queue": "default", "unique_opts": {"by_args": True}}
    )
    run(db, "periodic_upsert", upsert_params([unique]))
    first = fire(db, [(unique, datetime(2026, 5, 5, 12, tzinfo=UTC))])
    second = fire(db, [(unique, datetime(2026, 5, 5, 12, 1, tzinfo=UTC))])
    assert first[0]["job_id"] is not None
    assert (second[0]["new_fire"], second[0]["job_id"]) == (True, None)  # key held by the first
    assert db.execute("SELECT count(*) FROM awa.jobs").fetchone() == (1,)


def test_pause_resume_delete_and_unknown_names(db: psycopg.Connection) -> None:
    run(db, "periodic_upsert", upsert_params([NIGHTLY]))
    run(
        db,
        "periodic_advance",
        advance_params([("nightly", None, datetime(2026, 5, 6, 1, tzinfo=UTC), None)]),
    )
    db.commit()
    assert run(db, "periodic_pause", {"name": "nightly"}) == [{"name": "nightly", "paused": True}]
    assert run(db, "periodic_pause", {"name": "nightly"}) == [{"name": "nightly", "paused": True}]
    paused = PeriodicJob.from_record(row(db, "nightly"))
    assert paused.paused and paused.next_fire_at is None
    assert run(db, "periodic_next_due") == [{"next_fire_at": None, "seconds": None}]
    assert run(db, "periodic_resume", {"name": "nightly"}) == [{"name": "nightly", "paused": False}]
    resumed = row(db, "nightly")
    assert resumed["active_since"] > resumed["created_at"]
    assert resumed["next_fire_at"] == resumed["active_since"]  # due at once: recomputed
    due = run(db, "periodic_due", {"now": None, "limit": 10})
    assert due[0]["active_since"] == resumed["active_since"]
    assert run(db, "periodic_resume", {"name": "nightly"}) == [{"name": "nightly", "paused": False}]
    assert row(db, "nightly")["active_since"] == resumed["active_since"]
    for statement in ("periodic_pause", "periodic_resume", "periodic_delete", "periodic_get"):
        assert run(db, statement, {"name": "nope"}) == []
    fire(db, [(NIGHTLY, datetime(2026, 5, 5, 1, tzinfo=UTC))])
    assert run(db, "periodic_delete", {"name": "nightly"}) == [{"name": "nightly"}]
    assert db.execute("SELECT count(*) FROM awa.periodic_fires").fetchone() == (0,)
    assert run(db, "periodic_list") == []


def test_prune_keeps_recent_fires(db: psycopg.Connection) -> None:
    run(db, "periodic_upsert", upsert_params([HOURLY]))
    base = datetime(2026, 5, 5, tzinfo=UTC)
    fires = [(HOURLY, base + timedelta(hours=h)) for h in range(48)]
    fire(db, fires)
    run(db, "periodic_advance", advance_params([("hourly", fires[-1][1], None, None)]))
    with db.cursor() as cur:
        cur.execute(SQL["periodic_prune_fires"], {"keep": timedelta(hours=24)})
        assert cur.rowcount == 23
    assert db.execute("SELECT min(fire_at) FROM awa.periodic_fires").fetchone() == (
        base + timedelta(hours=23),
    )


def test_the_due_queries_use_the_index(db: psycopg.Connection) -> None:
    db.execute(
        "INSERT INTO awa.periodic_jobs (name, definition, next_fire_at, paused)"
        " SELECT 's' || i, '{}', now() + i * interval '1 minute', i % 10 = 0"
        " FROM generate_series(1, 5000) i"
    )
    db.execute("ANALYZE awa.periodic_jobs")
    for name, params in (("periodic_due", {"now": None, "limit": 100}), ("periodic_next_due", {})):
        plan = "\n".join(
            r[0]
            for r in db.execute(f"EXPLAIN {SQL[name]}", params).fetchall()  # type: ignore[call-overload]
        )
        assert "periodic_jobs_next_fire_idx" in plan, plan


def sweep(db: psycopg.Connection, now: datetime | None = None) -> tuple[int, int]:
    """One leader sweep, as the second phase will run it: (fire times, jobs inserted)."""
    rows = run(db, "periodic_due", {"now": now, "limit": 1000})
    if not rows:
        db.commit()
        return 0, 0
    due = [DueRow(r["name"], r["definition"], r["active_since"], r["last_fire_at"]) for r in rows]
    plan = plan_sweep(due, rows[0]["now"])
    fired = fire(db, plan.fires) if plan.fires else []
    run(db, "periodic_advance", sweep_advance_params(plan, fired))
    db.commit()
    return len(fired), sum(r["job_id"] is not None for r in fired)


def test_full_sweeps_with_the_database_clock(db: psycopg.Connection) -> None:
    every_second = [
        Schedule(f"s{i}", "* * * * * *", "k", options={"queue": "q"}) for i in range(20)
    ]
    created = run(db, "periodic_upsert", upsert_params(every_second))[0]["active_since"]
    db.commit()
    # The first sweep at the instant of creation computes next_fire_at and fires nothing
    # before it. (At the clock's own now() a second boundary could fall between the upsert
    # and the sweep, and the second after creation would be due: a flake seen once.)
    assert sweep(db, now=created) == (0, 0)
    first = run(db, "periodic_next_due")[0]["next_fire_at"]
    assert first is not None
    # Nothing is due before that moment, and a sweep then costs nothing.
    assert run(db, "periodic_due", {"now": first - timedelta(microseconds=1), "limit": 10}) == []
    db.rollback()
    # Back-date the schedules by three seconds instead of waiting: each fires its last three
    # seconds at the latest, exactly once however often the sweep runs.
    db.execute(
        "UPDATE awa.periodic_jobs SET active_since = active_since - interval '3 seconds',"
        " next_fire_at = now() - interval '2 seconds'"
    )
    db.commit()
    fires, inserted = sweep(db)
    assert fires == inserted and 20 * 3 <= inserted <= 20 * 10  # >= 3 s of fire times each
    db.execute("UPDATE awa.periodic_jobs SET next_fire_at = now() - interval '1 hour'")
    db.commit()
    again, more = sweep(db)
    assert more <= again and more <= 20 * 2  # only seconds that passed since the last sweep
    counts = db.execute(
        "SELECT count(*), count(DISTINCT (metadata->>'awa.periodic', run_at)) FROM awa.jobs"
    ).fetchone()
    assert counts is not None and counts[0] == counts[1] == inserted + more
    fired = db.execute("SELECT count(*) FROM awa.periodic_fires").fetchone()
    assert fired == (inserted + more,)


# --- the async calls of awa_cli.db.periodic --------------------------------------------------


@pytest.mark.asyncio
async def test_the_calls_drive_a_schedule_through_its_life(dsn: str) -> None:
    from awa_cli.db import periodic as calls

    every_hour = Schedule("hourly", "@hourly", "tick", {}, catch_up="all", options={"queue": "q"})
    at = datetime(2026, 5, 5, 12, 0, 20, tzinfo=UTC)
    async with await psycopg.AsyncConnection.connect(dsn) as conn:
        async with conn.transaction():
            written = await calls.upsert(conn, [every_hour, NIGHTLY])
            assert [r["name"] for r in written] == ["hourly", "nightly"]
            assert await calls.upsert(conn, []) == []
            await conn.execute(
                "UPDATE awa.periodic_jobs SET active_since = '2026-05-05 09:00:05Z',"
                " next_fire_at = '2026-05-05 09:00:05Z'"
            )
        async with conn.transaction():
            result = await calls.sweep(conn, now=at)
        assert result.swept == 2 and result.inserted == 3 and result.queues == {"q"}
        assert [r["fire_at"].hour for r in result.fired] == [10, 11, 12]
        async with conn.transaction():
            assert (await calls.sweep(conn, now=at)).swept == 0  # next due at 13:00
            assert await calls.next_due(conn) == datetime(2026, 5, 5, 13, tzinfo=UTC)
        async with conn.transaction():
            later = await calls.sweep(conn, now=at + timedelta(hours=1))
        assert later.inserted == 1 and later.fired[0]["fire_at"] == datetime(
            2026, 5, 5, 13, tzinfo=UTC
        )

        listed = {job.name: job for job in await calls.list_all(conn)}
        assert listed["hourly"].last_fire_at == datetime(2026, 5, 5, 13, tzinfo=UTC)
        assert listed["hourly"].last_job_state == "available"
        assert await calls.set_paused(conn, "hourly", True)
        assert not await calls.set_paused(conn, "nope", True)
        shown = await calls.get(conn, "hourly")
        assert shown is not None and shown.paused and shown.next_fire_at is None
        assert await calls.set_paused(conn, "hourly", False)

        # A stored definition that no longer validates fires nothing and is retried later.
        await conn.execute(
            'UPDATE awa.periodic_jobs SET definition = definition || \'{"cron": "0 99 * * *"}\','
            " next_fire_at = '2026-05-05 09:00:00Z' WHERE name = 'nightly'"
        )
        async with conn.transaction():
            broken = await calls.sweep(conn, now=at + timedelta(hours=2))
        assert [name for name, _ in broken.invalid] == ["nightly"]
        nightly = await calls.get(conn, "nightly")
        assert nightly is not None
        assert nightly.next_fire_at == at + timedelta(hours=2, minutes=1)

        assert await calls.prune_fires(conn, timedelta(0)) == 3  # 10:00-12:00, behind 13:00
        assert await calls.delete(conn, "hourly")
        assert not await calls.delete(conn, "hourly")
        assert await calls.get(conn, "hourly") is None
        await conn.commit()


def test_the_sweep_benchmark_runs(dsn: str) -> None:
    """benchmarks/periodic.py, three tiny rounds (no timing asserted): 1,000 schedules, 100 due."""
    import asyncio

    from benchmarks.periodic import _sweeps

    assert len(asyncio.run(_sweeps(dsn, 3, 100))) == 3
    with psycopg.connect(dsn) as conn:
        assert conn.execute("SELECT count(*) FROM awa.jobs").fetchone() == (300,)
        assert conn.execute(
            "SELECT count(DISTINCT metadata->>'awa.periodic') FROM awa.jobs"
        ).fetchone() == (300,)
