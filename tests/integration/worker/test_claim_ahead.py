"""Claim-ahead (issue 23) with the real worker runtime against real PostgreSQL: while a queue's
attempts are short it claims beyond its free slots, in claim order; slow attempts, or
``claim_ahead = false``, keep it to the free slots; a job waiting ahead is dropped by an
operator cancel or a rescue before its handler starts; its deadline counts from its claim;
and a stopping worker runs the jobs it claimed ahead before it exits.

The scenes are built with gates (an asyncio.Event a handler waits on) so that a job is known
to wait ahead: every slot is held by a gated job while the claim for the slots beyond them
has taken the next jobs; the database shows them ``running`` with no handler started."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from dataclasses import dataclass

import psycopg
import pytest

import awa_cli as awa
from awa_cli.worker.queues import CLAIM_AHEAD_BELOW, QueueSpec
from tests.helpers import job_row, running_worker, states, wait_until

pytestmark = [pytest.mark.integration]


@dataclass
class Quick:
    n: int


@dataclass
class Gated:
    gate: str


@dataclass
class Slow:
    n: int


started: list[int] = []  # job ids, in the order their handlers started
finished: list[
    int
] = []  # Slow jobs whose handler returned (their completion may not be committed yet)
gates: dict[str, asyncio.Event] = {}

app = awa.App()


@app.task(Quick)
async def quick(job: awa.Job) -> None:
    started.append(job.id)


@app.task(Gated)
async def gated(job: awa.Job) -> None:
    started.append(job.id)
    await gates[job.args.gate].wait()


@app.task(Slow)
async def slow(job: awa.Job) -> None:
    started.append(job.id)
    await asyncio.sleep(CLAIM_AHEAD_BELOW * 4)
    finished.append(job.id)


@pytest.fixture(autouse=True)
def fresh() -> Iterator[None]:
    started.clear()
    finished.clear()
    gates.clear()
    yield
    for gate in gates.values():
        gate.set()


def ahead_ids(worker: awa.Worker) -> list[int]:
    """The jobs queue default's runner holds claimed ahead, in claim order."""
    return [row.id for row, _ in worker.runners["default"].ahead]


def running_ids(dsn: str) -> set[int]:
    with psycopg.connect(dsn) as conn:
        return {r[0] for r in conn.execute("SELECT id FROM awa.jobs WHERE state = 'running'")}


async def warm_up(client: awa.AsyncClient, worker: awa.Worker, count: int = 30) -> None:
    """Short attempts, so the queue's moving average is under the claim-ahead bound."""
    ids = [(await client.insert(Quick(i))).id for i in range(count)]
    await wait_until(lambda: set(ids) <= set(started))
    runner = worker.runners["default"]
    assert runner.average is not None and runner.average < CLAIM_AHEAD_BELOW


async def held_with_ahead(
    client: awa.AsyncClient, worker: awa.Worker, dsn: str, slots: int, ahead: int
) -> tuple[list[int], list[int]]:
    """Every slot held by a gated job, and ``ahead`` quick jobs claimed ahead behind them:
    (gated ids, ids waiting ahead)."""
    gates["hold"] = asyncio.Event()
    held = [(await client.insert(Gated("hold"))).id for _ in range(slots)]
    behind = [(await client.insert(Quick(100 + i))).id for i in range(ahead)]
    await wait_until(lambda: set(held) <= set(started))
    await wait_until(lambda: ahead_ids(worker) == behind)
    assert set(behind) <= running_ids(dsn)  # claimed: running in the database
    assert not set(behind) & set(started)  # but not started
    return held, behind


@pytest.mark.asyncio
async def test_short_attempts_claim_ahead_and_run_in_claim_order(dsn: str) -> None:
    async with running_worker(app, dsn, {"default": 2}) as worker:
        async with awa.AsyncClient(dsn) as client:
            await warm_up(client, worker)
            _, behind = await held_with_ahead(client, worker, dsn, slots=2, ahead=2)
            # more jobs running in the database than the queue has slots: two wait ahead
            assert len(running_ids(dsn)) == 4
            gates["hold"].set()
            await wait_until(lambda: set(behind) <= set(started))
            assert [i for i in started if i in behind] == behind  # the claim's order
            await wait_until(lambda: states(dsn) == {"completed": 34})


@pytest.mark.asyncio
async def test_slow_attempts_claim_only_the_free_slots(dsn: str) -> None:
    async with running_worker(app, dsn, {"default": 2}) as worker:
        async with awa.AsyncClient(dsn) as client:
            await client.insert_many([Slow(i) for i in range(20)])
            peak = 0
            while len(started) < 20:
                # rows still running in the database, less those whose handler returned and
                # whose completion is on its way: what the worker claimed and holds
                held = set(running_ids(dsn)) - set(finished)
                peak = max(peak, len(held))
                await asyncio.sleep(0.002)
            runner = worker.runners["default"]
            assert runner.average is not None and runner.average >= CLAIM_AHEAD_BELOW
            assert peak <= 2
            assert not runner.ahead


@pytest.mark.asyncio
async def test_claim_ahead_false_keeps_to_the_free_slots(dsn: str) -> None:
    spec = QueueSpec("default", 2, claim_ahead=False)
    async with running_worker(app, dsn, {"default": spec}) as worker:
        async with awa.AsyncClient(dsn) as client:
            await warm_up(client, worker)
            gates["hold"] = asyncio.Event()
            held = [(await client.insert(Gated("hold"))).id for _ in range(2)]
            behind = (await client.insert(Quick(1))).id
            await wait_until(lambda: set(held) <= set(started))
            await asyncio.sleep(0.5)  # several polls: the job behind stays available
            assert job_row(dsn, behind).state == awa.JobState.AVAILABLE
            assert not worker.runners["default"].ahead
            gates["hold"].set()
            await wait_until(lambda: behind in started)


@pytest.mark.asyncio
async def test_a_job_waiting_ahead_is_dropped_when_cancelled(dsn: str) -> None:
    async with running_worker(app, dsn, {"default": 1}) as worker:
        async with awa.AsyncClient(dsn) as client:
            await warm_up(client, worker)
            _, [behind] = await held_with_ahead(client, worker, dsn, slots=1, ahead=1)
            await client.cancel(behind)
            await wait_until(lambda: not worker.runners["default"].ahead)
            gates["hold"].set()
            after = (await client.insert(Quick(999))).id
            await wait_until(lambda: after in started)
            assert behind not in started  # its handler never ran
            assert job_row(dsn, behind).state == awa.JobState.CANCELLED


@pytest.mark.asyncio
async def test_a_job_waiting_ahead_is_dropped_when_rescued(dsn: str) -> None:
    async with running_worker(
        app,
        dsn,
        {"default": 1},
        heartbeat_interval=0.2,
        heartbeat_staleness=1,
        rescue_interval=0.2,
        leader_election_interval=0.2,
    ) as worker:
        async with awa.AsyncClient(dsn) as client:
            await warm_up(client, worker)
            _, [behind] = await held_with_ahead(client, worker, dsn, slots=1, ahead=1)
            lease = job_row(dsn, behind).run_lease
            # No heartbeat touches a job waiting ahead; make it look long lost at once.
            with psycopg.connect(dsn, autocommit=True) as conn:
                conn.execute(
                    "UPDATE awa.jobs SET heartbeat_at = now() - interval '1 hour' WHERE id = %s",
                    (behind,),
                )
            await wait_until(lambda: not worker.runners["default"].ahead)
            assert behind not in started
            gates["hold"].set()
            # The rescue made it retryable; it runs again later, as a new attempt, once.
            with psycopg.connect(dsn, autocommit=True) as conn:
                conn.execute("UPDATE awa.jobs SET run_at = now() WHERE id = %s", (behind,))
            await wait_until(lambda: behind in started)
            await wait_until(lambda: job_row(dsn, behind).state == awa.JobState.COMPLETED)
            row = job_row(dsn, behind)
            assert row.run_lease > lease and row.attempt == 2
            assert started.count(behind) == 1


@dataclass
class Timed:
    seconds: float


@app.task(Timed)
async def timed(job: awa.Job) -> None:
    started.append(job.id)
    await asyncio.sleep(job.args.seconds)


@pytest.mark.asyncio
async def test_the_deadline_of_a_job_waiting_ahead_counts_from_its_claim(dsn: str) -> None:
    # No maintenance: only the worker's own deadline timer can stop the attempt.
    async with running_worker(app, dsn, {"default": 1}, maintenance=False) as worker:
        async with awa.AsyncClient(dsn) as client:
            await warm_up(client, worker)
            gates["hold"] = asyncio.Event()
            held = (await client.insert(Gated("hold"))).id
            # a 1.5 s deadline, of which it waits 1 s ahead, then an attempt of 1 s: past it
            behind = (await client.insert(Timed(1.0), deadline_duration=1.5)).id
            await wait_until(lambda: held in started)
            await wait_until(lambda: ahead_ids(worker) == [behind])
            await asyncio.sleep(1.0)
            gates["hold"].set()
            await wait_until(lambda: job_row(dsn, behind).state != awa.JobState.RUNNING)
            row = job_row(dsn, behind)
            assert row.state in (awa.JobState.RETRYABLE, awa.JobState.AVAILABLE), row.state
            assert "deadline" in str(row.errors[-1]).lower()


@pytest.mark.asyncio
async def test_a_stopping_worker_runs_the_jobs_it_claimed_ahead(dsn: str) -> None:
    worker = awa.Worker(app, dsn, {"default": 1}, poll_interval=0.2)
    task = asyncio.create_task(worker.run())
    await asyncio.wait_for(worker.wait_listening(), timeout=10)
    async with awa.AsyncClient(dsn) as client:
        await warm_up(client, worker)
        gates["hold"] = asyncio.Event()
        held = (await client.insert(Gated("hold"))).id
        behind = (await client.insert(Timed(0.5))).id  # still running when the held one ends
        await wait_until(lambda: held in started)
        await wait_until(lambda: ahead_ids(worker) == [behind])
        stopping = asyncio.create_task(worker.shutdown(timeout=30))
        await asyncio.sleep(0.3)
        gates["hold"].set()  # the held job ends; the job claimed ahead takes its slot
        await asyncio.wait_for(stopping, timeout=30)
        await asyncio.wait_for(task, timeout=10)
    assert behind in started
    assert states(dsn) == {"completed": 32}  # the drain waited for it, and finalised it
