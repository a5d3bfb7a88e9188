"""Event dispatch through a real Worker against PostgreSQL (spec: lifecycle hooks, "Events"
and "Semantics"), for App hooks and for a pluggy plugin.

Both paths record through the same function, ``tests.integration.plugins.sample_plugin.awa_job_event``:
the ``app`` path registers it as ``@app.on_event(HookJob)`` (typed args), the ``plugin`` path
loads the module through ``build_plugin_host`` and passes the host to ``awa.Worker``
(``event.args`` a dict).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime, UTC
from typing import Any

import psycopg
import pytest

import awa_cli as awa
from awa_cli.plugins.manager import build_plugin_host
from tests.helpers import job_row, running_worker, wait_until
from tests.integration.plugins import sample_plugin

pytestmark = [pytest.mark.integration]


@dataclass
class HookJob:
    mode: str
    value: float = 0.0


def make_app(release: asyncio.Event | None = None) -> awa.App:
    app = awa.App()

    @app.task(HookJob)
    async def handle(job: awa.Job) -> awa.JobResult | None:
        match job.args.mode:
            case "ok":
                if job.args.value:
                    await asyncio.sleep(job.args.value)
                job.set_output({"done": job.id})
                return None
            case "raise":
                raise ValueError("boom")
            case "retry_after":
                return awa.RetryAfter(job.args.value or 60)
            case "snooze":
                return awa.Snooze(60)
            case "cancel":
                return awa.Cancel("not needed")
            case "terminal":
                raise awa.TerminalError("bad input")
            case "wait":
                token = await job.register_callback(timeout=job.args.value or 3600)
                return awa.WaitForCallback(token)
            case "hold":  # until the attempt is taken away (rescued, cancelled)
                while not job.is_cancelled():
                    await asyncio.sleep(0.02)
                return None
            case "gate":
                assert release is not None
                await release.wait()
                return None
        raise AssertionError(job.args.mode)

    return app


@pytest.fixture(autouse=True)
def _clean_plugin() -> Iterator[None]:
    sample_plugin.reset()
    yield
    sample_plugin.reset()


@pytest.fixture(params=["app", "plugin"])
def path(request: pytest.FixtureRequest) -> str:
    return str(request.param)


def observe(path: str, app: awa.App) -> dict[str, Any]:
    """Hook the recorder in on ``path``; returns the extra ``awa.Worker`` keyword arguments."""
    if path == "app":
        app.on_event(HookJob)(sample_plugin.awa_job_event)
        return {}
    host = build_plugin_host(["tests.integration.plugins.sample_plugin"], entry_points=False)
    assert not host.failed
    return {"plugins": host}


@contextlib.contextmanager
def hooks_held(event: str) -> Iterator[None]:
    """The recorder's ``event`` hooks ("started", "completed") wait until the block ends."""
    gate = asyncio.Event()
    sample_plugin.CONFIG["gate"] = {event: gate}
    try:
        yield
    finally:
        gate.set()


def names(events: list[Any]) -> list[str]:
    return [type(e).__name__ for e in events]


def insert(dsn: str, args: HookJob, **options: Any) -> awa.JobRow:
    with awa.Client(dsn) as client:
        return client.insert(args, **options)


# -- every row of the outcome → event table ----------------------------------------------
ROWS = [
    # (mode, insert options, events, resulting state)
    ("ok", {}, ["Completed", "Started"], "completed"),
    ("raise", {}, ["Retried", "Started"], "retryable"),
    ("retry_after", {}, ["Retried", "Started"], "retryable"),
    ("raise", {"max_attempts": 1}, ["Exhausted", "Started"], "failed"),
    ("retry_after", {"max_attempts": 1}, ["Exhausted", "Started"], "failed"),
    ("terminal", {}, ["Exhausted", "Started"], "failed"),
    ("cancel", {}, ["Cancelled", "Started"], "cancelled"),
    ("snooze", {}, ["Started"], "scheduled"),
    ("wait", {}, ["Started", "WaitingForCallback"], "waiting_external"),
]


@pytest.mark.asyncio
@pytest.mark.parametrize(
    ("mode", "options", "expected", "state"), ROWS, ids=[f"{r[0]}-{r[3]}" for r in ROWS]
)
async def test_outcome_emits_its_event(
    dsn: str, path: str, mode: str, options: dict[str, Any], expected: list[str], state: str
) -> None:
    app = make_app()
    extra = observe(path, app)
    job = insert(dsn, HookJob(mode), **options)
    async with running_worker(app, dsn, **extra):
        await wait_until(lambda: len(sample_plugin.events_of(job.id)) >= len(expected))
        await asyncio.sleep(0.15)  # any further (wrong) event would arrive meanwhile
    row = job_row(dsn, job.id)
    events = sample_plugin.events_of(job.id)
    assert row.state == state
    assert sorted(names(events)) == expected
    args_type = HookJob if path == "app" else dict
    assert all(isinstance(e.args, args_type) for e in events)
    started = next(e for e in events if isinstance(e, awa.JobEvent.Started))
    assert started.job.state == "running" and started.job.attempt == 1
    for event in events:
        if isinstance(event, awa.JobEvent.Started):
            continue
        assert event.job.state == state  # the committed post-transition row
        match event:
            case awa.JobEvent.Completed(duration=duration, output=output):
                assert output == {"done": job.id} and duration >= 0
            case awa.JobEvent.Retried(error=error, attempt=attempt, next_run_at=next_run_at):
                assert attempt == 1 and next_run_at == row.run_at
                assert error == ("ValueError: boom" if mode == "raise" else "")
            case awa.JobEvent.Exhausted(error=error, attempt=attempt):
                assert attempt == 1
                assert (
                    error
                    == {
                        "raise": "ValueError: boom",
                        "terminal": "TerminalError: bad input",
                        "retry_after": "",
                    }[mode]
                )
            case awa.JobEvent.Cancelled(reason=reason):
                assert reason == "not needed"
            case awa.JobEvent.WaitingForCallback(job=parked):
                assert parked.callback_id is not None and parked.callback_id == row.callback_id
            case _:
                pytest.fail(f"unexpected {event}")


@pytest.mark.asyncio
@pytest.mark.parametrize("reason", list(awa.RescueReason))
async def test_rescue_emits_rescued_with_its_reason(
    dsn: str, path: str, reason: awa.RescueReason
) -> None:
    app = make_app()
    extra = observe(path, app)
    timings: dict[str, Any] = {
        "rescue_interval": 0.1,
        "leader_election_interval": 0.1,
        "heartbeat_interval": 0.1,
    }
    if reason is awa.RescueReason.EXPIRED_CALLBACK:
        job, expected = (
            insert(dsn, HookJob("wait", 0.3)),
            ["Rescued", "Started", "WaitingForCallback"],
        )
    elif reason is awa.RescueReason.DEADLINE_EXCEEDED:
        job, expected = insert(dsn, HookJob("hold"), deadline_duration=0.3), ["Rescued", "Started"]
    else:  # heartbeats too rare for the staleness bound
        job, expected = insert(dsn, HookJob("hold")), ["Rescued", "Started"]
        timings.update(heartbeat_interval=5.0, heartbeat_staleness=0.4)
    async with running_worker(app, dsn, **timings, **extra) as worker:
        await wait_until(lambda: len(sample_plugin.events_of(job.id)) >= len(expected))
        await wait_until(lambda: not worker.running)  # a rescued handler's late result is fenced
        await asyncio.sleep(0.15)
    # The rescued job is retryable again after 2-2.5 s of backoff: on a loaded machine its
    # next attempt may already have started, so only the first attempt's events are compared.
    events = [e for e in sample_plugin.events_of(job.id) if e.job.attempt == 1]
    assert sorted(names(events)) == expected  # no Completed for the rescued attempt
    rescued = next(e for e in events if isinstance(e, awa.JobEvent.Rescued))
    assert rescued.reason is reason
    assert rescued.job.state == "retryable"
    row = job_row(dsn, job.id)
    assert row.state == "retryable" or row.attempt > 1  # not completed by the rescued attempt
    assert (
        row.errors[0]["attempt"] == 1 and row.errors[0]["error"] == rescued.job.errors[0]["error"]
    )


@pytest.mark.asyncio
async def test_operator_cancel_through_a_client_with_the_app(dsn: str, path: str) -> None:
    app = make_app()
    extra = observe(path, app)
    job = insert(dsn, HookJob("ok"), run_at=datetime(2999, 1, 1, tzinfo=UTC))
    plugin_hooks = extra["plugins"].event_hooks() if "plugins" in extra else ()
    async with awa.AsyncClient(dsn, app, plugin_hooks=plugin_hooks) as client:
        await client.cancel(job.id)
    # close() waited for the dispatched hooks
    [event] = sample_plugin.events_of(job.id)
    assert isinstance(event, awa.JobEvent.Cancelled) and event.job.state == "cancelled"


# -- Semantics ---------------------------------------------------------------------------
@pytest.mark.asyncio
async def test_hooks_see_the_committed_state_in_the_database(dsn: str, path: str) -> None:
    app = make_app()
    extra = observe(path, app)
    sample_plugin.CONFIG["dsn"] = dsn
    job = insert(dsn, HookJob("ok", 0.3))  # the handler outlives the Started hook's read
    async with running_worker(app, dsn, **extra):
        await wait_until(lambda: len(sample_plugin.events_of(job.id)) == 2)
    seen = {name: state for (_, name, state) in sample_plugin.SEEN_STATES}
    assert seen == {"started": "running", "completed": "completed"}


@pytest.mark.asyncio
async def test_a_slow_started_hook_does_not_delay_the_job(dsn: str, path: str) -> None:
    app = make_app()
    extra = observe(path, app)
    sample_plugin.CONFIG["sleep"] = {"started": 1.0}
    job = insert(dsn, HookJob("ok"))
    async with running_worker(app, dsn, **extra):
        began = time.monotonic()
        await wait_until(lambda: job_row(dsn, job.id).state == "completed")
        took = time.monotonic() - began
        assert took < 0.8
        assert "Started" not in names(sample_plugin.events_of(job.id))  # still sleeping
        await wait_until(lambda: len(sample_plugin.events_of(job.id)) == 2, timeout=5)
    order = [name for (_, name, _) in sample_plugin.FINISHED_AT]
    assert order == ["completed", "started"]  # detached: the outcome's hook finished first


@pytest.mark.asyncio
async def test_hooks_hold_no_worker_slot(dsn: str, path: str) -> None:
    """Every Started hook blocks until the end; one slot still runs all jobs one by one."""
    app = make_app()
    extra = observe(path, app)
    with hooks_held("started"):
        with awa.Client(dsn) as client:
            client.insert_many([HookJob("ok") for _ in range(4)])
        async with running_worker(app, dsn, {"default": 1}, **extra):
            await wait_until(
                lambda: (
                    len([e for e in sample_plugin.EVENTS if isinstance(e, awa.JobEvent.Completed)])
                    == 4
                )
            )
            assert not any(isinstance(e, awa.JobEvent.Started) for e in sample_plugin.EVENTS)
    await wait_until(lambda: len(sample_plugin.EVENTS) == 8)


@pytest.mark.asyncio
async def test_a_raising_hook_does_not_stop_the_next_one_nor_the_job(
    dsn: str, path: str, caplog: pytest.LogCaptureFixture
) -> None:
    app = make_app()

    def boom(event: Any) -> None:
        raise RuntimeError(f"boom on {event.name}")

    if path == "app":
        app.on_event_kind("hook_job", boom)  # registered first
        extra = observe(path, app)
        failing = "tests.integration.test_dispatch.test_a_raising_hook_does_not_stop_the_next_one_nor_the_job.<locals>.boom"
    else:
        host = build_plugin_host(
            ["tests.integration.plugins.raising_plugin", "tests.integration.plugins.sample_plugin"],
            entry_points=False,
        )
        extra, failing = {"plugins": host}, "tests.integration.plugins.raising_plugin"
    job = insert(dsn, HookJob("ok"))
    with caplog.at_level(logging.ERROR, logger="awa.dispatch"):
        async with running_worker(app, dsn, **extra):
            await wait_until(lambda: len(sample_plugin.events_of(job.id)) == 2)
    assert job_row(dsn, job.id).state == "completed"
    failures = [r for r in caplog.records if getattr(r, "action", None) == "hook_failed"]
    assert {r.hook for r in failures} == {failing}  # type: ignore[attr-defined]
    assert {r.getMessage().split(" failed on ")[1].split(" ")[0] for r in failures} == {
        "started",
        "completed",
    }
    assert all(failing in r.getMessage() and r.exc_info for r in failures)


@pytest.mark.asyncio
async def test_shutdown_returns_while_a_slow_hook_still_runs(dsn: str, path: str) -> None:
    app = make_app()
    extra = observe(path, app)
    with hooks_held("completed"):
        job = insert(dsn, HookJob("ok"))
        worker = awa.Worker(app, dsn, {"default": 2}, poll_interval=0.2, **extra)
        task = asyncio.create_task(worker.run())
        await wait_until(lambda: job_row(dsn, job.id).state == "completed")
        await wait_until(lambda: worker.dispatcher.pending >= 1)
        began = time.monotonic()
        await asyncio.wait_for(worker.shutdown(timeout=5), timeout=3)
        await asyncio.wait_for(task, timeout=3)
        assert time.monotonic() - began < 2
        assert worker.dispatcher.pending >= 1  # the Completed hook is still waiting
        assert "Completed" not in names(sample_plugin.events_of(job.id))
    await wait_until(lambda: "Completed" in names(sample_plugin.events_of(job.id)), timeout=5)


@pytest.mark.asyncio
async def test_a_stale_completion_dispatches_nothing(dsn: str, path: str) -> None:
    release = asyncio.Event()
    app = make_app(release)
    extra = observe(path, app)
    job = insert(dsn, HookJob("gate"))
    async with running_worker(app, dsn, **extra) as worker:
        await wait_until(lambda: bool(sample_plugin.events_of(job.id)))
        with psycopg.connect(dsn, autocommit=True) as conn:  # another claim took the job over
            conn.execute("UPDATE awa.jobs SET run_lease = run_lease + 1 WHERE id = %s", (job.id,))
        release.set()
        await wait_until(lambda: not worker.running)
        await asyncio.sleep(0.2)
    assert names(sample_plugin.events_of(job.id)) == ["Started"]
    assert job_row(dsn, job.id).state == "running"


@pytest.mark.asyncio
async def test_completed_duration_is_the_handler_wall_time(dsn: str, path: str) -> None:
    app = make_app()
    extra = observe(path, app)
    sample_plugin.CONFIG["sleep"] = {"started": 0.5}  # hooks' time is not the handler's
    job = insert(dsn, HookJob("ok", 0.3))
    async with running_worker(app, dsn, **extra):
        await wait_until(lambda: len(sample_plugin.events_of(job.id)) == 2)
    completed = next(
        e for e in sample_plugin.events_of(job.id) if isinstance(e, awa.JobEvent.Completed)
    )
    assert 0.3 <= completed.duration < 0.5


# -- App hooks only ----------------------------------------------------------------------
@pytest.mark.asyncio
async def test_app_hooks_run_sequentially_in_registration_order(dsn: str) -> None:
    app = make_app()
    log: list[str] = []

    async def first(event: Any) -> None:
        log.append(f"first>{event.name}")
        await asyncio.sleep(0.1)
        log.append(f"first<{event.name}")

    def second(event: Any) -> None:  # sync: runs in a thread
        log.append(f"second>{event.name}")
        time.sleep(0.05)
        log.append(f"second<{event.name}")

    async def third(event: Any) -> None:
        log.append(f"third {event.name}")

    app.on_event(HookJob)(first)
    app.on_event_kind("hook_job", second)
    app.on_event(HookJob)(third)
    job = insert(dsn, HookJob("retry_after"))
    async with running_worker(app, dsn):
        await wait_until(lambda: len(log) == 10)
    assert job_row(dsn, job.id).state == "retryable"
    for name in ("started", "retried"):
        assert [e for e in log if e.endswith(name)] == [
            f"first>{name}",
            f"first<{name}",
            f"second>{name}",
            f"second<{name}",
            f"third {name}",
        ]


@pytest.mark.asyncio
async def test_sync_and_async_hooks_both_get_typed_and_untyped_args(dsn: str) -> None:
    app = make_app()
    seen: list[tuple[str, str, Any]] = []

    @app.on_event(HookJob)
    def sync_typed(event: Any) -> None:
        seen.append(("sync_typed", event.name, event.args))

    @app.on_event(HookJob)
    async def async_typed(event: Any) -> None:
        seen.append(("async_typed", event.name, event.args))

    @app.on_event_kind("hook_job")
    def sync_untyped(event: Any) -> None:
        seen.append(("sync_untyped", event.name, event.args))

    @app.on_event_kind("hook_job")
    async def async_untyped(event: Any) -> None:
        seen.append(("async_untyped", event.name, event.args))

    job = insert(dsn, HookJob("ok"))
    async with running_worker(app, dsn):
        await wait_until(lambda: len(seen) == 8)
    completed = {hook: args for (hook, name, args) in seen if name == "completed"}
    assert completed == {
        "sync_typed": HookJob("ok"),
        "async_typed": HookJob("ok"),
        "sync_untyped": {"mode": "ok", "value": 0.0},
        "async_untyped": {"mode": "ok", "value": 0.0},
    }
    assert job_row(dsn, job.id).state == "completed"


@pytest.mark.asyncio
async def test_each_hook_gets_its_own_args_rebuilt_from_the_committed_row(dsn: str) -> None:
    app = awa.App()
    seen: list[Any] = []

    @app.task(HookJob)
    async def mutate(job: awa.Job) -> None:
        job.args.mode = "mutated by the handler"

    @app.on_event(HookJob)
    def vandal(event: Any) -> None:
        event.args.value = 99.0

    @app.on_event(HookJob)
    def observer(event: Any) -> None:
        seen.append((event.name, event.args))

    insert(dsn, HookJob("ok"))
    async with running_worker(app, dsn):
        await wait_until(lambda: len(seen) == 2)
    assert [args for (_, args) in seen] == [HookJob("ok"), HookJob("ok")]


@pytest.mark.asyncio
async def test_typed_hook_is_skipped_with_a_warning_when_args_do_not_rebuild(
    dsn: str, caplog: pytest.LogCaptureFixture
) -> None:
    app = make_app()
    typed: list[Any] = []
    untyped: list[Any] = []

    @app.on_event(HookJob)
    def typed_hook(event: Any) -> None:
        typed.append(event)

    app.on_event_kind("hook_job", untyped.append)
    host = build_plugin_host(["tests.integration.plugins.sample_plugin"], entry_points=False)
    with awa.Client(dsn) as client:
        job = client.insert({"unexpected": 1}, kind="hook_job")
    with caplog.at_level(logging.WARNING, logger="awa.dispatch"):
        async with running_worker(app, dsn, plugins=host):
            await wait_until(
                lambda: len(sample_plugin.events_of(job.id)) == 2 and len(untyped) == 2
            )
    assert typed == []
    assert sorted(names(untyped)) == ["Exhausted", "Started"]  # the handler fails terminally
    assert all(e.args == {"unexpected": 1} for e in untyped + sample_plugin.events_of(job.id))
    skipped = [r for r in caplog.records if getattr(r, "action", None) == "hook_skipped"]
    assert len(skipped) == 2
    assert all("typed_hook" in r.getMessage() and "HookJob" in r.getMessage() for r in skipped)
