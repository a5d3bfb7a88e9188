"""Waiting for a job's result (architecture §11): ``wait_for_job`` is woken by the finishing
transaction's notification, from another process, long before its poll backstop; it times out,
refuses an unknown id, and a thousand waiters share one LISTEN connection; ``awa job wait``'s
exit codes. History: ``attempted_by``, ``awa.trigger_id`` and the timeline (text and JSON)."""

from __future__ import annotations

import asyncio
import json
import os
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest

import awa_cli as awa
from tests.apps.progress_app import Gate, Report, Steps, app
from tests.helpers import (
    AwaRunner,
    ROOT,
    job_state_is,
    running_worker,
    wait_until,
    spawn_worker,
    stop_group,
)

pytestmark = [pytest.mark.integration]

LONG_BACKSTOP = 120.0  # far longer than any wait below: only a notification can wake them


@pytest.fixture
def worker_process(dsn: str, tmp_path: Path) -> Iterator[subprocess.Popen[bytes]]:
    """A real `awa worker` process running tests.apps.progress_app."""
    config = tmp_path / "awa.toml"
    config.write_text(
        '[app]\nmodules = ["tests.apps.progress_app"]\n[queues.default]\nconcurrency = 5\n'
    )
    env = {**os.environ, "AWA_DATABASE_URL": dsn, "PYTHONPATH": str(ROOT)}
    log = (tmp_path / "worker.log").open("w")
    proc = spawn_worker(config, log, env)
    try:
        yield proc
    finally:
        stop_group(proc, timeout=20)
        log.close()


@pytest.mark.asyncio
async def test_woken_by_a_completion_in_another_process_before_the_backstop(
    dsn: str, tmp_path: Path, worker_process: subprocess.Popen[bytes]
) -> None:
    flag = tmp_path / "open"
    async with awa.AsyncClient(dsn) as client:
        client._waiters.poll_interval = LONG_BACKSTOP
        job = await client.insert(Gate(str(flag)))

        await wait_until(job_state_is(client, job.id, "running"), timeout=30)
        waiter = asyncio.create_task(client.wait_for_job(job.id, timeout=60))
        await asyncio.sleep(0.3)  # the waiter is registered and has read the job once
        assert not waiter.done()
        checks_before = client._waiters.checks
        started = time.monotonic()
        flag.touch()
        row = await waiter
        elapsed = time.monotonic() - started
    assert row.state == "completed" and row.output == {"opened": str(flag)}
    assert elapsed < 10, elapsed  # the backstop would take 120 s
    assert client._waiters.checks - checks_before == 1  # one read, on the notification
    # the worker process recorded itself on the attempt
    host, pid = row.attempted_by.rsplit(":", 1)  # type: ignore[union-attr]
    assert host == socket.gethostname() and int(pid) != os.getpid()


@pytest.mark.asyncio
async def test_a_real_worker_process_resumes_from_the_checkpoint_after_a_retry(
    dsn: str, worker_process: subprocess.Popen[bytes]
) -> None:
    async with awa.AsyncClient(dsn) as client:
        job = await client.insert(Steps(total=6, fail_after=3))
        # attempt 1 fails after 3 steps; the retry (after its ~2 s backoff) resumes at step 3
        row = await client.wait_for_job(job.id, timeout=60)
    assert row.state == "completed" and row.attempt == 2
    assert row.output == {"resumed_from": 3, "attempt": 2}
    assert row.progress is not None and row.progress["checkpoint"] == {"done": 6}
    assert row.errors[0]["error"] == "RuntimeError: failed at step 3"
    assert row.errors[0]["worker"] == row.attempted_by


@pytest.mark.asyncio
async def test_timeout_unknown_id_and_an_already_finished_job(dsn: str, tmp_path: Path) -> None:
    async with awa.AsyncClient(dsn) as client:
        client._waiters.poll_interval = LONG_BACKSTOP
        job = await client.insert(Gate(str(tmp_path / "never")))
        with pytest.raises(TimeoutError):
            await client.wait_for_job(job.id, timeout=0.3)
        with pytest.raises(awa.JobNotFound):
            await client.wait_for_job(job.id + 1000, timeout=5)
        cancelled = await client.cancel(job.id)
        row = await client.wait_for_job(job.id, timeout=5)
    assert row.state == "cancelled" and row.finalized_at == cancelled.finalized_at


@pytest.mark.asyncio
async def test_a_dead_lettered_job_counts_as_failed(dsn: str, tmp_path: Path) -> None:
    from awa_cli.db.statements import SQL

    async with awa.AsyncClient(dsn) as client:
        client._waiters.poll_interval = LONG_BACKSTOP
        job = await client.insert(Gate(str(tmp_path / "never")))
        waiter = asyncio.create_task(client.wait_for_job(job.id, timeout=20))
        await asyncio.sleep(0.3)
        with psycopg.connect(dsn, autocommit=True) as conn, conn.transaction():
            conn.execute("UPDATE awa.jobs SET state = 'failed' WHERE id = %s", (job.id,))
            conn.execute(
                SQL["dead_letter_move"],
                {"ids": [job.id], "reasons": ["manual"], "only_flagged": False},
            )
        row = await waiter
    assert row.state == "failed" and isinstance(row, awa.DeadLetter)


@pytest.mark.asyncio
async def test_a_thousand_waiters_share_one_listen_connection(dsn: str, tmp_path: Path) -> None:
    flag = tmp_path / "open"
    async with awa.AsyncClient(dsn) as client:
        client._waiters.poll_interval = LONG_BACKSTOP
        jobs = [await client.insert(Gate(str(flag))) for _ in range(10)]
        waiters = [
            asyncio.create_task(client.wait_for_job(jobs[i % 10].id, timeout=60))
            for i in range(1000)
        ]
        await asyncio.sleep(0.5)
        with psycopg.connect(dsn) as conn:
            listening = conn.execute(
                "SELECT count(*) FROM pg_stat_activity"
                " WHERE datname = current_database() AND query = 'LISTEN \"awa_job_done\"'"
            ).fetchone()
        assert listening == (1,)
        flag.touch()
        async with running_worker(app, dsn):
            rows = await asyncio.gather(*waiters)
    assert {r.state for r in rows} == {"completed"} and len(rows) == 1000


def test_awa_job_wait_exit_codes(dsn: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AWA_DATABASE_URL", dsn)
    runner = AwaRunner()
    flag = tmp_path / "open"
    with awa.Client(dsn) as client:
        ok, bad, never = (
            client.insert(Gate(str(flag))),
            client.insert(Gate(str(flag), fail=True)),
            client.insert(Gate(str(tmp_path / "never"))),
        )
    flag.touch()
    asyncio.run(_work_until_finished(dsn, [ok.id, bad.id]))
    with awa.Client(dsn) as client:  # the synchronous twins
        assert client.wait_for_job(ok.id, timeout=5).output == {"opened": str(flag)}
        with pytest.raises(TimeoutError):
            client.wait_for_job(never.id, timeout=0.2)
        assert [a.outcome for a in client.job_history(bad.id).attempts] == ["failed"]
    done = runner.awa("job", "wait", str(ok.id), "--json")
    assert done.exit_code == 0, done.output
    assert json.loads(done.stdout)["output"] == {"opened": str(flag)}
    failed = runner.awa("job", "wait", str(bad.id))
    assert failed.exit_code == 1 and "state: failed" in failed.stdout
    timed_out = runner.awa("job", "wait", str(never.id), "--timeout", "200ms")
    assert timed_out.exit_code == 124 and "did not finish within 200ms" in timed_out.stderr
    unknown = runner.awa("job", "wait", "987654")
    assert unknown.exit_code == 4 and "not found" in unknown.stderr
    bad_timeout = runner.awa("job", "wait", str(ok.id), "--timeout", "soon")
    assert bad_timeout.exit_code == 2 and "--timeout" in bad_timeout.stderr


async def _work_until_finished(dsn: str, ids: list[int]) -> None:
    async with awa.AsyncClient(dsn) as client, running_worker(app, dsn):
        for job_id in ids:
            await client.wait_for_job(job_id, timeout=30)


@pytest.mark.asyncio
async def test_history_attempts_worker_follow_ups_and_trigger(
    dsn: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with awa.AsyncClient(dsn) as client:
        job = await client.insert(Steps(total=5, fail_after=2))
        async with running_worker(app, dsn):
            await wait_until(job_state_is(client, job.id, "retryable"))
            await client.retry(job.id)
            await client.wait_for_job(job.id, timeout=30)
            history = await client.job_history(job.id)
            [follow_up] = history.follow_ups
            await client.wait_for_job(follow_up.id, timeout=30)
        child = await client.job_history(follow_up.id)
    me = f"{socket.gethostname()}:{os.getpid()}"
    first, second = history.attempts
    assert (first.attempt, first.outcome, first.worker) == (1, "retried", me)
    assert first.error == "RuntimeError: failed at step 2" and first.started_at is not None
    assert (second.attempt, second.outcome, second.worker) == (2, "completed", me)
    assert second.ended_at == history.job.finalized_at.isoformat()  # type: ignore[union-attr]
    assert follow_up.kind == "report"
    assert follow_up.state in ("available", "running", "completed")  # the worker runs it
    assert child.job.metadata["awa.trigger_id"] == job.id
    assert child.trigger is not None and (child.trigger.id, child.trigger.kind) == (job.id, "steps")
    assert child.trigger.state == "completed"

    monkeypatch.setenv("AWA_DATABASE_URL", dsn)
    shown = await asyncio.to_thread(AwaRunner().awa, "job", "show", str(job.id))
    assert shown.exit_code == 0, shown.output
    text = shown.stdout
    assert f"attempted_by: {me}" in text
    assert f"attempt 1 started {first.started_at} on {me}: retried" in text
    assert "RuntimeError: failed at step 2" in text
    assert f"attempt 2 started {second.started_at} on {me}: completed, ended" in text
    assert f"follow-up job {follow_up.id} (report, completed)" in text
    assert 'output   {"attempt": 2, "resumed_from": 2}' in text
    as_json = json.loads(
        (await asyncio.to_thread(AwaRunner().awa, "job", "show", str(job.id), "--json")).stdout
    )
    timeline = as_json["timeline"]
    assert [a["outcome"] for a in timeline["attempts"]] == ["retried", "completed"]
    assert timeline["follow_ups"] == [{"id": follow_up.id, "kind": "report", "state": "completed"}]
    assert timeline["progress"]["checkpoint"] == {"done": 5}
    assert timeline["trigger"] is None and as_json["attempted_by"] == me
    child_json = json.loads(
        (
            await asyncio.to_thread(AwaRunner().awa, "job", "show", str(follow_up.id), "--json")
        ).stdout
    )
    assert child_json["timeline"]["trigger"] == {
        "id": job.id,
        "kind": "steps",
        "state": "completed",
    }
    assert Report  # the follow-up's args type


@pytest.mark.asyncio
async def test_the_follow_up_query_uses_the_trigger_index(dsn: str) -> None:
    from awa_cli.db.statements import SQL

    with psycopg.connect(dsn) as conn:
        conn.execute("SET enable_seqscan = off")
        plan = "\n".join(
            r[0] for r in conn.execute("EXPLAIN " + SQL["job_follow_ups"], {"id": 1}).fetchall()
        )
    assert "jobs_trigger_id_idx" in plan and "dead_letters_trigger_id_idx" in plan
