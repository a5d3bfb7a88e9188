"""``awa_cli.testing`` used the way an application's own tests would use it: unit tests of a
handler with ``HandlerJob``, integration tests with ``AwaTestClient`` / ``AsyncAwaTestClient``,
and the opt-in pytest plugin (``awa_dsn`` / ``awa_test_client``) in a separate pytest run."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

import awa_cli as awa
from awa_cli.testing import (
    AsyncAwaTestClient,
    AwaTestClient,
    HandlerJob,
    run_handler,
    run_handler_async,
)
from tests.helpers import ROOT

# -- "the application": myapp/jobs.py ----------------------------------------------------

app = awa.App()
hook_log: list[str] = []


@dataclass
class ImportOrder:
    order_id: int
    mode: str = "ok"


@dataclass
class ShipOrder:
    order_id: int
    warehouse: str


@app.task(ImportOrder, queue="imports")
async def import_order(job: awa.Job) -> awa.JobResult | None:
    match job.args.mode:
        case "ok":
            warehouse = "north" if job.args.order_id % 2 else "south"
            job.enqueue_on_completion(ShipOrder(job.args.order_id, warehouse), unique_opts={})
            job.set_output({"warehouse": warehouse})
            return None
        case "flaky":
            raise ConnectionError("upstream down")
        case "bad":
            raise awa.TerminalError("no such order")
        case "later":
            return awa.Snooze(60)
        case "gone":
            return awa.Cancel("order withdrawn")
        case "external":
            return awa.WaitForCallback(await job.register_callback(timeout=600))
        case "sloppy":
            try:
                job.enqueue_on_completion(ShipOrder(job.args.order_id, "x"), priority=7)
            except awa.StagingError:
                pass  # swallowed: the attempt still fails
            return None
    raise AssertionError(job.args.mode)


@app.task(ShipOrder, queue="shipping")
def ship_order(job: awa.Job) -> None:  # a plain def: runs in a thread
    job.set_output({"shipped": job.args.order_id})


@app.on_event(ShipOrder)
def ship_hook(event: Any) -> None:
    hook_log.append(type(event).__name__)


# -- unit tests: HandlerJob, no database -------------------------------------------------


@pytest.mark.asyncio
async def test_unit_handler_stages_its_follow_up_and_output() -> None:
    job = HandlerJob(ImportOrder(7))
    assert await import_order(job) is None
    [staged] = job.staged
    assert staged.args == ShipOrder(7, "north") and staged.options == {"unique_opts": {}}
    assert staged.kind == "ship_order" and staged.queue == "default"
    assert job.output == {"warehouse": "north"}
    assert job.kind == "import_order" and job.attempt == 1 and job.queue == "default"


def test_unit_with_app_resolves_kinds_and_queues_like_a_worker() -> None:
    job = HandlerJob(ImportOrder(8), app=app, attempt=3, max_attempts=5, metadata={"tenant": "t1"})
    result = run_handler(import_order, job)
    assert result.outcome == "completed"
    assert job.queue == "imports" and job.attempt == 3 and job.metadata == {"tenant": "t1"}
    [staged] = job.staged
    assert staged.queue == "shipping" and staged.args == ShipOrder(8, "south")


def test_unit_outcomes_are_decided_as_in_a_worker() -> None:
    assert run_handler(import_order, HandlerJob(ImportOrder(1, "flaky"))).outcome == "retryable"
    assert (
        run_handler(import_order, HandlerJob(ImportOrder(1, "flaky"), attempt=25)).outcome
        == "failed"
    )
    assert run_handler(import_order, HandlerJob(ImportOrder(1, "bad"))).outcome == "failed"
    assert run_handler(import_order, HandlerJob(ImportOrder(1, "later"))).outcome == "scheduled"
    assert run_handler(import_order, HandlerJob(ImportOrder(1, "gone"))).outcome == "cancelled"
    sync = HandlerJob(ShipOrder(3, "north"))
    assert run_handler(ship_order, sync).outcome == "completed" and sync.output == {"shipped": 3}


@pytest.mark.asyncio
async def test_unit_a_swallowed_staging_error_is_visible_and_fails_the_attempt() -> None:
    job = HandlerJob(ImportOrder(1, "sloppy"))
    result = await run_handler_async(import_order, job)
    assert job.staged == [] and isinstance(job.staging_error, awa.StagingError)
    assert result.outcome == "failed" and result.error.startswith(
        "StagingError: follow-up rejected: priority"
    )


def test_unit_limits_and_sealing_are_the_workers() -> None:
    job = HandlerJob(ImportOrder(1))
    for n in range(16):
        job.enqueue_on_completion(ShipOrder(n, "w"))
    with pytest.raises(awa.StagingError, match="16"):
        job.follow_ups().enqueue_on_completion(ShipOrder(16, "w"))
    assert len(job.staged) == 16
    sealed = HandlerJob(ImportOrder(1))
    sealed.seal()
    with pytest.raises(awa.StagingError, match="sealed"):
        sealed.enqueue_on_completion(ShipOrder(1, "w"))


def test_unit_row_fields() -> None:
    with pytest.raises(awa.ValidationError, match="kind"):
        HandlerJob({"order_id": 1})
    raw = HandlerJob({"order_id": 1}, kind="import_order", id=99)
    assert raw.id == 99 and raw.args == {"order_id": 1} and raw.row.args == {"order_id": 1}
    with pytest.raises(TypeError, match="colour"):
        HandlerJob(ImportOrder(1), colour="red")
    assert HandlerJob(ImportOrder(1)).id != HandlerJob(ImportOrder(1)).id


# -- integration tests: AwaTestClient against PostgreSQL ----------------------------------


@pytest.mark.integration
def test_work_one_runs_the_handler_through_the_real_core(dsn: str) -> None:
    hook_log.clear()
    with AwaTestClient(dsn, app) as tc:
        order = tc.insert(ImportOrder(5))
        assert order.queue == "imports"
        result = tc.work_one(ImportOrder)
        assert result.outcome == "completed" and result.job.id == order.id
        assert result.output == {"warehouse": "north"}
        [ship_id] = result.follow_up_ids
        shipped = tc.work_one(ShipOrder)
        assert shipped.outcome == "completed" and shipped.job.id == ship_id
        assert shipped.job.queue == "shipping" and shipped.job.args == {
            "order_id": 5,
            "warehouse": "north",
        }
        assert hook_log == ["Started", "Completed"]  # hooks ran before work_one returned
        assert tc.work_one(ShipOrder).outcome == "no_job"
        # the same unique follow-up again: skipped and counted as a duplicate
        tc.insert(ImportOrder(5))
        again = tc.work_one(ImportOrder)
        assert again.follow_up_ids == [] and again.duplicates == 1
        assert tc.aio.core.counters.snapshot() == {"inserted": 1, "duplicate": 1, "discarded": 0}


@pytest.mark.integration
def test_work_one_outcomes(dsn: str) -> None:
    with AwaTestClient(dsn, app) as tc:
        expected = {
            "flaky": "retryable",
            "bad": "failed",
            "later": "scheduled",
            "gone": "cancelled",
            "external": "waiting_external",
            "sloppy": "failed",
        }
        for n, mode in enumerate(expected, start=1):
            tc.insert(ImportOrder(n, mode))
        got = {}
        for _ in expected:
            result = tc.work_one(ImportOrder)
            got[result.job.args["mode"]] = result.outcome
        assert got == expected
        assert tc.work_one(ImportOrder).outcome == "no_job"  # retryable/scheduled are not due yet


@pytest.mark.integration
def test_work_one_with_a_given_handler_a_kind_string_a_queue_and_a_client(dsn: str) -> None:
    def stub(job: awa.Job) -> awa.JobResult:
        job.enqueue_on_completion(ShipOrder(job.args.order_id, "stub"))
        return awa.RetryAfter(0)

    with awa.Client(dsn) as client, AwaTestClient(client, app) as tc:
        client.insert(ImportOrder(1), queue="elsewhere")
        assert tc.work_one(ImportOrder, queue="imports").outcome == "no_job"
        result = tc.work_one("import_order", stub, queue="elsewhere")
        assert (
            result.outcome == "retryable" and result.follow_up_ids == []
        )  # only Completed inserts
        assert tc.work_one(ImportOrder).outcome == "completed"  # the app's own handler this time
        assert tc.insert(ImportOrder(3)).queue == "imports"  # resolved from the test client's app
        assert client.list_jobs(kind="ship_order")[0].args == {"order_id": 1, "warehouse": "north"}


@pytest.mark.integration
@pytest.mark.asyncio
async def test_async_test_client(dsn: str) -> None:
    async with AsyncAwaTestClient(dsn, app) as tc:
        await tc.insert(ImportOrder(2))
        result = await tc.work_one(ImportOrder)
        assert result.outcome == "completed" and len(result.follow_up_ids) == 1
    with AwaTestClient(dsn, app) as sync_tc:  # the sync one is awaitable from another loop too
        sync_tc.insert(ImportOrder(4))
        assert (await sync_tc.work_one_async(ImportOrder)).outcome == "completed"


# -- the opt-in pytest plugin --------------------------------------------------------------

USER_CONFTEST = """
import pytest
from myapp import app

@pytest.fixture
def awa_app():
    return app
"""

USER_APP = """
from dataclasses import dataclass
import awa_cli as awa

app = awa.App()

@dataclass
class Greet:
    name: str

@dataclass
class Log:
    line: str

@app.task(Greet)
async def greet(job):
    job.enqueue_on_completion(Log(f"hello {job.args.name}"))
    job.set_output({"greeted": job.args.name})
"""

USER_TESTS = """
import psycopg
from myapp import Greet

def test_fresh_database_each_time_one(awa_test_client, awa_dsn):
    awa_test_client.insert(Greet("ada"))
    result = awa_test_client.work_one(Greet)
    assert result.outcome == "completed" and result.output == {"greeted": "ada"}
    assert len(result.follow_up_ids) == 1
    with psycopg.connect(awa_dsn) as conn:
        assert conn.execute("SELECT count(*) FROM awa.jobs").fetchone()[0] == 2

def test_fresh_database_each_time_two(awa_test_client):
    assert awa_test_client.work_one(Greet).outcome == "no_job"

def test_without_fixtures_needs_no_database():
    assert True
"""


def _run_user_suite(
    tmp_path: Path, *args: str, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    (tmp_path / "myapp.py").write_text(textwrap.dedent(USER_APP), encoding="utf-8")
    (tmp_path / "conftest.py").write_text(textwrap.dedent(USER_CONFTEST), encoding="utf-8")
    (tmp_path / "test_user.py").write_text(textwrap.dedent(USER_TESTS), encoding="utf-8")
    (tmp_path / "pytest.ini").write_text("[pytest]\n", encoding="utf-8")
    full_env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "AWA_"))}
    full_env.update(env or {})
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *args],
        cwd=tmp_path,
        env=full_env,
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.mark.integration
def test_pytest_plugin_gives_each_test_a_fresh_database(tmp_path: Path, pg_server: Any) -> None:
    import psycopg

    url = pg_server.dsn_for("postgres")

    def database_names() -> set[str]:
        with psycopg.connect(url) as conn:
            return {r[0] for r in conn.execute("SELECT datname FROM pg_database").fetchall()}

    before = database_names()  # this suite's own template (it uses the same plugin) is kept
    done = _run_user_suite(tmp_path, "--awa-database-url", url)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "3 passed" in done.stdout
    # the environment variable works too, and the template and test databases are gone
    done = _run_user_suite(tmp_path, "-k", "one", env={"AWA_TEST_DATABASE_URL": url})
    assert done.returncode == 0, done.stdout + done.stderr
    left = database_names() - before
    assert [n for n in left if n.startswith(("awa_test_", "awa_test_tmpl_"))] == []


def test_pytest_plugin_is_opt_in(tmp_path: Path) -> None:
    done = _run_user_suite(tmp_path)
    assert done.returncode == 1, done.stdout + done.stderr
    assert "1 passed" in done.stdout and "2 error" in done.stdout  # only the fixture users fail
    assert "--awa-database-url" in done.stdout and "AWA_TEST_DATABASE_URL" in done.stdout


def test_pytest_plugin_is_a_pytest11_entry_point() -> None:
    import tomllib

    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    assert pyproject["project"]["entry-points"]["pytest11"] == {"awa": "awa_cli.testing_plugin"}


@pytest.mark.integration
def test_a_parked_job_resolved_through_the_test_client(dsn: str) -> None:
    with AwaTestClient(dsn, app) as tc:
        tc.insert(ImportOrder(1, "external"))
        parked = tc.work_one(ImportOrder)
        assert parked.outcome == "waiting_external" and parked.job.callback_id is not None
        done = tc.complete_external(parked.job.callback_id, {"ok": True})
        assert done.state == "completed" and done.callback_result == {"ok": True}


def test_awa_testing_is_reachable_from_the_package() -> None:
    import awa_cli

    assert awa_cli.testing.HandlerJob is HandlerJob
