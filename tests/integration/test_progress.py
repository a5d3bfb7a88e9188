"""Progress (architecture §11): ``job.set_progress`` throttled to one write a second per job and
batched across jobs, always written with the outcome, kept across a retry so the next attempt
resumes from its checkpoint, validated in the handler; ``JobRow.progress`` and ``awa job show``."""

from __future__ import annotations

import asyncio

import psycopg
import pytest

import awa_cli as awa
from awa_cli.testing import HandlerJob, run_handler
from tests.apps.progress_app import BadProgress, Spam, Steps, app, bad_progress, steps
from tests.helpers import AwaRunner, job_row, job_state_is, running_worker, wait_until

COUNT_WRITES = """
CREATE SCHEMA IF NOT EXISTS awa_test;
CREATE TABLE awa_test.progress_writes (job_id bigint, at timestamptz DEFAULT clock_timestamp());
CREATE FUNCTION awa_test.count_progress() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN INSERT INTO awa_test.progress_writes (job_id) VALUES (NEW.id); RETURN NULL; END $$;
CREATE TRIGGER count_progress AFTER UPDATE ON awa.jobs FOR EACH ROW
    WHEN (OLD.progress IS DISTINCT FROM NEW.progress) EXECUTE FUNCTION awa_test.count_progress();
"""


def progress_writes(dsn: str) -> dict[int, int]:
    with psycopg.connect(dsn) as conn:
        rows = conn.execute(
            "SELECT job_id, count(*) FROM awa_test.progress_writes GROUP BY 1"
        ).fetchall()
    return dict(rows)


@pytest.mark.integration
@pytest.mark.asyncio
async def test_many_calls_are_written_at_most_once_a_second_and_with_the_outcome(
    dsn: str,
) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(COUNT_WRITES)
    async with awa.AsyncClient(dsn) as client:
        jobs = [await client.insert(Spam(calls=300, seconds=3.0)) for _ in range(3)]
        async with running_worker(app, dsn, heartbeat_interval=5.0) as worker:
            seen_running: list[float] = []

            async def midway() -> bool:
                row = await client.get_job(jobs[0].id)
                if row.state == "running" and row.progress is not None:
                    seen_running.append(row.progress["percent"])
                return row.state == "completed"

            await wait_until(midway, timeout=30, interval=0.2)
            await wait_until(lambda: all(job_row(dsn, j.id).state == "completed" for j in jobs))
            flushes = worker.progress.writes
        writes = progress_writes(dsn)
        for job in jobs:
            row = await client.get_job(job.id)
            # the outcome carried the last value reported
            assert row.progress is not None and row.progress["percent"] == 100
            assert row.progress["message"] == "call 300" and row.progress["checkpoint"] == {
                "n": 300
            }
            # 300 calls over ~3 s: about one write a second, plus the outcome's
            assert 2 <= writes[job.id] <= 6, writes
    # progress was visible while the job ran, and the flush batched the three jobs together
    assert seen_running and min(seen_running) < 100
    assert flushes <= 6, flushes


@pytest.mark.integration
@pytest.mark.asyncio
async def test_progress_is_kept_across_a_retry_and_the_next_attempt_resumes(dsn: str) -> None:
    async with awa.AsyncClient(dsn) as client:
        job = await client.insert(Steps(total=10, fail_after=4))
        async with running_worker(app, dsn):
            await wait_until(job_state_is(client, job.id, "retryable"))
            failed = await client.get_job(job.id)
            # the failing attempt's outcome wrote its last checkpoint
            assert failed.progress is not None
            assert failed.progress["checkpoint"] == {"done": 4} and failed.progress["percent"] == 40
            await client.retry(job.id)  # run the retry now instead of after its backoff

            await wait_until(job_state_is(client, job.id, "completed"))
        row = await client.get_job(job.id)
    assert row.output == {"resumed_from": 4, "attempt": 2}
    assert row.progress is not None and row.progress["checkpoint"] == {"done": 10}


@pytest.mark.integration
@pytest.mark.asyncio
async def test_bad_values_raise_validation_errors_naming_the_field_and_store_nothing(
    dsn: str,
) -> None:
    async with awa.AsyncClient(dsn) as client:
        job = await client.insert(BadProgress())
        async with running_worker(app, dsn):
            await wait_until(job_state_is(client, job.id, "completed"))
        row = await client.get_job(job.id)
    assert row.output == {"refused": ["percent", "percent", "message", "checkpoint", "progress"]}
    assert row.progress is not None
    assert (row.progress["percent"], row.progress["message"], row.progress["checkpoint"]) == (
        50,
        "fine",
        {},
    )


def test_handler_job_records_progress_for_unit_tests() -> None:
    job = HandlerJob(Steps(total=3))
    result = run_handler(steps, job)
    assert result.outcome == "completed"
    assert job.progress is not None and job.progress["checkpoint"] == {"done": 3}
    assert job.progress["percent"] == 100 and job.progress["message"] == "step 3"
    resumed = HandlerJob(
        Steps(total=3), progress={"percent": 66, "message": "", "checkpoint": {"done": 2}}
    )
    run_handler(steps, resumed)
    assert resumed.output == {"resumed_from": 2, "attempt": 1}
    bad = HandlerJob(BadProgress())
    run_handler(bad_progress, bad)
    assert bad.output == {"refused": ["percent", "percent", "message", "checkpoint", "progress"]}


@pytest.mark.integration
def test_awa_job_show_prints_progress(dsn: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AWA_DATABASE_URL", dsn)
    with awa.Client(dsn) as client:
        job = client.insert(Steps(total=4))
    asyncio.run(_run_one(dsn, job.id))
    result = AwaRunner().awa("job", "show", str(job.id))
    assert result.exit_code == 0, result.output
    assert 'progress: 100.0% step 4 (checkpoint {"done": 4})' in result.stdout


async def _run_one(dsn: str, job_id: int) -> None:
    async with running_worker(app, dsn):
        await wait_until(lambda: job_row(dsn, job_id).state == "completed")
