"""awa.enqueue's `after` and `on_parent_failure` (sql/0014_enqueue_after.sql, architecture §16,
§17) beyond the vectors: a child enqueued from SQL waits for a Python-enqueued parent that a
real worker runs, a cancelled parent cancels it, the 10,000-parent limit, a held unique key,
the producer grants docs/enqueue-from-anywhere.md gives for `after`, one function in the
catalog."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
import pytest
from psycopg.types.json import Jsonb

import awa_cli as awa
from tests.helpers import job_row, running_worker, wait_until

pytestmark = [pytest.mark.integration]


def scalar(conn: psycopg.Connection[Any], statement: str, params: Any = None) -> Any:
    record = conn.execute(statement, params).fetchone()
    assert record is not None
    return record[0]


def sql_child(dsn: str, after: list[int], **extra: str) -> int:
    """A child enqueued through awa.enqueue on a bare connection, committed."""
    named = "".join(f", {k} => %s" for k in extra)
    with psycopg.connect(dsn) as conn:
        job_id = scalar(
            conn,
            f"SELECT awa.enqueue(kind => 'child', args => %s, after => %s{named})",
            [Jsonb({"from": "sql"}), after, *extra.values()],
        )
        conn.commit()
    assert isinstance(job_id, int)
    return int(job_id)


@pytest.mark.asyncio
async def test_a_sql_child_waits_for_its_python_parent_and_a_worker_runs_it_after(
    dsn: str,
) -> None:
    app = awa.App()
    release = asyncio.Event()
    order: list[str] = []
    seen: dict[str, Any] = {}

    @app.task(kind="parent")
    async def parent(job: awa.Job) -> None:
        order.append("parent started")
        await release.wait()
        job.set_output({"rows": 3})
        order.append("parent done")

    @app.task(kind="child")
    async def child(job: awa.Job) -> None:
        order.append("child")
        seen["outputs"] = dict(job.parent_outputs)
        seen["parents"] = [(p.id, str(p.state)) for p in job.parents]

    async with awa.AsyncClient(dsn, app) as client:
        first = await client.insert({}, kind="parent")
        child_id = await asyncio.to_thread(sql_child, dsn, [first.id])
        assert job_row(dsn, child_id).state == "blocked"
        assert (
            await client.why_not_running(child_id) == f"blocked on parents {first.id} (available)"
        )
        async with running_worker(app, dsn):
            await wait_until(lambda: order == ["parent started"])
            await asyncio.sleep(0.5)  # the worker polls and is woken: the child stays blocked
            assert job_row(dsn, child_id).state == "blocked" and order == ["parent started"]
            release.set()
            await wait_until(lambda: job_row(dsn, child_id).state == "completed")
    assert order == ["parent started", "parent done", "child"]
    assert seen == {"outputs": {first.id: {"rows": 3}}, "parents": [(first.id, "completed")]}


@pytest.mark.asyncio
async def test_a_cancelled_parent_cancels_the_sql_child_with_the_default_policy(
    dsn: str,
) -> None:
    app = awa.App()
    ran: list[int] = []

    @app.task(kind="child")
    async def child(job: awa.Job) -> None:
        ran.append(job.id)

    async with awa.AsyncClient(dsn, app) as client:
        first = await client.insert(
            {}, kind="parent", run_at=datetime.now(UTC) + timedelta(hours=1)
        )
        cancelled_child = await asyncio.to_thread(sql_child, dsn, [first.id])
        runs_anyway = await asyncio.to_thread(sql_child, dsn, [first.id], on_parent_failure="run")
        await client.cancel(first.id)
        row = job_row(dsn, cancelled_child)
        assert row.state == "cancelled"
        assert row.errors[-1]["error"] == f"parent {first.id} cancelled"
        assert job_row(dsn, runs_anyway).state == "available"
        async with running_worker(app, dsn):
            await wait_until(lambda: ran == [runs_anyway])
            await asyncio.sleep(0.3)
    assert ran == [runs_anyway]


def test_a_child_of_a_completed_parent_is_available_at_once(db: psycopg.Connection) -> None:
    parent = awa.insert(db, {}, kind="parent")
    db.execute("UPDATE awa.jobs SET state = 'completed' WHERE id = %s", (parent.id,))
    job_id = scalar(db, "SELECT awa.enqueue('child', after => ARRAY[%s]::bigint[])", [parent.id])
    python = awa.insert(db, {}, kind="child", after=[parent.id])
    columns = "state::text, pending_parents, on_parent_failure, metadata, errors, has_dependents"
    rows = db.execute(
        f"SELECT {columns} FROM awa.jobs WHERE id = ANY (%s) ORDER BY id", [[job_id, python.id]]
    ).fetchall()
    assert rows[0] == rows[1] == ("available", 0, "cancel", {"awa.after": 1}, [], False)


def test_at_most_10000_distinct_parents(db: psycopg.Connection) -> None:
    base = 10**12  # ids no job has: the count is checked before the parents are looked up
    call = "SELECT awa.enqueue(kind => 'child', after => %s)"
    with pytest.raises(psycopg.errors.InvalidParameterValue) as caught:
        db.execute(call, [list(range(base, base + 10_001))])
    assert caught.value.diag.message_primary == "after: 10001 parents: at most 10000 per job"
    db.rollback()
    with pytest.raises(awa.ValidationError) as python:
        awa.insert(db, {}, kind="child", after=list(range(base, base + 10_001)))
    assert str(python.value) == caught.value.diag.message_primary
    # 10,000 distinct ids, one named twice: within the limit (then the first is unknown)
    ids = [*range(base, base + 10_000), base]
    with pytest.raises(psycopg.errors.InvalidParameterValue) as caught:
        db.execute(call, [ids])
    assert caught.value.diag.message_primary == f"after: parent job {base} not found"
    db.rollback()
    with pytest.raises(awa.ValidationError, match=f"parent job {base} not found"):
        awa.insert(db, {}, kind="child", after=ids)


def test_10000_parents_are_accepted(db: psycopg.Connection) -> None:
    db.execute("SELECT awa.enqueue_many(%s)", [Jsonb([{"kind": "parent"}] * 10_000)]).fetchall()
    ids = [r[0] for r in db.execute("SELECT id FROM awa.jobs ORDER BY id").fetchall()]
    child = scalar(db, "SELECT awa.enqueue(kind => 'child', after => %s)", [ids])
    assert scalar(db, "SELECT pending_parents FROM awa.jobs WHERE id = %s", [child]) == 10_000
    assert scalar(db, "SELECT count(*) FROM awa.job_dependencies") == 10_000
    assert scalar(db, "SELECT count(*) FROM awa.jobs WHERE has_dependents") == 10_000


def test_a_held_unique_key_returns_null_and_writes_no_edge(db: psycopg.Connection) -> None:
    states = Jsonb({"states": ["available", "blocked"]})
    holder = scalar(db, "SELECT awa.enqueue(kind => 'child', unique_opts => %s)", [states])
    assert isinstance(holder, int)
    parent = awa.insert(db, {}, kind="parent")
    call = "SELECT awa.enqueue(kind => 'child', unique_opts => %s, after => %s)"
    assert scalar(db, call, [states, [parent.id]]) is None
    assert scalar(db, "SELECT count(*) FROM awa.jobs") == 2
    assert scalar(db, "SELECT count(*) FROM awa.job_dependencies") == 0
    assert scalar(db, "SELECT has_dependents FROM awa.jobs WHERE id = %s", [parent.id]) is False
    # the Python insert raises for the same duplicate, as for any held key
    with pytest.raises(awa.UniqueConflict):
        awa.insert(
            db, {}, kind="child", unique_opts={"states": ["available", "blocked"]}, after=[parent]
        )


def test_a_blocked_child_holds_its_key_only_in_states_naming_blocked(
    db: psycopg.Connection,
) -> None:
    """The default unique states do not name blocked: a blocked child does not hold the key,
    so a duplicate with parents is inserted blocked beside it, by SQL as by Python."""
    parent = awa.insert(db, {}, kind="parent")
    call = "SELECT awa.enqueue(kind => 'child', unique_opts => '{}', after => %s)"
    assert isinstance(scalar(db, call, [[parent.id]]), int)
    assert isinstance(scalar(db, call, [[parent.id]]), int)
    python = awa.insert(db, {}, kind="child", unique_opts={}, after=[parent.id])
    assert python.state == "blocked"
    assert scalar(db, "SELECT count(DISTINCT unique_key) FROM awa.jobs WHERE kind = 'child'") == 1


def test_one_function_with_the_new_parameters_last(db: psycopg.Connection) -> None:
    signature = scalar(
        db,
        "SELECT pg_get_function_identity_arguments(p.oid) FROM pg_proc AS p "
        "WHERE proname = 'enqueue' AND pronamespace = 'awa'::regnamespace",
    )
    assert signature.endswith(", concurrency_key text, after bigint[], on_parent_failure text")
    # NULL means the default, as for every parameter: no parents, policy 'cancel'
    job_id = scalar(db, "SELECT awa.enqueue('k', after => NULL, on_parent_failure => NULL)")
    assert db.execute(
        "SELECT state::text, on_parent_failure FROM awa.jobs WHERE id = %s", [job_id]
    ).fetchone() == ("available", None)


@pytest.mark.parametrize(
    ("jobs", "field"),
    [
        ('[{"kind": "a", "after": 5}]', "after"),
        ('[{"kind": "a", "after": ["5"]}]', "after"),
        ('[{"kind": "a", "after": [1.5]}]', "after"),
        ('[{"kind": "a", "after": [99999999999999999999]}]', "after"),
        ('[{"kind": "a", "on_parent_failure": 1}]', "on_parent_failure"),
    ],
)
def test_enqueue_many_names_a_bad_after_field(
    db: psycopg.Connection, jobs: str, field: str
) -> None:
    with pytest.raises(psycopg.errors.InvalidParameterValue) as caught:
        db.execute("SELECT * FROM awa.enqueue_many(%s::jsonb)", [jobs]).fetchall()
    assert caught.value.diag.column_name == field
    assert (caught.value.diag.message_primary or "").endswith("(jobs[0])")


AFTER_GRANTS = [
    "GRANT SELECT (id, state, has_dependents), UPDATE (has_dependents) ON awa.jobs TO {role}",
    "GRANT SELECT (id) ON awa.dead_letters TO {role}",
    "GRANT INSERT ON awa.job_dependencies TO {role}",
]


def test_a_producer_role_with_the_documented_grants_enqueues_children(
    db: psycopg.Connection, dsn: str, producer_role: str
) -> None:
    """The grants docs/enqueue-from-anywhere.md adds for `after`, beside the producer's."""
    role = producer_role
    parent = awa.insert(db, {}, kind="parent")
    gone = awa.insert(db, {}, kind="parent")
    db.execute("UPDATE awa.jobs SET state = 'failed' WHERE id = %s", (gone.id,))
    db.execute(
        "WITH moved AS (DELETE FROM awa.jobs WHERE id = %s RETURNING *) "
        "INSERT INTO awa.dead_letters SELECT d.* FROM moved, LATERAL jsonb_populate_record("
        "NULL::awa.dead_letters, to_jsonb(moved) || jsonb_build_object('dead_at', now(), 'dead_reason', 'manual')) d",
        (gone.id,),
    )
    db.commit()
    call = "SELECT awa.enqueue(kind => 'child', after => %s)"
    with psycopg.connect(dsn) as producer:
        producer.execute(f"SET ROLE {role}")
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            producer.execute(call, [[parent.id]])
        producer.rollback()
    for grant in AFTER_GRANTS:
        db.execute(grant.format(role=role))
    db.commit()
    with psycopg.connect(dsn) as producer:
        producer.execute(f"SET ROLE {role}")
        child = scalar(producer, call, [[parent.id]])
        dead_child = scalar(producer, call, [[parent.id, gone.id]])
        many = producer.execute(
            "SELECT * FROM awa.enqueue_many(%s)", [Jsonb([{"kind": "c", "after": [parent.id]}])]
        ).fetchall()
        producer.commit()
    assert job_row(dsn, child).state == "blocked"
    assert job_row(dsn, dead_child).state == "cancelled"
    assert len(many) == 1
    assert scalar(db, "SELECT has_dependents FROM awa.jobs WHERE id = %s", [parent.id])


def test_a_prepared_call_and_a_trigger_survive_the_signature_change(
    db: psycopg.Connection, dsn: str
) -> None:
    """0014 drops and recreates awa.enqueue: a session that prepared a call (or a trigger
    function whose plan cached it) before the migration goes on working after it."""
    from importlib import resources

    db.execute("CREATE TABLE orders (id bigint GENERATED ALWAYS AS IDENTITY, email text)")
    db.execute(
        "CREATE FUNCTION orders_job() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN "
        "PERFORM awa.enqueue(kind => 'receipt', args => jsonb_build_object('id', NEW.id)); "
        "RETURN NULL; END $$"
    )
    db.execute(
        "CREATE TRIGGER orders_job AFTER INSERT ON orders FOR EACH ROW EXECUTE FUNCTION orders_job()"
    )
    db.commit()
    text = (resources.files("awa_cli.sql") / "0014_enqueue_after.sql").read_text("utf-8")
    with psycopg.connect(dsn, autocommit=True) as producer:
        call = "SELECT awa.enqueue(kind => %s)"
        producer.execute(call, ["before"], prepare=True)
        producer.execute("INSERT INTO orders (email) VALUES ('a@b')")
        db.execute(text)  # type: ignore[call-overload]
        db.commit()
        assert isinstance(scalar(producer, call, ["after"]), int)
        producer.execute("INSERT INTO orders (email) VALUES ('c@d')")
    kinds = db.execute("SELECT kind FROM awa.jobs ORDER BY id").fetchall()
    assert kinds == [("before",), ("receipt",), ("after",), ("receipt",)]
