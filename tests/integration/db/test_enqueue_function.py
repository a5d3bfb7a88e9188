"""awa.enqueue and awa.enqueue_many (sql/0007_enqueue_function.sql, architecture §17) beyond
the vectors: the contract's call verbatim, positional and named calls, NULL as the default,
duplicates, the NOTIFY an idle worker wakes on, a producer role's grants, and the migration
applied twice."""

from __future__ import annotations

import asyncio
import time
from importlib import resources
from typing import Any

import psycopg
import pytest
from psycopg.types.json import Jsonb

import awa_cli as awa
from awa_cli.enqueue import DEFAULT_MAX_ATTEMPTS, DEFAULT_PRIORITY, DEFAULT_QUEUE
from tests.helpers import running_worker, wait_until
from tests.integration.db.enqueue_vectors import ROW_SQL, job_count

pytestmark = [pytest.mark.integration]


def row_of(conn: psycopg.Connection[Any], job_id: int) -> dict[str, Any]:
    cur = conn.execute(ROW_SQL, (job_id,))
    record = cur.fetchone()
    assert record is not None
    row = dict(zip([d.name for d in cur.description or ()], record, strict=True))
    row.pop("run_at")
    return row


def scalar(conn: psycopg.Connection[Any], statement: str, params: Any = None) -> Any:
    record = conn.execute(statement, params).fetchone()
    assert record is not None
    return record[0]


def test_the_contract_call_verbatim_stores_the_python_insert_row(db: psycopg.Connection) -> None:
    job_id = scalar(
        db,
        """SELECT awa.enqueue(kind => 'send_email', args => '{"to": "a@b"}'::jsonb,
               queue => 'email', priority => 2, run_at => now(), max_attempts => 25,
               metadata => '{}', tags => '{}', unique_key => NULL)""",
    )
    assert isinstance(job_id, int)
    python = awa.insert(db, {"to": "a@b"}, kind="send_email", queue="email")
    assert row_of(db, job_id) == row_of(db, python.id)
    assert row_of(db, job_id)["state"] == "available"


def test_defaults_match_the_python_insert(db: psycopg.Connection) -> None:
    sql_id = scalar(db, "SELECT awa.enqueue('send_email')")
    python = awa.insert(db, {}, kind="send_email")
    row = row_of(db, sql_id)
    assert row == row_of(db, python.id)
    assert (row["queue"], row["priority"], row["max_attempts"], row["args"]) == (
        DEFAULT_QUEUE,
        DEFAULT_PRIORITY,
        DEFAULT_MAX_ATTEMPTS,
        {},
    )


def test_positional_arguments_follow_the_contract_order(db: psycopg.Connection) -> None:
    job_id = scalar(
        db,
        "SELECT awa.enqueue('k', '{\"n\": 1}', 'q', 3, NULL, 5, '{\"m\": true}', '{t1,t2}', NULL)",
    )
    row = row_of(db, job_id)
    assert (row["kind"], row["args"], row["queue"], row["priority"]) == ("k", {"n": 1}, "q", 3)
    assert (row["max_attempts"], row["metadata"], row["tags"]) == (5, {"m": True}, ["t1", "t2"])


def test_null_arguments_take_the_defaults(db: psycopg.Connection) -> None:
    job_id = scalar(
        db,
        """SELECT awa.enqueue(kind => 'k', queue => NULL, priority => NULL, run_at => NULL,
               max_attempts => NULL, metadata => NULL, tags => NULL, unique_key => NULL,
               unique_opts => NULL, deadline_duration => NULL, ordering_key => NULL,
               concurrency_key => NULL)""",
    )
    assert row_of(db, job_id) == row_of(db, awa.insert(db, {}, kind="k").id)


def test_a_held_unique_key_returns_null_across_producers(db: psycopg.Connection) -> None:
    python = awa.insert(db, {"account": 7}, kind="sync", unique_opts={})
    duplicate = "SELECT awa.enqueue(kind => 'sync', args => %s, unique_opts => '{}')"
    assert scalar(db, duplicate, [Jsonb({"account": 7})]) is None
    assert job_count(db) == 1
    # SQL first, then Python: the Python insert raises, as for any duplicate.
    first = scalar(db, duplicate, [Jsonb({"account": 8})])
    assert isinstance(first, int)
    with pytest.raises(awa.UniqueConflict):
        awa.insert(db, {"account": 8}, kind="sync", unique_opts={})
    # Once the holder leaves the key's states, the key is free again.
    db.execute("UPDATE awa.jobs SET state = 'cancelled' WHERE id = %s", (first,))
    assert isinstance(scalar(db, duplicate, [Jsonb({"account": 8})]), int)


def test_an_explicit_unique_key_deduplicates_within_its_kind(db: psycopg.Connection) -> None:
    call = "SELECT awa.enqueue(kind => %s, unique_key => 'order-42')"
    assert isinstance(scalar(db, call, ["receipt"]), int)
    assert scalar(db, call, ["receipt"]) is None
    assert isinstance(scalar(db, call, ["invoice"]), int)  # another kind: another key


def test_enqueue_many_returns_ids_in_order_with_null_for_duplicates(
    db: psycopg.Connection,
) -> None:
    jobs = [
        {"kind": "a", "args": {"n": 1}},
        {"kind": "b", "unique_key": "x"},
        {"kind": "b", "unique_key": "x"},
        {"kind": "c", "queue": "other", "run_at": "2999-01-01T00:00:00Z", "tags": ["t"]},
    ]
    ids = [r[0] for r in db.execute("SELECT * FROM awa.enqueue_many(%s)", [Jsonb(jobs)])]
    assert ids[2] is None and ids[0] < ids[1] < ids[3]
    kinds = db.execute("SELECT kind, queue, state::text FROM awa.jobs ORDER BY id").fetchall()
    assert kinds == [
        ("a", "default", "available"),
        ("b", "default", "available"),
        ("c", "other", "scheduled"),
    ]
    assert db.execute("SELECT * FROM awa.enqueue_many('[]')").fetchall() == []


@pytest.mark.parametrize(
    ("jobs", "field"),
    [
        ('{"kind": "a"}', "jobs"),
        ("[1]", "jobs"),
        ('[{"kind": "a", "prioirty": 1}]', "prioirty"),
        ('[{"kind": 5}]', "kind"),
        ('[{"kind": "a", "priority": 2.5}]', "priority"),
        ('[{"kind": "a", "priority": 1e12}]', "priority"),
        ('[{"kind": "a", "tags": "x"}]', "tags"),
        ('[{"kind": "a", "tags": [1]}]', "tags"),
        ('[{"kind": "a", "metadata": 1}]', "metadata"),
        ('[{"kind": "a", "args": null}]', "args"),
    ],
)
def test_enqueue_many_names_the_bad_field(db: psycopg.Connection, jobs: str, field: str) -> None:
    with pytest.raises(psycopg.errors.InvalidParameterValue) as caught:
        db.execute("SELECT * FROM awa.enqueue_many(%s::jsonb)", [jobs]).fetchall()
    assert caught.value.diag.column_name == field
    assert (caught.value.diag.message_primary or "").startswith(f"{field}: ")
    db.rollback()
    assert job_count(db) == 0


def test_a_later_enqueue_in_the_transaction_does_not_name_an_element(
    db: psycopg.Connection,
) -> None:
    db.execute('SELECT * FROM awa.enqueue_many(\'[{"kind": "a"}]\')').fetchall()
    with pytest.raises(psycopg.errors.InvalidParameterValue) as caught:
        db.execute("SELECT awa.enqueue(kind => 'a', priority => 9)")
    assert caught.value.diag.message_primary == "priority: must be between 1 and 4, got 9"


def test_enqueue_sends_the_python_insert_notify(dsn: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as listener, psycopg.connect(dsn) as producer:
        channel = scalar(listener, "SELECT awa.channel_for('email')")
        listener.execute(f'LISTEN "{channel}"')
        producer.execute("SELECT awa.enqueue(kind => 'send_email', queue => 'email')")
        assert list(listener.notifies(timeout=0.3, stop_after=1)) == []  # not before commit
        producer.commit()
        got = list(listener.notifies(timeout=5, stop_after=1))
        assert [n.channel for n in got] == [channel]
        # A scheduled job wakes nobody, as with the Python insert.
        producer.execute(
            "SELECT awa.enqueue(kind => 'send_email', queue => 'email', "
            "run_at => now() + interval '1 hour')"
        )
        producer.commit()
        assert list(listener.notifies(timeout=0.5, stop_after=1)) == []


@pytest.mark.asyncio
async def test_an_idle_worker_runs_a_sql_enqueued_job_at_once(dsn: str) -> None:
    app = awa.App()
    ran: list[dict[str, Any]] = []

    @app.task(kind="greet")
    async def greet(job: awa.Job) -> None:
        ran.append(job.args)

    # A minute between polls: only the NOTIFY can start the job within seconds.
    async with running_worker(app, dsn, poll_interval=60):
        await asyncio.sleep(0.3)
        started = time.monotonic()
        async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
            await conn.execute(
                "SELECT awa.enqueue(kind => 'greet', args => %s)", [Jsonb({"name": "Zoë 😀"})]
            )
        await wait_until(lambda: bool(ran), timeout=10)
        assert time.monotonic() - started < 5
    assert ran == [{"name": "Zoë 😀"}]


def test_a_producer_role_needs_only_insert_and_the_sequence(
    db: psycopg.Connection, dsn: str, producer_role: str
) -> None:
    """The grants docs/enqueue-from-anywhere.md gives a producer (and a trigger's role)."""
    role = producer_role
    with psycopg.connect(dsn) as producer:
        producer.execute(f"SET ROLE {role}")
        assert isinstance(scalar(producer, "SELECT awa.enqueue(kind => 'plain')"), int)
        assert (
            len(producer.execute('SELECT * FROM awa.enqueue_many(\'[{"kind": "b"}]\')').fetchall())
            == 1
        )
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            producer.execute("SELECT awa.enqueue(kind => 'unique', unique_key => 'k')")
        producer.rollback()
    db.execute(f"GRANT SELECT (unique_key, state, unique_states) ON awa.jobs TO {role}")
    db.commit()
    with psycopg.connect(dsn) as producer:
        producer.execute(f"SET ROLE {role}")
        assert isinstance(scalar(producer, "SELECT awa.enqueue('u', unique_key => 'k')"), int)
        assert scalar(producer, "SELECT awa.enqueue('u', unique_key => 'k')") is None
        producer.commit()


def test_applying_the_migration_again_is_harmless(db: psycopg.Connection) -> None:
    # 0014 replaces 0007's awa.enqueue with a longer signature: 0007 again, alone, would make a
    # second function beside it, so the chain from 0007 is what is applied again (twice).
    sql = resources.files("awa_cli.sql")
    text = (sql / "0007_enqueue_function.sql").read_text("utf-8")
    text += (sql / "0014_enqueue_after.sql").read_text("utf-8")
    db.execute(text)  # type: ignore[call-overload]
    db.execute(text)  # type: ignore[call-overload]
    assert isinstance(scalar(db, "SELECT awa.enqueue('again')"), int)
    overloads = scalar(
        db,
        "SELECT count(*) FROM pg_proc WHERE proname = 'enqueue' AND "
        "pronamespace = 'awa'::regnamespace",
    )
    assert overloads == 1
