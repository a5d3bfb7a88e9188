"""Durable follow-up jobs (spec "Durable follow-up jobs", architecture §3, §4, §5 decisions 1-2)."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from datetime import datetime

import psycopg
import pytest

import awa_cli as awa
from awa_cli.follow_up_specs import CompletedSpecWith
from awa_cli.outcomes import OutcomeCore
from tests.helpers import (
    add_noop_tasks,
    all_terminal,
    job_row,
    running_worker,
    states,
    wait_until,
)

pytestmark = [pytest.mark.integration]


@dataclass
class Signup:
    user_id: int
    mode: str = "ok"


@dataclass
class Welcome:
    user_id: int
    note: str = ""


def follow_ups(dsn: str, kind: str = "welcome") -> list[awa.JobRow]:
    from psycopg.rows import dict_row

    with psycopg.connect(dsn) as conn, conn.cursor(row_factory=dict_row) as cur:
        cur.execute("SELECT * FROM awa.jobs WHERE kind = %s ORDER BY id", (kind,))
        return [awa.JobRow.from_record(r) for r in cur.fetchall()]


def signup_app(
    completed_with: CompletedSpecWith | None = None, follow_up: type = Welcome
) -> awa.App:
    """Signup's handler (its mode says how the job ends) and Welcome's, which does nothing;
    with ``completed_with``, that Completed spec enqueueing ``follow_up``."""
    app = awa.App()

    @app.task(Signup, queue="signup")
    async def signup(job: awa.Job) -> awa.JobResult | None:
        match job.args.mode:
            case "ok":
                job.set_output({"secret": "not for specs"})
                return None
            case "raise":
                raise RuntimeError("smtp down")
            case "terminal":
                raise awa.TerminalError("no such user")
            case "cancel":
                return awa.Cancel("user left")
            case "park":
                return awa.WaitForCallback(await job.register_callback(timeout=600))
            case "snooze":
                return awa.Snooze(60)
        raise AssertionError(job.args.mode)

    add_noop_tasks(app, Welcome, queue="email")
    if completed_with is not None:
        app.on_completed_enqueue_with(Signup, follow_up, completed_with)
    return app


async def run_signup(
    dsn: str, app: awa.App, *signups: Signup, wait_state: tuple[str, ...] = ("completed",)
) -> list[int]:
    async with awa.AsyncClient(dsn, app=app) as client:  # the app gives the kinds' queues
        ids = [(await client.insert(s)).id for s in signups]
    async with running_worker(app, dsn, {"signup": 5}):
        for job_id in ids:
            await wait_until(lambda: job_row(dsn, job_id).state in wait_state)
    return ids


@pytest.mark.asyncio
async def test_completed_spec_runs_in_the_same_transaction(dsn: str) -> None:
    app = signup_app()
    seen: list[tuple[object, awa.JobRow]] = []

    @app.on_completed_enqueue(Signup, Welcome)
    def welcome_after_signup(args: Signup, job: awa.JobRow) -> Welcome:
        seen.append((args, job))
        return Welcome(args.user_id, note=f"from job {job.id}")

    [trigger] = await run_signup(dsn, app, Signup(7))
    [follow] = follow_ups(dsn)
    assert follow.args == {"user_id": 7, "note": f"from job {trigger}"}
    assert follow.queue == "email"  # the queue its kind was registered with
    with psycopg.connect(dsn) as conn:  # one transaction: same xmin as the trigger's final update
        xmins = conn.execute(
            "SELECT xmin::text FROM awa.jobs WHERE id IN (%s, %s)", (trigger, follow.id)
        ).fetchall()
    assert len({x[0] for x in xmins}) == 1
    [(args, row)] = seen
    assert isinstance(args, Signup) and row.state == "completed" and row.output is None


@pytest.mark.asyncio
async def test_each_outcome_has_its_spec_with_its_context(dsn: str) -> None:
    app = signup_app()
    calls: dict[str, tuple[object, ...]] = {}

    @app.on_retried_enqueue_with(Signup, Welcome)
    def on_retried(
        args: Signup, job: awa.JobRow, error: str, attempt: int, next_run_at: datetime
    ) -> awa.EnqueueRequest:
        calls["retried"] = (error, attempt, next_run_at, job.state)
        return awa.EnqueueRequest(Welcome(args.user_id, "retried"))

    @app.on_exhausted_enqueue(Signup, Welcome)
    def on_exhausted(args: Signup, job: awa.JobRow, error: str, attempt: int) -> Welcome:
        calls["exhausted"] = (error, attempt, job.state)
        return Welcome(args.user_id, "exhausted")

    @app.on_cancelled_enqueue(Signup, Welcome)
    def on_cancelled(args: Signup, job: awa.JobRow, reason: str) -> Welcome:
        calls["cancelled"] = (reason, job.state)
        return Welcome(args.user_id, "cancelled")

    @app.on_waiting_for_callback_enqueue(Signup, Welcome)
    def on_waiting(args: Signup, job: awa.JobRow) -> Welcome:
        calls["waiting"] = (job.state, job.callback_id)
        return Welcome(args.user_id, "waiting")

    await run_signup(
        dsn,
        app,
        Signup(1, "raise"),
        Signup(2, "terminal"),
        Signup(3, "cancel"),
        Signup(4, "park"),
        Signup(5, "snooze"),
        wait_state=("retryable", "failed", "cancelled", "waiting_external", "scheduled"),
    )
    notes = sorted(r.args["note"] for r in follow_ups(dsn))
    assert notes == ["cancelled", "exhausted", "retried", "waiting"]  # snooze: no outcome, no spec
    assert calls["retried"][0] == "RuntimeError: smtp down" and calls["retried"][1] == 1
    assert calls["retried"][3] == "retryable" and calls["retried"][2] is not None
    assert calls["exhausted"] == ("TerminalError: no such user", 1, "failed")
    assert calls["cancelled"] == ("user left", "cancelled")
    assert calls["waiting"][0] == "waiting_external" and calls["waiting"][1] is not None


@pytest.mark.asyncio
async def test_with_returning_none_enqueues_nothing_and_the_trigger_commits(dsn: str) -> None:
    def only_even(args: Signup, job: awa.JobRow) -> awa.EnqueueRequest | None:
        return awa.EnqueueRequest(Welcome(args.user_id)) if args.user_id % 2 == 0 else None

    app = signup_app(only_even)
    await run_signup(dsn, app, Signup(1), Signup(2), Signup(3))
    assert [r.args["user_id"] for r in follow_ups(dsn)] == [2]
    assert states(dsn) == {"completed": 3, "available": 1}


@pytest.mark.asyncio
async def test_several_specs_run_in_registration_order(dsn: str) -> None:
    app = signup_app()
    for note in ("first", "second", "third"):
        app.on_completed_enqueue(Signup, Welcome, lambda a, j, n=note: Welcome(a.user_id, n))
    await run_signup(dsn, app, Signup(1))
    assert [r.args["note"] for r in follow_ups(dsn)] == ["first", "second", "third"]


@pytest.mark.asyncio
async def test_enqueue_request_options_and_with_opts_replacing_everything(dsn: str) -> None:
    app = signup_app()

    def vip(args: Signup, note: str) -> awa.EnqueueRequest:
        """The request both specs start from: queue "vip", priority 1."""
        return awa.EnqueueRequest(Welcome(args.user_id, note)).queue("vip").priority(1)

    @app.on_completed_enqueue_with(Signup, Welcome)
    def chained(args: Signup, job: awa.JobRow) -> awa.EnqueueRequest:
        return vip(args, "chained").max_attempts(3).metadata({"source": "signup"})

    @app.on_completed_enqueue_with(Signup, Welcome)
    def replaced(args: Signup, job: awa.JobRow) -> awa.EnqueueRequest:
        return vip(args, "replaced").with_opts(awa.InsertOpts(max_attempts=7))

    await run_signup(dsn, app, Signup(1))
    chained_row, replaced_row = follow_ups(dsn)
    assert (chained_row.queue, chained_row.priority, chained_row.max_attempts) == ("vip", 1, 3)
    # the core names the trigger in every follow-up's metadata (architecture §11)
    assert chained_row.metadata == {
        "source": "signup",
        "awa.trigger_id": chained_row.metadata["awa.trigger_id"],
    }
    assert isinstance(chained_row.metadata["awa.trigger_id"], int)
    # with_opts replaced the earlier .queue() and .priority(): defaults again
    assert (replaced_row.queue, replaced_row.priority, replaced_row.max_attempts) == ("email", 2, 7)


def flaky_welcome(app: awa.App) -> list[bool]:
    """Register a Signup → Welcome follow-up that raises "spec bug" while the returned list
    is non-empty; clear it to make the spec work."""
    fail = [True]

    @app.on_completed_enqueue(Signup, Welcome)
    def flaky(args: Signup, job: awa.JobRow) -> Welcome:
        if fail:
            raise RuntimeError("spec bug")
        return Welcome(args.user_id)

    return fail


@pytest.mark.asyncio
async def test_a_raising_spec_rolls_back_the_worker_outcome_then_rescue_takes_it(dsn: str) -> None:
    app = signup_app()
    fail = flaky_welcome(app)

    async with awa.AsyncClient(dsn, app=app) as client:
        job = await client.insert(Signup(1))
    async with running_worker(app, dsn, {"signup": 1}, maintenance=False) as worker:
        await wait_until(lambda: job_row(dsn, job.id).attempt == 1 and not worker.running)
        await asyncio.sleep(0.2)
        row = job_row(dsn, job.id)
        assert row.state == "running" and follow_ups(dsn) == []  # nothing committed
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute("UPDATE awa.jobs SET heartbeat_at = now() - interval '1 hour'")
        rescued = await worker.core.rescue(awa.RescueReason.STALE_HEARTBEAT)
        assert [r.id for r in rescued] == [job.id]
        fail.clear()  # the spec works from now on
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute("UPDATE awa.jobs SET run_at = now() WHERE id = %s", (job.id,))
        await wait_until(lambda: job_row(dsn, job.id).state == "completed")
    assert len(follow_ups(dsn)) == 1 and job_row(dsn, job.id).attempt == 2


@pytest.mark.asyncio
async def test_a_raising_spec_rolls_back_complete_external_and_a_retry_succeeds(dsn: str) -> None:
    app = signup_app()
    fail = flaky_welcome(app)

    [job_id] = await run_signup(dsn, app, Signup(1, "park"), wait_state=("waiting_external",))
    parked = job_row(dsn, job_id)
    async with awa.AsyncClient(dsn, app=app) as client:
        with pytest.raises(awa.AwaError, match="spec bug"):
            await client.complete_external(parked.callback_id)
        again = job_row(dsn, job_id)
        assert again.state == "waiting_external" and again.callback_id == parked.callback_id
        assert follow_ups(dsn) == []
        fail.clear()  # the spec works from now on
        row = await client.complete_external(parked.callback_id)
    assert row.state == "completed" and len(follow_ups(dsn)) == 1


@pytest.mark.asyncio
async def test_callback_resolutions_run_their_specs_atomically(dsn: str) -> None:
    app = signup_app()
    app.on_completed_enqueue(Signup, Welcome, lambda a, j: Welcome(a.user_id, "completed"))
    app.on_exhausted_enqueue(Signup, Welcome, lambda a, j, e, n: Welcome(a.user_id, f"failed: {e}"))
    app.on_retried_enqueue(
        Signup, Welcome, lambda a, j, e, n, t: Welcome(a.user_id, f"retried {n}")
    )
    ids = await run_signup(
        dsn,
        app,
        Signup(1, "park"),
        Signup(2, "park"),
        Signup(3, "park"),
        wait_state=("waiting_external",),
    )
    rows = [job_row(dsn, i) for i in ids]
    async with awa.AsyncClient(dsn, app=app) as client:
        await client.complete_external(rows[0].callback_id)
        await client.fail_external(rows[1].callback_id, "declined")
        await client.retry_external(rows[2].callback_id)
    assert sorted(r.args["note"] for r in follow_ups(dsn)) == [
        "completed",
        "failed: declined",
        "retried 1",
    ]
    # a bare client runs no specs
    async with awa.AsyncClient(dsn) as bare:
        [job_id] = [r.id for r in await bare.list_jobs(state="available", kind="signup")]
    assert job_id == ids[2]


@pytest.mark.asyncio
async def test_paired_unique_keys_give_exactly_half_the_follow_ups(dsn: str) -> None:
    def dedup(args: Signup, job: awa.JobRow) -> awa.EnqueueRequest:
        return awa.EnqueueRequest(Welcome(args.user_id // 2)).unique(awa.UniqueOpts())

    app = signup_app(dedup)
    async with awa.AsyncClient(dsn, app=app) as client:
        await client.insert_many([Signup(i) for i in range(1000)])
    async with running_worker(app, dsn, {"signup": 20}):
        await wait_until(lambda: states(dsn).get("completed", 0) == 1000, timeout=120)
    assert len(follow_ups(dsn)) == 500
    assert states(dsn)["completed"] == 1000


@pytest.mark.asyncio
async def test_unique_states_decide_how_long_a_follow_up_blocks(dsn: str) -> None:
    pending_only = {
        awa.JobState.SCHEDULED,
        awa.JobState.AVAILABLE,
        awa.JobState.RUNNING,
        awa.JobState.RETRYABLE,
    }

    def dedup(args: Signup, job: awa.JobRow) -> awa.EnqueueRequest:
        states_ = pending_only if args.mode == "ok" else awa.DEFAULT_UNIQUE_STATES
        return awa.EnqueueRequest(Welcome(1)).unique(awa.UniqueOpts(by_args=False, states=states_))

    app = signup_app(dedup)
    await run_signup(dsn, app, Signup(1))
    [first] = follow_ups(dsn)
    with psycopg.connect(dsn, autocommit=True) as conn:  # the follow-up ran and completed
        conn.execute(
            "UPDATE awa.jobs SET state = 'completed', finalized_at = now() WHERE id = %s",
            (first.id,),
        )
    await run_signup(dsn, app, Signup(2))  # without `completed` in states: no longer blocks
    assert len(follow_ups(dsn)) == 2


@pytest.mark.asyncio
async def test_by_args_false_collapses_follow_ups_of_a_kind(dsn: str) -> None:
    app = signup_app(
        lambda a, j: awa.EnqueueRequest(Welcome(a.user_id)).unique(awa.UniqueOpts(by_args=False))
    )
    await run_signup(dsn, app, Signup(1), Signup(2), Signup(3))
    assert len(follow_ups(dsn)) == 1 and states(dsn)["completed"] == 3


@pytest.mark.asyncio
async def test_kinds_without_specs_stay_on_the_batched_path(
    dsn: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls = {"batch": 0, "with_follow_ups": 0}
    batch, with_follow_ups = OutcomeCore.finalize_batch, OutcomeCore.finalize_with_follow_ups

    async def spy_batch(self: OutcomeCore, results: list[object]) -> object:
        calls["batch"] += 1
        return await batch(self, results)  # type: ignore[arg-type]

    async def spy_follow_ups(self: OutcomeCore, results: list[object]) -> object:
        calls["with_follow_ups"] += len(results)
        return await with_follow_ups(self, results)  # type: ignore[arg-type]

    monkeypatch.setattr(OutcomeCore, "finalize_batch", spy_batch)
    monkeypatch.setattr(OutcomeCore, "finalize_with_follow_ups", spy_follow_ups)
    app = signup_app(lambda a, j: None)  # a spec that returns None
    async with awa.AsyncClient(dsn, app=app) as client:
        await client.insert_many([Signup(i) for i in range(20)])
        await client.insert_many([Welcome(i) for i in range(200)])
    async with running_worker(app, dsn, {"signup": 5, "email": 50}):
        await wait_until(lambda: all_terminal(dsn, 220))
    assert (
        calls["with_follow_ups"] == 20
    )  # a kind with a spec takes the follow-up transaction, even for None
    assert calls["batch"] < 200  # the 200 spec-less jobs were finalised many per statement


@pytest.mark.asyncio
async def test_a_follow_up_of_an_unknown_kind_fails_terminally_when_claimed(dsn: str) -> None:
    app = signup_app(
        lambda a, j: awa.EnqueueRequest({"x": 1}).with_opts(
            awa.InsertOpts(kind="not_deployed_yet", queue="signup")
        ),
        follow_up=dict,
    )
    await run_signup(dsn, app, Signup(1))
    async with running_worker(app, dsn, {"signup": 5}):
        await wait_until(
            lambda: any(r.state == "failed" for r in follow_ups(dsn, "not_deployed_yet"))
        )
    [row] = follow_ups(dsn, "not_deployed_yet")
    assert row.errors[-1]["error"] == "unknown job kind: not_deployed_yet"


@pytest.mark.asyncio
async def test_a_follow_up_wakes_the_workers_of_its_queue(dsn: str) -> None:
    """Worker sessions defer the insert trigger's NOTIFY to after their commits (so per-job
    transactions do not serialise on the notify lock); the follow-up's queue is still woken."""
    import time

    app = signup_app()
    app.on_completed_enqueue(Signup, Welcome, lambda a, j: Welcome(a.user_id))
    async with awa.AsyncClient(dsn, app=app) as client:
        async with running_worker(app, dsn, {"email": 5}, poll_interval=60):  # only NOTIFY wakes it
            async with running_worker(app, dsn, {"signup": 5}, poll_interval=60):
                await asyncio.sleep(0.3)  # both idle, waiting on their 60 s poll
                started = time.monotonic()
                await client.insert(Signup(1))
                await wait_until(
                    lambda: any(r.state == "completed" for r in follow_ups(dsn)), timeout=10
                )
                assert time.monotonic() - started < 5


# -- attempts with follow-ups finalised as a group (one transaction for many jobs) -------------
async def claim_all(dsn: str, queue: str, count: int) -> list[awa.JobRow]:
    from awa_cli.db.statements import SQL

    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
        cur = await conn.execute(
            SQL["claim_by_queue"],
            {"queue": queue, "limit": count, "deadline": None, "worker": "h:1"},
        )
        # a claim's records: the row, then the claimed child's parents (claim_returning)
        rows = [awa.JobRow.from_values(r[:-1]) for r in await cur.fetchall()]
    assert len(rows) == count
    return sorted(rows, key=lambda r: r.id)


async def finalize_group(
    dsn: str, app: awa.App, count: int
) -> tuple[list[awa.JobRow], list[object]]:
    """``count`` signups claimed and completed through one finalize_attempts call."""
    from awa_cli.attempts import decide

    async with awa.AsyncClient(dsn, app=app) as client:
        await client.insert_many([Signup(i) for i in range(count)])
        claimed = await claim_all(dsn, "signup", count)
        results = [
            decide(row, args=Signup(**row.args), result=None, exc=None, duration=0.0)
            for row in claimed
        ]
        assert all(client.core.needs_own_transaction(r) for r in results)
        done = await client.core.finalize_attempts(results)
    return claimed, list(done)


@pytest.mark.asyncio
async def test_a_group_commits_each_job_with_its_own_follow_ups(dsn: str) -> None:
    app = signup_app()
    app.on_completed_enqueue(Signup, Welcome)(lambda a, j: Welcome(a.user_id, note=f"from {j.id}"))
    app.on_completed_enqueue(Signup, Welcome)(lambda a, j: Welcome(a.user_id, note="second"))
    claimed, done = await finalize_group(dsn, app, 12)
    rows = {r.id: r for r in follow_ups(dsn)}
    assert len(rows) == 24
    for job, item in zip(claimed, done, strict=True):
        assert item.job_id == job.id and item.row is not None and item.row.state == "completed"
        assert [rows[i].args for i in item.follow_ups] == [  # each id is that job's own follow-up
            {"user_id": job.args["user_id"], "note": f"from {job.id}"},
            {"user_id": job.args["user_id"], "note": "second"},
        ]
    assert states(dsn) == {"completed": 12, "available": 24}


@pytest.mark.asyncio
async def test_a_raising_spec_in_a_group_holds_back_only_its_own_job(dsn: str) -> None:
    app = signup_app()

    @app.on_completed_enqueue(Signup, Welcome)
    def spec(args: Signup, job: awa.JobRow) -> Welcome:
        if args.user_id == 3:
            raise RuntimeError("spec bug")
        return Welcome(args.user_id)

    claimed, done = await finalize_group(dsn, app, 8)
    failed = [item for item in done if item.error is not None]
    assert [item.job_id for item in failed] == [claimed[3].id] and failed[0].row is None
    assert job_row(dsn, claimed[3].id).state == "running"  # rolled back: left for rescue
    assert sorted(r.args["user_id"] for r in follow_ups(dsn)) == [0, 1, 2, 4, 5, 6, 7]  # none twice
    assert states(dsn) == {"completed": 7, "running": 1, "available": 7}


@pytest.mark.asyncio
async def test_follow_ups_of_one_group_sharing_a_unique_key_insert_once(dsn: str) -> None:
    app = signup_app()
    app.on_completed_enqueue_with(
        Signup,
        Welcome,
        lambda a, j: awa.EnqueueRequest(Welcome(0, note="digest")).unique(awa.UniqueOpts()),
    )
    _, done = await finalize_group(dsn, app, 5)
    assert [len(item.follow_ups) for item in done] == [1, 0, 0, 0, 0]  # the first in order wins
    assert [item.duplicates for item in done] == [0, 1, 1, 1, 1]
    assert len(follow_ups(dsn)) == 1 and states(dsn)["completed"] == 5


@pytest.mark.asyncio
async def test_the_group_insert_stores_every_option_as_a_single_insert_does(dsn: str) -> None:
    from dataclasses import replace
    from datetime import timedelta, UTC

    from awa_cli.jobs import InsertOpts, UniqueOpts, prepare
    from awa_cli.outcomes import insert_follow_ups

    later = datetime.now(UTC) + timedelta(hours=1)
    options = [
        InsertOpts(),
        InsertOpts(
            queue="q2",
            priority=4,
            max_attempts=3,
            run_at=later,
            deadline_duration=7.5,
            metadata={"m": [1, "é"]},
            tags=["a", "b,c", 'd"e'],
            ordering_key="k1",
        ),
        InsertOpts(unique_opts=UniqueOpts(states=["available", "running"])),
        InsertOpts(run_at=datetime.now(UTC) - timedelta(seconds=5), tags=[]),
    ]
    options = [replace(o, kind="note") for o in options]
    jobs = [prepare({"n": n, "text": "tab\there"}, o) for n, o in enumerate(options)]
    columns = (
        "kind",
        "queue",
        "args",
        "state",
        "priority",
        "max_attempts",
        "deadline_duration",
        "metadata",
        "tags",
        "unique_key",
        "unique_states",
        "ordering_key",
    )
    async with awa.AsyncClient(dsn) as client:
        single = [
            await client.insert({"n": n, "text": "tab\there"}, **_kwargs(o))
            for n, o in enumerate(options)
        ]
        with psycopg.connect(dsn, autocommit=True) as conn:  # free the unique key for the group
            conn.execute("UPDATE awa.jobs SET state = 'cancelled'")
        async with await psycopg.AsyncConnection.connect(dsn) as conn:
            ids = await insert_follow_ups(conn, [*jobs, jobs[2]])  # the last repeats a held key
            await conn.commit()
    assert ids[4] is None and None not in ids[:4] and ids[:4] == sorted(ids[:4])
    with psycopg.connect(dsn) as conn:

        def row(job_id: int) -> tuple[object, ...]:
            return conn.execute(
                f"SELECT {', '.join(columns)}, run_at FROM awa.jobs WHERE id = %s", (job_id,)
            ).fetchone()  # type: ignore[return-value]

        for first, second in zip(single, ids, strict=False):
            assert second is not None
            a, b = row(first.id), row(second)
            assert a[:3] == b[:3] and a[4:-1] == b[4:-1], (a, b)
        assert row(ids[1])[3] == "scheduled" and row(ids[1])[-1] == later
        assert row(ids[3])[3] == "available"


def _kwargs(opts: object) -> dict[str, object]:
    from dataclasses import fields

    return {
        f.name: getattr(opts, f.name) for f in fields(opts) if getattr(opts, f.name) is not None
    }  # type: ignore[arg-type]
