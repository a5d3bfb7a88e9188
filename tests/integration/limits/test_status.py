"""Why an available job is not running (Client, ``awa job show``), the announced limits and
the leader's ``awa_limit_waiting_jobs`` gauge (architecture §13)."""

from __future__ import annotations

import asyncio
import json
from datetime import datetime, timedelta, UTC
from pathlib import Path

import psycopg
import pytest
from prometheus_client import generate_latest

import awa_cli as awa
from awa_cli.db.limits import publish, waiting
from awa_cli.limits import Limit
from awa_cli.plugins.manager import build_plugin_host
from awa_cli.plugins.prometheus import PrometheusPlugin
from tests.helpers import AwaRunner, running_worker, wait_until

pytestmark = [pytest.mark.integration]

PER_TENANT = Limit("per_tenant", key="args.tenant", max_running=1, kind="sync")
RATED = Limit(
    "rated", key="kind", max_running=50, kind="call_api", rate_count=2, rate_window=3600.0
)


async def _publish(dsn: str, *limits: Limit) -> None:
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
        await publish(conn, limits)


def _run(dsn: str, sql: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(sql)  # type: ignore[arg-type]


@pytest.mark.asyncio
async def test_why_not_running_names_each_reason(dsn: str) -> None:
    await _publish(dsn, PER_TENANT, RATED)
    async with awa.AsyncClient(dsn) as client:
        later = await client.insert(
            {"tenant": "a"}, kind="sync", run_at=datetime.now(UTC) + timedelta(hours=1)
        )
        first = await client.insert({"tenant": "a"}, kind="sync")
        second = await client.insert({"tenant": "a"}, kind="sync")
        other = await client.insert({"tenant": "b"}, kind="sync", concurrency_key="own")
        assert await client.why_not_running(first.id) is None  # nothing holds it back
        assert (await client.why_not_running(later.id) or "").startswith("scheduled for ")
        _run(dsn, f"UPDATE awa.jobs SET state = 'running' WHERE id = {first.id}")
        reason = await client.why_not_running(second.id)
        assert reason == "key 'a' of limit per_tenant at max_running (1/1 running)"
        status = await client.limit_status(other.id)
        assert (status["limit_name"], status["key"], status["concurrency_key"]) == (
            "per_tenant",
            "own",
            "own",
        )
        assert status["reason"] is None
        calls = [await client.insert({"n": i}, kind="call_api") for i in range(3)]
        _run(
            dsn,
            "INSERT INTO awa.limit_starts VALUES ('rated', 'call_api', now()),"
            " ('rated', 'call_api', now() - interval '10 minutes')",
        )
        reason = await client.why_not_running(calls[0].id)
        assert reason is not None and reason.startswith(
            "key 'call_api' of limit rated rate-limited until "
        )
        until = datetime.fromisoformat(reason.rsplit(" ", 1)[1])
        assert timedelta(minutes=49) < until - datetime.now(UTC) < timedelta(minutes=51)
        _run(dsn, "INSERT INTO awa.queues (name, paused) VALUES ('default', true)")
        assert await client.why_not_running(second.id) == "queue paused"
        with pytest.raises(awa.JobNotFound):
            await client.why_not_running(10**9)
    with awa.Client(dsn) as sync_client:
        assert sync_client.why_not_running(second.id) == "queue paused"


@pytest.mark.asyncio
async def test_awa_job_show_says_why(dsn: str, monkeypatch: pytest.MonkeyPatch) -> None:
    await _publish(dsn, PER_TENANT)
    async with awa.AsyncClient(dsn) as client:
        held = await client.insert({"tenant": "a"}, kind="sync")
        blocked = await client.insert({"tenant": "a"}, kind="sync")
    _run(dsn, f"UPDATE awa.jobs SET state = 'running' WHERE id = {held.id}")
    monkeypatch.setenv("AWA_DATABASE_URL", dsn)
    runner = AwaRunner()
    result = await asyncio.to_thread(runner.awa, "job", "show", str(blocked.id))
    assert result.exit_code == 0, result.output
    assert "waiting: key 'a' of limit per_tenant at max_running (1/1 running)" in result.output
    result = await asyncio.to_thread(runner.awa, "job", "show", str(blocked.id), "--json")
    data = json.loads(result.output)
    assert data["why_not_running"].startswith("key 'a' of limit per_tenant")
    assert data["limit"] == {"name": "per_tenant", "key": "a", "running": 1, "max_running": 1}


@pytest.mark.asyncio
async def test_awa_job_enqueue_takes_a_concurrency_key(
    dsn: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AWA_DATABASE_URL", dsn)
    runner = AwaRunner()
    result = await asyncio.to_thread(
        runner.awa, "job", "enqueue", "sync", "--concurrency-key", "tenant-7", "--json"
    )
    assert result.exit_code == 0, result.output
    with psycopg.connect(dsn) as conn:
        assert conn.execute("SELECT concurrency_key FROM awa.jobs").fetchall() == [("tenant-7",)]
    result = await asyncio.to_thread(
        runner.awa, "job", "enqueue", "sync", "--concurrency-key", "x" * 201
    )
    assert result.exit_code == 2
    assert "concurrency_key" in result.output and "Traceback" not in result.output


@pytest.mark.asyncio
async def test_the_leader_counts_jobs_waiting_on_each_limit(dsn: str, tmp_path: Path) -> None:
    prometheus = PrometheusPlugin(None)
    host = build_plugin_host(
        entry_points=False, extra_builtins=[("prometheus", lambda: prometheus)]
    )
    app = awa.App()
    release = asyncio.Event()

    @app.task(kind="sync")
    async def sync(job: awa.Job) -> None:
        await release.wait()

    async with awa.AsyncClient(dsn) as client:
        for _ in range(4):
            await client.insert({"tenant": "a"}, kind="sync")
        await client.insert({"tenant": "b"}, kind="sync")
    async with running_worker(
        app,
        dsn,
        {"default": 10},
        limits=(PER_TENANT,),
        plugins=host,
        rescue_interval=0.1,
        leader_election_interval=0.1,
        shutdown_timeout=1,
    ):
        # a and b run one each; the other three of a wait on the limit
        def gauge() -> bool:
            text = generate_latest(prometheus.registry).decode()
            return 'awa_limit_waiting_jobs{limit="per_tenant"} 3.0' in text

        await wait_until(gauge, timeout=15)
        release.set()
        await wait_until(
            lambda: (
                'awa_limit_waiting_jobs{limit="per_tenant"} 0.0'
                in generate_latest(prometheus.registry).decode()
            ),
            timeout=15,
        )
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
        assert await waiting(conn) == {"per_tenant": 0}
