"""Producers against a real PostgreSQL: Client, AsyncClient, awa.insert / insert_async."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone, UTC
from types import SimpleNamespace
from typing import Any

import psycopg
import pytest

import awa_cli
import awa_cli.enqueue
from awa_cli import AsyncClient, Client, JobState, UniqueConflict, ValidationError
from awa_cli.db.params import insert_params
from awa_cli.db.statements import SQL
from awa_cli.jobs import InsertOpts, prepare
from awa_cli.outcomes import InvalidJobState
from awa_cli.results import JobNotFound
from tests.helpers import run_in_threads

pytestmark = pytest.mark.integration


@dataclass
class SendEmail:
    to: str
    subject: str = "hello"


@pytest.fixture
def client(dsn: str) -> Iterator[Client]:
    with Client(dsn) as c:
        yield c


def _count(db: psycopg.Connection, where: str = "true", params: Any = None) -> int:
    row = db.execute(f"SELECT count(*) FROM awa.jobs WHERE {where}", params).fetchone()
    db.commit()
    assert row is not None
    return int(row[0])


# -- insert ----------------------------------------------------------------------------------


INSERT_SHAPES: dict[str, dict[str, Any]] = {
    "defaults": {},
    "every option": {
        "kind": "mail",
        "queue": "mails",
        "priority": 1,
        "max_attempts": 3,
        "deadline_duration": 12.5,
        "metadata": {"tenant": "acme", "nested": {"b": [1, 2.5, None], "a": "ü"}},
        "tags": ["x", "y"],
        "unique_opts": {"by_args": True, "states": ["available", "running"]},
        "ordering_key": "order-7",
        "concurrency_key": "k",
    },
    "scheduled": {"run_at": datetime.now(UTC) + timedelta(hours=1)},
    "run_at in the past": {"run_at": datetime(2020, 1, 1, tzinfo=UTC)},
}


@pytest.mark.parametrize("shape", sorted(INSERT_SHAPES))
def test_the_row_insert_returns_is_the_row_stored(
    shape: str, client: Client, db: psycopg.Connection
) -> None:
    """insert builds its JobRow from what it sent and the four values the server chose
    (JobRow.inserted): field for field, it is the row a read of the job returns."""
    options = INSERT_SHAPES[shape]
    args = SendEmail("a@example.com", subject='héllo {"quoted"}')
    returned = client.insert(args, **options)
    with psycopg.connect(db.info.dsn) as conn:
        sent = awa_cli.insert(conn, args, **{**options, "unique_opts": None})
    assert returned == client.get_job(returned.id)
    assert sent == client.get_job(sent.id)
    assert returned.to_json() == client.get_job(returned.id).to_json()


def test_insert_returns_a_row_with_defaults(client: Client, db: psycopg.Connection) -> None:
    row = client.insert(SendEmail("a@example.com"))
    assert isinstance(row, awa_cli.JobRow)
    assert row.kind == "send_email"
    assert row.queue == "default"
    assert row.priority == 2
    assert row.max_attempts == 25
    assert row.state is JobState.AVAILABLE
    assert row.attempt == 0 and row.run_lease == 0
    assert row.args == {"to": "a@example.com", "subject": "hello"}
    assert row.unique_key is None and row.tags == [] and row.metadata == {}
    assert row.run_at <= datetime.now(UTC)
    stored = db.execute(
        "SELECT kind, state::text, args FROM awa.jobs WHERE id = %s", (row.id,)
    ).fetchone()
    assert stored == ("send_email", "available", {"to": "a@example.com", "subject": "hello"})


def test_insert_in_the_future_is_scheduled_and_past_is_available(client: Client) -> None:
    future = client.insert({"n": 1}, kind="later", run_at=datetime.now(UTC) + timedelta(minutes=5))
    assert future.state is JobState.SCHEDULED
    past = client.insert({"n": 2}, kind="later", run_at=datetime.now(UTC) - timedelta(minutes=5))
    assert past.state is JobState.AVAILABLE


def test_insert_stores_every_option(client: Client, db: psycopg.Connection) -> None:
    run_at = datetime(2999, 1, 2, 3, 4, 5, tzinfo=UTC)
    row = client.insert(
        {"b": 2, "a": 1},
        kind="custom_kind",
        queue="email",
        priority=4,
        max_attempts=3,
        run_at=run_at,
        deadline_duration=timedelta(seconds=90),
        metadata={"tenant": "t1"},
        tags=["x", "y"],
        unique_opts={"by_queue": True, "states": ["scheduled", "available"]},
        ordering_key="acct-9",
    )
    stored = db.execute(
        "SELECT kind, queue, args, state::text, priority, max_attempts, run_at, deadline_duration,"
        " metadata, tags, unique_key IS NOT NULL, unique_states::text[], ordering_key"
        " FROM awa.jobs WHERE id = %s",
        (row.id,),
    ).fetchone()
    assert stored == (
        "custom_kind",
        "email",
        {"a": 1, "b": 2},
        "scheduled",
        4,
        3,
        run_at,
        90.0,
        {"tenant": "t1"},
        ["x", "y"],
        True,
        ["available", "scheduled"],
        "acct-9",
    )
    assert row.unique_states == [JobState.AVAILABLE, JobState.SCHEDULED]


@pytest.mark.parametrize(
    ("options", "field"),
    [
        ({"priority": 9}, "priority"),
        ({"max_attempts": 0}, "max_attempts"),
        ({"queue": "q" * 201}, "queue"),
        ({"tags": ["t"] * 21}, "tags"),
        ({"metadata": {"a": "\x00"}}, "metadata"),
        ({"run_at": datetime(9999, 12, 31, 23, tzinfo=timezone(timedelta(hours=-5)))}, "run_at"),
        ({"unique_opts": {"states": []}}, "unique_opts.states"),
        ({"bogus": 1}, "bogus"),
    ],
)
def test_bad_input_raises_and_writes_nothing(
    client: Client, db: psycopg.Connection, options: dict[str, Any], field: str
) -> None:
    with pytest.raises(ValidationError) as info:
        client.insert({"a": 1}, kind="k", **options)
    assert info.value.field == field
    with pytest.raises(ValidationError):
        client.insert_many([{"a": 1}, {"a": 2}], kind="k", **options)
    with pytest.raises(ValidationError):
        awa_cli.insert(db, {"a": 1}, kind="k", **options)
    db.rollback()
    assert _count(db) == 0


def test_one_bad_row_in_insert_many_writes_nothing(client: Client, db: psycopg.Connection) -> None:
    with pytest.raises(ValidationError):
        client.insert_many([{"a": 1}, {"a": "\x00"}, {"a": 3}], kind="k")
    assert _count(db) == 0


def test_a_bad_row_after_rows_already_streamed_writes_nothing(
    client: Client, db: psycopg.Connection
) -> None:
    from awa_cli.client import COPY_CHUNK

    def rows() -> Iterator[dict[str, object]]:  # a generator: validated while the COPY streams
        for n in range(COPY_CHUNK * 3):
            yield {"a": "\x00" if n == COPY_CHUNK * 2 + 5 else n}

    with pytest.raises(ValidationError):
        client.insert_many(rows(), kind="k")
    assert _count(db) == 0
    assert (
        client.insert_many(({"a": n} for n in range(COPY_CHUNK * 2 + 1)), kind="k")
        == COPY_CHUNK * 2 + 1
    )
    assert _count(db) == COPY_CHUNK * 2 + 1


# -- uniqueness --------------------------------------------------------------------------------


def test_duplicate_unique_insert_raises_unique_conflict(
    client: Client, db: psycopg.Connection
) -> None:
    first = client.insert({"to": "x"}, kind="welcome", unique_opts={})
    with pytest.raises(UniqueConflict) as info:
        client.insert({"to": "x"}, kind="welcome", unique_opts={})
    assert info.value.existing_id == first.id
    assert str(first.id) in str(info.value)
    assert isinstance(info.value, awa_cli.AwaError)
    # different args, or no unique_opts, are not duplicates
    client.insert({"to": "y"}, kind="welcome", unique_opts={})
    client.insert({"to": "x"}, kind="welcome")
    assert _count(db) == 3


def test_key_is_not_held_outside_its_states(client: Client, db: psycopg.Connection) -> None:
    opts = {"states": {JobState.AVAILABLE}}
    first = client.insert({"n": 1}, kind="k", unique_opts=opts)
    with pytest.raises(UniqueConflict):
        client.insert({"n": 1}, kind="k", unique_opts=opts)
    db.execute("UPDATE awa.jobs SET state = 'completed' WHERE id = %s", (first.id,))
    db.commit()
    second = client.insert({"n": 1}, kind="k", unique_opts=opts)
    assert second.id != first.id
    # with the default states a completed job still holds the key
    done = client.insert({"n": 2}, kind="k", unique_opts={})
    db.execute("UPDATE awa.jobs SET state = 'completed' WHERE id = %s", (done.id,))
    db.commit()
    with pytest.raises(UniqueConflict) as info:
        client.insert({"n": 2}, kind="k", unique_opts={})
    assert info.value.existing_id == done.id
    # ... and a failed one does not
    db.execute("UPDATE awa.jobs SET state = 'failed' WHERE id = %s", (done.id,))
    db.commit()
    client.insert({"n": 2}, kind="k", unique_opts={})


def test_by_period_buckets_through_the_client(
    client: Client, db: psycopg.Connection, monkeypatch: pytest.MonkeyPatch
) -> None:
    clock = {"now": 3600.0 * 500_000 + 10}  # 10 s into an hour bucket
    monkeypatch.setattr(awa_cli.enqueue, "time", SimpleNamespace(time=lambda: clock["now"]))
    hourly = {"by_period": timedelta(hours=1)}
    first = client.insert({"r": 1}, kind="report", unique_opts=hourly)
    clock["now"] += 3000  # same hour
    with pytest.raises(UniqueConflict) as info:
        client.insert({"r": 1}, kind="report", unique_opts=hourly)
    assert info.value.existing_id == first.id
    clock["now"] += 600  # next hour
    second = client.insert({"r": 1}, kind="report", unique_opts=hourly)
    assert second.unique_key != first.unique_key
    assert _count(db, "kind = 'report'") == 2


def test_by_period_buckets_with_prepare_and_raw_insert(db: psycopg.Connection) -> None:
    start = 60.0 * 10_000_000
    ids = []
    for now in (start, start + 59, start + 60, start + 119.5, start + 120):
        prepared = prepare(
            {"a": 1}, InsertOpts(kind="tick", unique_opts={"by_period": 60}), now=now
        )
        row = db.execute(SQL["insert_one"], insert_params(prepared)).fetchone()
        ids.append(None if row is None else row[0])
    db.commit()
    inserted = [i is not None for i in ids]
    assert inserted == [True, False, True, False, True]
    assert _count(db, "kind = 'tick'") == 3


def test_concurrent_duplicate_inserts_one_blocked_on_the_other(
    dsn: str, db: psycopg.Connection
) -> None:
    """A second transaction inserting the same key waits for the first; after its commit the
    second sees the conflict. Deterministic interleaving, checked in pg_stat_activity."""
    with psycopg.connect(dsn) as a, psycopg.connect(dsn) as b:
        first = awa_cli.insert(a, {"k": 1}, kind="race", unique_opts={})
        b_pid = b.info.backend_pid
        outcome: dict[str, Any] = {}

        def second() -> None:
            try:
                outcome["row"] = awa_cli.insert(b, {"k": 1}, kind="race", unique_opts={})
            except BaseException as exc:
                outcome["error"] = exc
            b.commit()

        thread = threading.Thread(target=second)
        thread.start()
        deadline = time.monotonic() + 10
        while True:
            waiting = db.execute(
                "SELECT wait_event_type FROM pg_stat_activity WHERE pid = %s", (b_pid,)
            ).fetchone()
            db.commit()
            if waiting and waiting[0] == "Lock":
                break
            assert time.monotonic() < deadline, "second insert never blocked on the first"
            time.sleep(0.01)
        a.commit()
        thread.join(10)
        assert not thread.is_alive()
    assert isinstance(outcome.get("error"), UniqueConflict), outcome
    assert outcome["error"].existing_id == first.id
    assert _count(db, "kind = 'race'") == 1


def test_concurrent_duplicate_inserts_with_a_barrier(dsn: str, db: psycopg.Connection) -> None:
    workers = 8
    barrier = threading.Barrier(workers)
    results: list[Any] = []
    lock = threading.Lock()

    def worker() -> None:
        with psycopg.connect(dsn) as conn:
            conn.execute("SELECT 1")  # the transaction is open before the race starts
            barrier.wait(timeout=10)
            try:
                row: Any = awa_cli.insert(conn, {"k": 2}, kind="race", unique_opts={})
            except UniqueConflict as exc:
                row = exc
            conn.commit()
        with lock:
            results.append(row)

    run_in_threads([worker] * workers, timeout=20)
    assert len(results) == workers
    rows = [r for r in results if isinstance(r, awa_cli.JobRow)]
    conflicts = [r for r in results if isinstance(r, UniqueConflict)]
    assert len(rows) == 1 and len(conflicts) == workers - 1
    assert _count(db, "kind = 'race'") == 1


# -- transactional insert -------------------------------------------------------------------


def test_insert_in_the_callers_transaction(dsn: str, db: psycopg.Connection) -> None:
    with psycopg.connect(dsn) as conn:
        committed = awa_cli.insert(conn, {"n": 1}, kind="tx")
        assert _count(db, "id = %s", (committed.id,)) == 0  # not visible before commit
        conn.commit()
        assert _count(db, "id = %s", (committed.id,)) == 1
        rolled_back = awa_cli.insert(conn, {"n": 2}, kind="tx")
        conn.rollback()
        assert _count(db, "id = %s", (rolled_back.id,)) == 0
    assert _count(db) == 1


def test_unique_conflict_does_not_abort_the_callers_transaction(
    dsn: str, db: psycopg.Connection
) -> None:
    with psycopg.connect(dsn) as conn:
        conn.execute("CREATE TEMP TABLE app_orders (id int)")
        conn.execute("INSERT INTO app_orders VALUES (1)")
        first = awa_cli.insert(conn, {"order": 1}, kind="ship", unique_opts={})
        with pytest.raises(UniqueConflict) as info:
            awa_cli.insert(conn, {"order": 1}, kind="ship", unique_opts={})
        assert info.value.existing_id is None or info.value.existing_id == first.id
        assert conn.info.transaction_status == psycopg.pq.TransactionStatus.INTRANS
        conn.execute("INSERT INTO app_orders VALUES (2)")
        later = awa_cli.insert(conn, {"order": 2}, kind="ship", unique_opts={})
        assert conn.execute("SELECT count(*) FROM app_orders").fetchone() == (2,)
        conn.commit()
    assert _count(db, "kind = 'ship'") == 2
    assert _count(db, "id = ANY(%s)", ([first.id, later.id],)) == 2


def test_insert_async_in_the_callers_transaction(dsn: str, db: psycopg.Connection) -> None:
    async def main() -> tuple[int, int]:
        async with await psycopg.AsyncConnection.connect(dsn) as conn:
            kept = await awa_cli.insert_async(conn, SendEmail("a@b"), queue="email")
            assert kept.kind == "send_email" and kept.queue == "email"
            await conn.commit()
            dropped = await awa_cli.insert_async(conn, SendEmail("c@d"))
            await conn.rollback()
            await awa_cli.insert_async(conn, {"u": 1}, kind="u", unique_opts={})
            with pytest.raises(UniqueConflict):
                await awa_cli.insert_async(conn, {"u": 1}, kind="u", unique_opts={})
            cur = await conn.execute("SELECT 41 + 1")  # the transaction still works
            assert await cur.fetchone() == (42,)
            await conn.commit()
            with pytest.raises(ValidationError):
                await awa_cli.insert_async(conn, {"u": 1}, kind="u", priority=0)
            return kept.id, dropped.id

    kept_id, dropped_id = asyncio.run(main())
    assert _count(db, "id = %s", (kept_id,)) == 1
    assert _count(db, "id = %s", (dropped_id,)) == 0
    assert _count(db) == 2


@dataclass
class ChargeCard:
    cents: int


def _routing_app() -> awa_cli.App:
    app = awa_cli.App()
    app.task(SendEmail, queue="email")(lambda job: None)
    app.task(ChargeCard, queue="billing", kind="charge")(lambda job: None)
    return app


def test_insert_with_app_uses_the_registered_queue_and_kind(
    dsn: str, db: psycopg.Connection
) -> None:
    app = _routing_app()
    with psycopg.connect(dsn) as conn:
        email = awa_cli.insert(conn, SendEmail("a@b"), app=app)
        charge = awa_cli.insert(conn, ChargeCard(5), app=app)
        explicit = awa_cli.insert(conn, SendEmail("c@d"), app=app, queue="bulk")
        bare = awa_cli.insert(conn, SendEmail("e@f"))  # no app: the derived kind, "default"
        assert (email.kind, email.queue) == ("send_email", "email")
        assert (charge.kind, charge.queue) == ("charge", "billing")
        assert explicit.queue == "bulk"
        assert (bare.kind, bare.queue) == ("send_email", "default")
        assert _count(db, "id = %s", (email.id,)) == 0  # still inside the caller's transaction
        conn.commit()
        dropped = awa_cli.insert(conn, ChargeCard(6), app=app)
        conn.rollback()
    committed = [email.id, charge.id, explicit.id, bare.id]
    assert _count(db, "id = ANY(%s)", (committed,)) == 4
    assert _count(db, "id = %s", (dropped.id,)) == 0
    assert _count(db, "id = %s AND queue = 'email'", (email.id,)) == 1


def test_insert_async_with_app_uses_the_registered_queue(dsn: str, db: psycopg.Connection) -> None:
    app = _routing_app()

    async def main() -> tuple[int, int]:
        async with await psycopg.AsyncConnection.connect(dsn) as conn:
            kept = await awa_cli.insert_async(conn, SendEmail("a@b"), app=app)
            assert (kept.kind, kept.queue) == ("send_email", "email")
            await conn.commit()
            dropped = await awa_cli.insert_async(conn, ChargeCard(1), app=app)
            assert (dropped.kind, dropped.queue) == ("charge", "billing")
            await conn.rollback()
            return kept.id, dropped.id

    kept_id, dropped_id = asyncio.run(main())
    assert _count(db, "id = %s AND queue = 'email'", (kept_id,)) == 1
    assert _count(db, "id = %s", (dropped_id,)) == 0


# -- insert_many ------------------------------------------------------------------------------


def _count_insert_statements(db: psycopg.Connection) -> None:
    """A test-only statement-level trigger: one row per INSERT statement on awa.jobs."""
    db.execute(
        "CREATE TABLE public.insert_statements (xid xid8 DEFAULT pg_current_xact_id(), rows int)"
    )
    db.execute(
        """
        CREATE FUNCTION public.count_insert_statement() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN
            INSERT INTO public.insert_statements (rows) SELECT count(*) FROM inserted;
            RETURN NULL;
        END $$
        """
    )
    db.execute(
        "CREATE TRIGGER count_insert_statement AFTER INSERT ON awa.jobs REFERENCING NEW TABLE AS inserted"
        " FOR EACH STATEMENT EXECUTE FUNCTION public.count_insert_statement()"
    )
    db.commit()


def test_insert_many_ten_thousand_rows_in_one_statement(
    client: Client, db: psycopg.Connection
) -> None:
    _count_insert_statements(db)
    inserted = client.insert_many(
        [SendEmail(f"user{i}@example.com") for i in range(10_000)],
        queue="bulk",
        priority=3,
        tags=["b"],
    )
    assert inserted == 10_000
    assert (
        _count(db, "queue = 'bulk' AND kind = 'send_email' AND priority = 3 AND tags = '{b}'")
        == 10_000
    )
    statements = db.execute("SELECT rows FROM public.insert_statements").fetchall()
    db.commit()
    assert statements == [(10_000,)], "insert_many must be a single INSERT statement"
    xmins = db.execute("SELECT count(DISTINCT xmin::text) FROM awa.jobs").fetchone()
    assert xmins == (1,)
    assert _count(db, "args->>'to' = 'user9999@example.com'") == 1


def test_insert_many_skips_duplicates_and_returns_the_number_inserted(
    client: Client, db: psycopg.Connection
) -> None:
    client.insert({"n": 1}, kind="dedup", unique_opts={})
    batch = [
        {"n": 1},
        {"n": 2},
        {"n": 3},
        {"n": 2},
    ]  # one already held, one duplicate inside the batch
    assert client.insert_many(batch, kind="dedup", unique_opts={}) == 2
    assert _count(db, "kind = 'dedup'") == 3
    assert client.insert_many(batch, kind="dedup", unique_opts={}) == 0
    assert client.insert_many([], kind="dedup") == 0
    # without uniqueness every row goes in
    assert client.insert_many(batch, kind="plain") == 4


def test_insert_many_scheduled_rows(client: Client, db: psycopg.Connection) -> None:
    later = datetime.now(UTC) + timedelta(hours=1)
    assert client.insert_many([{"i": i} for i in range(5)], kind="s", run_at=later) == 5
    assert _count(db, "state = 'scheduled' AND run_at = %s", (later,)) == 5


# -- inspect and admin -------------------------------------------------------------------------


def test_get_job(client: Client) -> None:
    row = client.insert({"a": 1}, kind="k")
    assert client.get_job(row.id) == row
    with pytest.raises(JobNotFound):
        client.get_job(999_999_999)
    assert issubclass(JobNotFound, awa_cli.AwaError)


def test_list_jobs_filters(client: Client, db: psycopg.Connection) -> None:
    a = client.insert({"i": 1}, kind="alpha", queue="q1")
    b = client.insert({"i": 2}, kind="beta", queue="q1")
    c = client.insert({"i": 3}, kind="alpha", queue="q2")
    d = client.insert(
        {"i": 4}, kind="alpha", queue="q1", run_at=datetime.now(UTC) + timedelta(hours=1)
    )
    assert [r.id for r in client.list_jobs()] == [d.id, c.id, b.id, a.id]  # newest first
    assert [r.id for r in client.list_jobs(kind="alpha")] == [d.id, c.id, a.id]
    assert [r.id for r in client.list_jobs(queue="q1")] == [d.id, b.id, a.id]
    assert [r.id for r in client.list_jobs(state="scheduled")] == [d.id]
    assert [r.id for r in client.list_jobs(state=JobState.AVAILABLE, kind="alpha", queue="q1")] == [
        a.id
    ]
    assert [r.id for r in client.list_jobs(limit=2)] == [d.id, c.id]
    assert client.list_jobs(kind="nope") == []
    with pytest.raises(ValidationError):
        client.list_jobs(state="bogus")
    with pytest.raises(ValidationError):
        client.list_jobs(limit=0)


def test_cancel(client: Client, db: psycopg.Connection) -> None:
    row = client.insert({"a": 1}, kind="k")
    cancelled = client.cancel(row.id)
    assert cancelled.state is JobState.CANCELLED and cancelled.finalized_at is not None
    assert client.get_job(row.id).state is JobState.CANCELLED
    done = client.insert({"a": 2}, kind="k")
    db.execute(
        "UPDATE awa.jobs SET state = 'completed', finalized_at = now() WHERE id = %s", (done.id,)
    )
    db.commit()
    with pytest.raises(InvalidJobState):
        client.cancel(done.id)
    assert client.get_job(done.id).state is JobState.COMPLETED
    with pytest.raises(JobNotFound):
        client.cancel(999_999_999)


def test_retry(client: Client, db: psycopg.Connection) -> None:
    row = client.insert({"a": 1}, kind="k")
    db.execute(
        "UPDATE awa.jobs SET state = 'failed', attempt = 25, finalized_at = now(),"
        " run_at = now() + interval '1 day' WHERE id = %s",
        (row.id,),
    )
    db.commit()
    retried = client.retry(row.id)
    assert retried.state is JobState.AVAILABLE
    assert retried.attempt == 0 and retried.finalized_at is None
    assert retried.run_at <= datetime.now(UTC)
    with pytest.raises(InvalidJobState):
        client.retry(row.id)  # available: nothing to retry
    with pytest.raises(JobNotFound):
        client.retry(999_999_999)


def test_migrate_on_a_migrated_database_is_a_no_op(client: Client) -> None:
    assert client.migrate() == []


# -- AsyncClient ------------------------------------------------------------------------------


@pytest.mark.asyncio
async def test_async_client(dsn: str, db: psycopg.Connection) -> None:
    async with AsyncClient(dsn) as client:
        row = await client.insert(SendEmail("a@b"))
        assert (row.queue, row.priority, row.max_attempts, row.state, row.attempt) == (
            "default",
            2,
            25,
            JobState.AVAILABLE,
            0,
        )
        later = await client.insert(
            SendEmail("x@y"), run_at=datetime.now(UTC) + timedelta(minutes=1)
        )
        assert later.state is JobState.SCHEDULED
        with pytest.raises(ValidationError):
            await client.insert(SendEmail("a@b"), priority=5)
        await client.insert({"u": 1}, kind="u", unique_opts={})
        with pytest.raises(UniqueConflict):
            await client.insert({"u": 1}, kind="u", unique_opts={})
        assert await client.insert_many([{"i": i} for i in range(100)], kind="many") == 100
        assert (await client.get_job(row.id)).id == row.id
        with pytest.raises(JobNotFound):
            await client.get_job(123_456_789)
        assert [r.id for r in await client.list_jobs(state="scheduled")] == [later.id]
        assert (await client.cancel(later.id)).state is JobState.CANCELLED
        assert (await client.retry(later.id)).state is JobState.AVAILABLE
    assert _count(db) == 103


# -- NOTIFY ---------------------------------------------------------------------------------


def test_insert_notifies_the_queue_channel_but_not_for_scheduled_jobs(
    client: Client, dsn: str
) -> None:
    with psycopg.connect(dsn, autocommit=True) as listener:
        listener.execute("LISTEN awa_default")
        listener.execute("LISTEN awa_marker")

        client.insert({"n": 1}, kind="k", run_at=datetime.now(UTC) + timedelta(hours=1))
        client.insert({"n": 2}, kind="k", queue="marker")  # commits after the scheduled insert
        got = [n.channel for n in listener.notifies(timeout=5, stop_after=1)]
        assert got == ["awa_marker"], "a scheduled job must not notify its queue"

        client.insert({"n": 3}, kind="k")
        got = [n.channel for n in listener.notifies(timeout=5, stop_after=1)]
        assert got == ["awa_default"]

        client.insert_many([{"i": i} for i in range(3)], kind="k")
        got = [n.channel for n in listener.notifies(timeout=5, stop_after=1)]
        assert got == ["awa_default"]


@pytest.mark.integration
def test_insert_many_copy_path_round_trips_awkward_values(dsn: str) -> None:
    """The bulk path writes COPY text itself: escapes must round-trip every value exactly."""
    from datetime import datetime, timedelta

    import awa_cli as awa

    awkward = [
        "back\\slash",
        "tab\there",
        "new\nline",
        "cr\rhere",
        'quote"s',
        "{braces}",
        "comma,s",
        "\\N",
        "NULL",
        "é ∑ 😀",
        "\\\\t literal",
    ]
    args = [{"s": text, "nested": {"list": [text, 1.5, None, True]}} for text in awkward]
    run_at = datetime.now(UTC) + timedelta(hours=1)
    with awa.Client(dsn) as client:
        count = client.insert_many(
            args,
            kind="k\tind",
            queue="q\\ueue",
            tags=awkward[:10],
            metadata={"m": awkward},
            ordering_key="o\nk",
            run_at=run_at,
            priority=3,
            max_attempts=7,
            deadline_duration=2.5,
        )
        rows = sorted(client.list_jobs(kind="k\tind", limit=100), key=lambda r: r.id)
    assert count == len(awkward) == len(rows)
    for row, expected in zip(rows, args, strict=True):
        assert row.args == expected
        assert (row.kind, row.queue, row.ordering_key) == ("k\tind", "q\\ueue", "o\nk")
        assert row.tags == awkward[:10] and row.metadata == {"m": awkward}
        assert (row.priority, row.max_attempts, row.deadline_duration) == (3, 7, 2.5)
        assert row.state == "scheduled" and abs((row.run_at - run_at).total_seconds()) < 0.001


def test_the_sync_client_opens_its_pool_on_demand(dsn: str) -> None:
    """``Client.ensure_open()`` opens the pool now (the twin of ``AsyncClient.ensure_open``);
    an unreachable database fails there, not on the first insert."""
    with Client(dsn) as client:
        pool = client.ensure_open()
        assert client.call(_one(pool)) == 1
    unreachable = Client("postgresql://nobody@127.0.0.1:1/none")
    try:
        with pytest.raises(psycopg.OperationalError):
            unreachable.ensure_open()
    finally:
        unreachable.close()


async def _one(pool: Any) -> int:
    async with pool.connection() as conn:
        row = await (await conn.execute("SELECT 1")).fetchone()
        return int(row[0])
