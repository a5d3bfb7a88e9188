"""Batches (architecture §16): callbacks enqueued exactly once, in the transaction that makes
their condition true, only after the seal; open batches extended by a member; counting that a
stale attempt never touches; the one-shot and caller's-transaction forms."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest

import awa_cli as awa
from awa_cli.attempts import AttemptResult
from tests.apps.batch_app import Done, Member, app
from tests.helpers import ROOT, running_worker, wait_until, spawn_worker

pytestmark = [pytest.mark.integration]
async_test = pytest.mark.asyncio


def callback_jobs(dsn: str, batch_id: int) -> list[tuple[str, str, Any]]:
    """(callback, state, output) of every callback job of the batch, by id."""
    with psycopg.connect(dsn) as conn:
        return [
            (r[0], r[1], r[2])
            for r in conn.execute(
                "SELECT metadata ->> 'awa.batch_callback', state::text, output FROM awa.jobs"
                " WHERE metadata ->> 'awa.batch_id' = %s AND batch_id IS NULL ORDER BY id",
                (str(batch_id),),
            ).fetchall()
        ]


def callbacks_named(dsn: str, batch_id: int) -> list[str]:
    return [name for name, _, _ in callback_jobs(dsn, batch_id)]


# A callback job for each of the three batch outcomes.
EVERY_CALLBACK = {
    "on_success": Done("ok"),
    "on_complete": Done("complete"),
    "on_death": Done("death"),
}


def full_batch() -> awa.Batch:
    return awa.Batch(**EVERY_CALLBACK)


async def add_members(batch: Any, count: int) -> None:
    """Insert Member(0) to Member(count - 1) into the open ``batch``, one insert each."""
    for n in range(count):
        await batch.insert(Member(n))


@async_test
async def test_callbacks_fire_once_after_every_member_completed(dsn: str) -> None:
    async with awa.AsyncClient(dsn, app) as client:
        async with client.batch(full_batch()) as b:
            await add_members(b, 20)
        assert b.id is not None
        async with running_worker(app, dsn):
            await wait_until(lambda: len(callback_jobs(dsn, b.id)) == 2)
            await wait_until(lambda: all(s == "completed" for _, s, _ in callback_jobs(dsn, b.id)))
        row = await client.get_batch(b.id)
    assert sorted(callbacks_named(dsn, b.id)) == ["on_complete", "on_success"]
    assert row.state == "completed" and row.succeeded
    assert row.counts.to_dict() == {
        "pending": 0,
        "completed": 20,
        "failed": 0,
        "cancelled": 0,
        "total": 20,
    }
    assert row.died_at is None and row.callback_jobs["on_death"] is None
    outputs = {o["callback"]: o for _, _, o in callback_jobs(dsn, b.id)}
    assert outputs["on_success"]["counts"]["completed"] == 20
    assert outputs["on_success"]["batch"] == b.id


@async_test
async def test_on_death_fires_once_at_the_first_failure(dsn: str) -> None:
    async with awa.AsyncClient(dsn, app) as client:
        batch = await client.insert_batch(
            [Member(n, fail=n % 3 == 0) for n in range(12)],
            **EVERY_CALLBACK,
            max_attempts=1,
        )
        async with running_worker(app, dsn):
            await wait_until(lambda: len(callback_jobs(dsn, batch.id)) == 2)
            await wait_until(
                lambda: all(s == "completed" for _, s, _ in callback_jobs(dsn, batch.id))
            )
            await asyncio.sleep(0.3)  # nothing else arrives
        row = await client.get_batch(batch.id)
    assert sorted(callbacks_named(dsn, batch.id)) == ["on_complete", "on_death"]
    assert row.counts.failed == 4 and row.counts.completed == 8
    assert row.state == "completed" and not row.succeeded
    assert row.first_failed_at is not None and row.died_at is not None


@async_test
async def test_sealing_after_completion_enqueues_the_callbacks(dsn: str) -> None:
    async with awa.AsyncClient(dsn, app) as client:
        async with client.batch(full_batch()) as b:
            await add_members(b, 5)
            async with running_worker(app, dsn):
                await wait_until(_count_is(client, b.id, "pending", 0))
            assert callback_jobs(dsn, b.id) == []  # not sealed yet: nothing fires
            assert (await client.get_batch(b.id)).state == "open"
        # the seal found every member completed and enqueued both in its transaction
        assert sorted(callbacks_named(dsn, b.id)) == ["on_complete", "on_success"]
        row = await client.get_batch(b.id)
        assert row.state == "completed" and row.sealed_at is not None


def _count_is(client: awa.AsyncClient, batch_id: int, count: str, n: int) -> Any:
    """A check for wait_until: the batch's ``counts.<count>`` is ``n``."""

    async def check() -> bool:
        return getattr((await client.get_batch(batch_id)).counts, count) == n

    return check


@async_test
async def test_failure_before_the_seal_fires_on_death_at_the_seal(dsn: str) -> None:
    async with awa.AsyncClient(dsn, app) as client:
        async with client.batch(full_batch()) as b:
            await b.insert(Member(1, fail=True), max_attempts=1)
            await b.insert(Member(2, sleep=30))  # still running at the seal
            async with running_worker(app, dsn, shutdown_timeout=0.5):
                await wait_until(lambda: _failed(dsn, b.id))
                assert callback_jobs(dsn, b.id) == []
                await client.seal_batch(b.id)
                assert callbacks_named(dsn, b.id) == ["on_death"]
                await client.seal_batch(b.id)  # twice: nothing more
        assert callbacks_named(dsn, b.id) == ["on_death"]


def _failed(dsn: str, batch_id: int) -> bool:
    with psycopg.connect(dsn) as conn:
        row = conn.execute(
            "SELECT count(*) FROM awa.jobs WHERE batch_id = %s AND state = 'failed'", (batch_id,)
        ).fetchone()
    return bool(row and row[0])


@async_test
async def test_a_member_extends_its_open_batch(dsn: str) -> None:
    async with awa.AsyncClient(dsn, app) as client:
        async with client.batch(full_batch()) as b:
            await b.insert(Member(7, extend=3))
            async with running_worker(app, dsn):
                await wait_until(_count_is(client, b.id, "total", 4))
                await wait_until(_count_is(client, b.id, "pending", 0))
        async with running_worker(app, dsn):
            await wait_until(lambda: len(callback_jobs(dsn, b.id)) == 2)
        row = await client.get_batch(b.id)
    assert row.counts.completed == 4
    with psycopg.connect(dsn) as conn:
        added = conn.execute(
            "SELECT args ->> 'n' FROM awa.jobs WHERE batch_id = %s ORDER BY id", (b.id,)
        ).fetchall()
    assert [int(r[0]) for r in added] == [7, 7000, 7001, 7002]


@async_test
async def test_a_sealed_batch_takes_no_member(dsn: str) -> None:
    async with awa.AsyncClient(dsn, app) as client:
        async with client.batch(awa.Batch()) as b:
            await b.insert(Member(1))
        with pytest.raises(awa.BatchSealed):
            await b.insert(Member(2))
        with pytest.raises(awa.BatchNotFound):
            async with client.batch() as other:
                with psycopg.connect(dsn) as conn:
                    conn.execute("DELETE FROM awa.batches WHERE id = %s", (other.id,))
                await other.insert(Member(3))
        with pytest.raises(awa.BatchNotFound):
            await client.get_batch(999_999)
        assert (await client.get_batch(b.id)).counts.total == 1


@async_test
async def test_a_stale_attempt_never_counts(dsn: str) -> None:
    async with awa.AsyncClient(dsn, app) as client:
        batch = await client.insert_batch([Member(1)], on_complete=Done("complete"))
        [stale] = await client.core.claim("default", 1)
        # the attempt is rescued and claimed again: the first claim's lease is stale
        with psycopg.connect(dsn) as conn:
            conn.execute(
                "UPDATE awa.jobs SET heartbeat_at = now() - interval '1 hour' WHERE id = %s",
                (stale.id,),
            )
        await client.core.rescue(awa.RescueReason.STALE_HEARTBEAT, staleness=1)
        with psycopg.connect(dsn) as conn:
            conn.execute("UPDATE awa.jobs SET run_at = now() WHERE id = %s", (stale.id,))
        [fresh] = await client.core.claim("default", 1)
        assert fresh.run_lease == stale.run_lease + 1
        done = await client.core.finalize_attempts([AttemptResult(stale, "complete")])
        assert done[0].row is None  # fenced
        row = await client.get_batch(batch.id)
        assert row.counts.pending == 1 and row.counts.completed == 0
        assert callback_jobs(dsn, batch.id) == []
        await client.core.finalize_attempts([AttemptResult(fresh, "complete")])
        row = await client.get_batch(batch.id)
    assert row.counts.completed == 1 and row.state == "completed"
    assert callbacks_named(dsn, batch.id) == ["on_complete"]


@async_test
async def test_retrying_a_failed_member_lets_on_success_fire_later(dsn: str) -> None:
    async with awa.AsyncClient(dsn, app) as client:
        batch = await client.insert_batch(
            [Member(1), Member(2, fail=True)],
            **EVERY_CALLBACK,
            max_attempts=1,
        )
        async with running_worker(app, dsn):
            await wait_until(lambda: len(callback_jobs(dsn, batch.id)) == 2)
            assert sorted(callbacks_named(dsn, batch.id)) == ["on_complete", "on_death"]
            with psycopg.connect(dsn) as conn:
                failed = conn.execute(
                    "SELECT id FROM awa.jobs WHERE batch_id = %s AND state = 'failed'",
                    (batch.id,),
                ).fetchone()
                assert failed is not None
                conn.execute(
                    "UPDATE awa.jobs SET args = jsonb_set(args, '{fail}', 'false') WHERE id = %s",
                    (failed[0],),
                )
            await client.retry(failed[0])
            await wait_until(lambda: "on_success" in callbacks_named(dsn, batch.id))
        row = await client.get_batch(batch.id)
    # on_complete and on_death each fired once; on_success once every member completed
    assert sorted(callbacks_named(dsn, batch.id)) == ["on_complete", "on_death", "on_success"]
    assert row.counts.completed == 2 and row.counts.failed == 0


@async_test
async def test_a_dead_lettered_member_counts_as_failed(dsn: str) -> None:
    async with awa.AsyncClient(dsn, app) as client:
        batch = await client.insert_batch(
            [Member(1, fail=True)],
            on_complete=Done("complete"),
            on_death=Done("death"),
            queue="dlq",
        )
        with psycopg.connect(dsn) as conn:
            conn.execute(
                "INSERT INTO awa.queues (name, dead_letter) VALUES ('dlq', true)"
                " ON CONFLICT (name) DO UPDATE SET dead_letter = true"
            )
        async with running_worker(app, dsn, queues={"dlq": 2}):
            await wait_until(lambda: len(callback_jobs(dsn, batch.id)) == 2)
        row = await client.get_batch(batch.id)
        [dead_id] = _member_ids(dsn, batch.id, dead=True)
        assert _member_ids(dsn, batch.id) == []
        retried = await client.retry_from_dlq(dead_id)
    assert row.counts.failed == 1 and row.state == "completed"
    assert sorted(callbacks_named(dsn, batch.id)) == ["on_complete", "on_death"]
    assert "awa.batch_id" not in retried.metadata  # it came back alone


def _member_ids(dsn: str, batch_id: int, dead: bool = False) -> list[int]:
    table = "awa.dead_letters" if dead else "awa.jobs"
    with psycopg.connect(dsn) as conn:
        return [
            r[0]
            for r in conn.execute(
                f"SELECT id FROM {table} WHERE batch_id = %s ORDER BY id", (batch_id,)
            ).fetchall()
        ]


def test_sync_client_and_the_callers_transaction(dsn: str) -> None:
    with awa.Client(dsn, app) as client:
        with client.batch(awa.Batch(on_complete=Done("complete"))) as b:
            b.insert(Member(1))
            assert b.insert_many([Member(2), Member(3)]) == 2
        assert client.get_batch(b.id).counts.total == 3
        assert client.get_batch(b.id).state == "running"
        with psycopg.connect(dsn) as conn:
            with conn.transaction():
                kept = awa.insert_batch(conn, [Member(1)], on_success=Done("ok"), app=app)
            with pytest.raises(RuntimeError), conn.transaction():
                gone = awa.insert_batch(conn, [Member(1)], on_success=Done("ok"), app=app)
                raise RuntimeError("roll back")
        assert client.get_batch(kept.id).counts.total == 1
        with pytest.raises(awa.BatchNotFound):
            client.get_batch(gone.id)
        assert [r.id for r in client.list_batches()][:2] == [kept.id, b.id]


@async_test
async def test_an_empty_sealed_batch_is_complete(dsn: str) -> None:
    async with awa.AsyncClient(dsn, app) as client:
        batch = await client.insert_batch([], on_success=Done("ok"), on_complete=Done("c"))
    assert batch.state == "completed" and batch.succeeded
    assert sorted(callbacks_named(dsn, batch.id)) == ["on_complete", "on_success"]


@async_test
async def test_bad_callbacks_and_members_name_the_field(dsn: str) -> None:
    async with awa.AsyncClient(dsn, app) as client:
        with pytest.raises(awa.ValidationError, match=r"^on_death\.priority"):
            await client.insert_batch(
                [Member(1)], on_death=awa.EnqueueRequest(Done("x")).priority(9)
            )
        with pytest.raises(awa.ValidationError, match=r"^jobs\[1\]\.priority"):
            await client.insert_batch([Member(1), awa.EnqueueRequest(Member(2)).priority(0)])
        with pytest.raises(awa.ValidationError, match="shards"):
            awa.Batch(shards=0)
        assert await client.list_batches() == []  # nothing written


@pytest.fixture
def two_workers(dsn: str, tmp_path: Path) -> Iterator[list[subprocess.Popen[bytes]]]:
    """Two real `awa worker` processes running tests.apps.batch_app."""
    config = tmp_path / "awa.toml"
    config.write_text(
        '[app]\nmodules = ["tests.apps.batch_app"]\n[queues.default]\nconcurrency = 20\n'
    )
    env = {**os.environ, "AWA_DATABASE_URL": dsn, "PYTHONPATH": str(ROOT)}
    procs = []
    for i in range(2):
        log = (tmp_path / f"worker{i}.log").open("w")
        procs.append(spawn_worker(config, log, env))
    try:
        yield procs
    finally:
        for proc in procs:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGTERM)
        for proc in procs:
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()


@async_test
async def test_two_worker_processes_racing_on_the_last_members_fire_each_callback_once(
    dsn: str, two_workers: list[subprocess.Popen[bytes]]
) -> None:
    # Many small batches whose members all finish at about the same moment on two
    # processes (each finalising in parallel flushes): the last members of a batch are
    # finalised by concurrent transactions, on one counter row (shards=1) or several.
    async with awa.AsyncClient(dsn, app) as client:
        ids = []
        for i in range(30):
            batch = await client.insert_batch(
                [Member(n, fail=(i % 5 == 0 and n == 7)) for n in range(24)],
                **EVERY_CALLBACK,
                shards=1 if i % 2 else 16,
                max_attempts=1,
            )
            ids.append(batch.id)
        await wait_until(lambda: _callbacks_done(dsn, ids), timeout=90, interval=0.2)
        await asyncio.sleep(0.5)  # a late duplicate would have arrived by now
        for i, batch_id in enumerate(ids):
            row = await client.get_batch(batch_id)
            expected = ["on_complete", "on_death"] if i % 5 == 0 else ["on_complete", "on_success"]
            assert sorted(callbacks_named(dsn, batch_id)) == expected, batch_id
            assert row.counts.pending == 0 and row.counts.total == 24
            assert row.counts.failed == (1 if i % 5 == 0 else 0)
    assert all(proc.poll() is None for proc in two_workers)


def _callbacks_done(dsn: str, ids: list[int]) -> bool:
    with psycopg.connect(dsn) as conn:
        row = conn.execute(
            "SELECT count(*) FROM awa.jobs WHERE batch_id IS NULL AND state = 'completed'"
            " AND (metadata ->> 'awa.batch_id')::bigint = ANY (%s)",
            (ids,),
        ).fetchone()
    return bool(row and row[0] >= 2 * len(ids))


@async_test
async def test_a_producer_adds_members_while_workers_finish_them(dsn: str) -> None:
    # Members are added one by one while a worker finishes the earlier ones: adding takes the
    # counter row, then the batch row, the order a finishing member takes them in, so the two
    # never deadlock, and the callbacks fire once, after the seal.
    async with awa.AsyncClient(dsn, app) as client:
        async with running_worker(app, dsn, queues={"default": 20}):
            async with client.batch(awa.Batch(on_complete=Done("c"), shards=1)) as b:
                await add_members(b, 150)
                assert callback_jobs(dsn, b.id) == []
            await wait_until(lambda: callbacks_named(dsn, b.id) == ["on_complete"])
            row = await client.get_batch(b.id)
    assert row.counts.completed == 150 and row.state == "completed"


@async_test
async def test_insert_batch_async_in_the_callers_transaction(dsn: str) -> None:
    async with await psycopg.AsyncConnection.connect(dsn) as conn:
        async with conn.transaction():
            kept = await awa.insert_batch_async(conn, [Member(1)], on_complete=Done("c"), app=app)
        with pytest.raises(RuntimeError):
            async with conn.transaction():
                gone = await awa.insert_batch_async(conn, [Member(2)], app=app)
                raise RuntimeError("roll back")
    async with awa.AsyncClient(dsn, app) as client:
        assert (await client.get_batch(kept.id)).counts.total == 1
        with pytest.raises(awa.BatchNotFound):
            await client.get_batch(gone.id)
