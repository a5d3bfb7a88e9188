"""The dead-letter queue (architecture §10, §15.2) with real workers against PostgreSQL: which
transitions move a job there, in the same transaction, and what the client sees."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any

import psycopg
import pytest

import awa_cli as awa
from awa_cli.maintenance import sweep_once
from awa_cli.worker.queues import QueueSpec
from tests.helpers import add_noop_tasks, running_worker, scalar, wait_until

pytestmark = [pytest.mark.integration]


@dataclass
class Work:
    mode: str = "raise"
    n: int = 0


@dataclass
class Other:
    n: int = 0


@dataclass
class Note:
    text: str


def work_app(events: list[Any] | None = None) -> awa.App:
    app = awa.App()

    @app.task(Work)
    async def work(job: awa.Job) -> awa.JobResult | None:
        match job.args.mode:
            case "raise":
                raise ValueError(f"boom {job.args.n}")
            case "terminal":
                raise awa.TerminalError("bad input")
            case "park":
                token = await job.register_callback(timeout=60)
                return awa.WaitForCallback(token)
        return None

    add_noop_tasks(app, Note)

    if events is not None:

        @app.on_event(Work)
        def record(event: Any) -> None:
            events.append(event)

    return app


def dlq_queues(dead_letter: bool = True) -> dict[str, QueueSpec]:
    return {"default": QueueSpec("default", 10, dead_letter=dead_letter)}


def in_dlq(dsn: str, job_id: int) -> bool:
    return bool(scalar(dsn, "SELECT count(*) FROM awa.dead_letters WHERE id = %s", job_id))


def in_jobs(dsn: str, job_id: int) -> bool:
    return bool(scalar(dsn, "SELECT count(*) FROM awa.jobs WHERE id = %s", job_id))


@pytest.mark.asyncio
async def test_an_exhausted_job_moves_keeping_its_id_and_exhausted_fires(dsn: str) -> None:
    events: list[Any] = []
    app = work_app(events)
    with awa.Client(dsn) as client:
        job = client.insert(Work("raise", 7), max_attempts=1, tags=["t"], metadata={"m": 1})
    async with running_worker(app, dsn, dlq_queues()):
        await wait_until(lambda: in_dlq(dsn, job.id))
        await wait_until(lambda: any(isinstance(e, awa.JobEvent.Exhausted) for e in events))
    assert not in_jobs(dsn, job.id)
    with awa.Client(dsn) as client:
        dead = client.get_dlq_job(job.id)
        with pytest.raises(awa.JobNotFound, match=f"awa dlq show {job.id}"):
            client.get_job(job.id)
        depth = client.dlq_depth()
    assert dead.id == job.id and dead.state == "failed" and dead.kind == job.kind
    assert dead.dead_reason == "exhausted" and dead.dead_at is not None
    assert dead.args == {"mode": "raise", "n": 7} and dead.tags == ["t"]
    assert dead.metadata["m"] == 1 and dead.attempt == 1 and dead.finalized_at is not None
    assert dead.errors[-1]["error"].startswith("ValueError: boom 7")
    exhausted = next(e for e in events if isinstance(e, awa.JobEvent.Exhausted))
    assert exhausted.job.id == job.id and exhausted.job.state == "failed"
    assert depth.to_json() == {"total": 1, "queues": {"default": 1}}


@pytest.mark.asyncio
async def test_reasons_and_a_queue_without_dead_lettering(dsn: str) -> None:
    app = work_app()
    with awa.Client(dsn) as client:
        terminal = client.insert(Work("terminal"))  # first of 25 attempts: terminal_error
        bad_args = client.insert({"unexpected": 1}, kind="work")  # args that do not rebuild
        elsewhere = client.insert(Work("raise"), max_attempts=1, queue="plain")
    queues = {**dlq_queues(), "plain": QueueSpec("plain", 2, dead_letter=False)}
    async with running_worker(app, dsn, queues):
        await wait_until(lambda: in_dlq(dsn, terminal.id) and in_dlq(dsn, bad_args.id))
        await wait_until(
            lambda: (
                scalar(dsn, "SELECT state::text FROM awa.jobs WHERE id = %s", elsewhere.id)
                == "failed"
            )
        )
    with awa.Client(dsn) as client:
        assert client.get_dlq_job(terminal.id).dead_reason == "terminal_error"
        assert client.get_dlq_job(bad_args.id).dead_reason == "terminal_error"
        assert client.get_job(elsewhere.id).state == "failed"  # stays where it was
        with pytest.raises(awa.JobNotFound):
            client.get_dlq_job(elsewhere.id)
    flags = scalar(dsn, "SELECT array_agg(name ORDER BY name) FROM awa.queues WHERE dead_letter")
    assert flags == ["default"]  # the worker announced its flags at start


@pytest.mark.asyncio
async def test_on_exhausted_specs_run_in_the_moving_transaction(dsn: str) -> None:
    app = work_app()
    app.on_exhausted_enqueue(Work, Note, lambda args, job, error, attempt: Note(f"dead {job.id}"))
    with awa.Client(dsn) as client:
        job = client.insert(Work("raise"), max_attempts=1)
    async with running_worker(app, dsn, dlq_queues()):
        await wait_until(lambda: in_dlq(dsn, job.id))
        await wait_until(
            lambda: scalar(dsn, "SELECT count(*) FROM awa.jobs WHERE kind = 'note'") == 1
        )
    assert scalar(dsn, "SELECT args->>'text' FROM awa.jobs WHERE kind = 'note'") == f"dead {job.id}"


@pytest.mark.asyncio
async def test_a_raising_on_exhausted_spec_rolls_the_move_back_too(dsn: str) -> None:
    app = work_app()

    def explode(args: Work, job: awa.JobRow, error: str, attempt: int) -> Note:
        raise RuntimeError("spec down")

    app.on_exhausted_enqueue(Work, Note, explode)

    @app.task(Other)
    async def other_task(job: awa.Job) -> None:
        raise ValueError("x")

    with awa.Client(dsn) as client:
        job = client.insert(Work("raise"), max_attempts=1)
        other = client.insert(Other(), max_attempts=1)
    async with running_worker(app, dsn, dlq_queues()):
        await wait_until(lambda: in_dlq(dsn, other.id))  # a kind without the spec moves
        await asyncio.sleep(0.3)  # the failing job's attempt was rolled back by now
        # the transition, the spec and the move are one transaction: nothing committed
        assert in_jobs(dsn, job.id) and not in_dlq(dsn, job.id)
        assert scalar(dsn, "SELECT state::text FROM awa.jobs WHERE id = %s", job.id) == "running"
    assert scalar(dsn, "SELECT count(*) FROM awa.jobs WHERE kind = 'note'") == 0


@pytest.mark.asyncio
async def test_no_moment_in_neither_table(dsn: str) -> None:
    """A real worker exhausts 300 jobs while a reader counts them in both tables in one
    snapshot, over and over: the sum never drops below (or above) 300."""
    with awa.Client(dsn) as client:
        client.insert_many([Work("raise", i) for i in range(300)], max_attempts=1)
    ids = scalar(dsn, "SELECT array_agg(id) FROM awa.jobs")
    seen: list[int] = []
    stop = asyncio.Event()

    async def reader() -> None:
        async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
            while not stop.is_set():
                cur = await conn.execute(
                    "SELECT (SELECT count(*) FROM awa.jobs WHERE id = ANY(%(ids)s))"
                    " + (SELECT count(*) FROM awa.dead_letters WHERE id = ANY(%(ids)s)),"
                    " (SELECT count(*) FROM awa.dead_letters WHERE id = ANY(%(ids)s))",
                    {"ids": ids},
                )
                total, dead = await cur.fetchone()  # type: ignore[misc]
                seen.append(int(total))
                if dead == 300:
                    return

    async with running_worker(work_app(), dsn, dlq_queues()):
        task = asyncio.create_task(reader())
        try:
            await asyncio.wait_for(task, timeout=60)
        finally:
            stop.set()
    assert len(seen) > 5 and set(seen) == {300}


@pytest.mark.asyncio
async def test_a_callback_fail_dead_letters_and_retry_puts_it_back(dsn: str) -> None:
    app = work_app()
    with awa.Client(dsn) as client:
        job = client.insert(Work("park"))
    async with running_worker(app, dsn, dlq_queues()):
        await wait_until(
            lambda: (
                scalar(dsn, "SELECT callback_id FROM awa.jobs WHERE id = %s", job.id) is not None
            )
        )
        callback_id = scalar(dsn, "SELECT callback_id FROM awa.jobs WHERE id = %s", job.id)
        await wait_until(
            lambda: (
                scalar(dsn, "SELECT state::text FROM awa.jobs WHERE id = %s", job.id)
                == "waiting_external"
            )
        )
        await wait_until(lambda: scalar(dsn, "SELECT dead_letter FROM awa.queues") is True)
        async with awa.AsyncClient(dsn) as client:  # no config: the announced flag decides
            failed = await client.fail_external(callback_id, "rejected upstream")
            assert failed.state == "failed"
            dead = await client.get_dlq_job(job.id)
            assert dead.dead_reason == "callback_failed"
            back = await client.retry_from_dlq(job.id, priority=1)
    assert back.id == job.id and back.attempt == 0 and back.priority == 1
    assert back.state == "available" and back.callback_id is None
    assert back.errors[-1]["error"] == "retried from the dead-letter queue"
    assert any(e["error"] == "rejected upstream" for e in back.errors)
    assert not in_dlq(dsn, job.id)


def stale_last_attempt(dsn: str) -> awa.JobRow:
    """A job of the dead-lettering 'default' queue running its last attempt, its heartbeat an
    hour old: the next rescue sweep takes it."""
    with awa.Client(dsn) as client:
        job = client.insert(Work("raise"), max_attempts=1)
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("INSERT INTO awa.queues (name, dead_letter) VALUES ('default', true)")
        conn.execute(
            "UPDATE awa.jobs SET state = 'running', attempt = 1, run_lease = 1,"
            " heartbeat_at = now() - interval '1 hour'"
        )
    return job


@pytest.mark.asyncio
async def test_a_rescue_on_the_last_attempt_dead_letters(dsn: str) -> None:
    from tests.integration.test_maintenance import core_for

    job = stale_last_attempt(dsn)
    pool, core = await core_for(dsn)
    try:
        report = await sweep_once(
            core, heartbeat_staleness=15, completed_retention=3600, failed_retention=3600
        )
    finally:
        await pool.close()
    assert [r.id for r in report.rescued["stale_heartbeat"]] == [job.id]
    assert in_dlq(dsn, job.id) and not in_jobs(dsn, job.id)
    assert scalar(dsn, "SELECT dead_reason FROM awa.dead_letters WHERE id = %s", job.id) == (
        "rescued"
    )


@pytest.mark.asyncio
async def test_the_leader_prunes_dead_letters_past_retention(dsn: str) -> None:
    from tests.integration.test_maintenance import core_for

    with awa.Client(dsn) as client:
        client.insert_many([Work("raise", i) for i in range(30)], max_attempts=1)
        client.move_failed_to_dlq(all=True)  # nothing failed yet: 0
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("UPDATE awa.jobs SET state = 'failed', finalized_at = now()")
    with awa.Client(dsn) as client:
        assert client.move_failed_to_dlq(all=True, reason="outage") == 30
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(
            "UPDATE awa.dead_letters SET dead_at = now() - interval '40 days' WHERE id IN"
            " (SELECT id FROM awa.dead_letters ORDER BY id LIMIT 25)"
        )
    pool, core = await core_for(dsn)
    try:
        report = await sweep_once(
            core,
            heartbeat_staleness=15,
            completed_retention=3600,
            failed_retention=3600,
            dead_letter_retention=30 * 86400,
        )
    finally:
        await pool.close()
    assert report.dead_letters_pruned == 25
    assert scalar(dsn, "SELECT count(*) FROM awa.dead_letters") == 5
    reasons = scalar(dsn, "SELECT array_agg(DISTINCT dead_reason) FROM awa.dead_letters")
    assert reasons == ["manual"]
    last = scalar(dsn, "SELECT errors->-1->>'error' FROM awa.dead_letters LIMIT 1")
    assert last == "moved to the dead-letter queue: outage"


@pytest.mark.asyncio
async def test_a_rescued_job_with_on_rescued_specs_moves_with_its_follow_ups(dsn: str) -> None:
    """The rescue commits first (the job stays in awa.jobs, its follow-ups pending); the
    follow-up transaction inserts them and moves the job: a raising spec leaves it in place."""
    from tests.integration.test_maintenance import core_for

    app = work_app()
    fail = True

    @app.on_rescued_enqueue(Work, Note)
    def alert(args: Work, job: awa.JobRow, reason: awa.RescueReason) -> Note:
        if fail:
            raise RuntimeError("alerting is down")
        return Note(f"rescued {job.id}")

    job = stale_last_attempt(dsn)
    pool, core = await core_for(dsn, app)
    sweep = {"heartbeat_staleness": 15, "completed_retention": 3600, "failed_retention": 3600}
    try:
        first = await sweep_once(core, **sweep)  # type: ignore[arg-type]
        assert first.follow_ups_failed == 1
        assert in_jobs(dsn, job.id) and not in_dlq(dsn, job.id)  # rolled back with the spec
        fail = False
        second = await sweep_once(core, **sweep)  # type: ignore[arg-type]
    finally:
        await pool.close()
    assert second.follow_ups_done == 1
    assert in_dlq(dsn, job.id) and not in_jobs(dsn, job.id)
    assert scalar(dsn, "SELECT dead_reason FROM awa.dead_letters WHERE id = %s", job.id) == (
        "rescued"
    )
    assert scalar(dsn, "SELECT args->>'text' FROM awa.jobs WHERE kind = 'note'") == (
        f"rescued {job.id}"
    )
    assert scalar(dsn, "SELECT rescue_pending FROM awa.dead_letters WHERE id = %s", job.id) is None
