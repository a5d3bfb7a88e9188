"""Queue depth: the leader's snapshot query on the real database, and the backlog gauges of
the Prometheus and OpenTelemetry plugins fed through the plugin host's ``awa_queue_depth``."""

from __future__ import annotations

import asyncio

import psycopg
import pytest
from prometheus_client import generate_latest

import awa_cli as awa
from awa_cli.depth import DepthGauges, QueueDepth, queue_depth, report_depth
from awa_cli.plugins.manager import build_plugin_host
from awa_cli.plugins.prometheus import PrometheusPlugin

pytestmark = pytest.mark.integration


async def snapshot(dsn: str) -> list[QueueDepth]:
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
        return await queue_depth(conn)


@pytest.mark.asyncio
async def test_snapshot_counts_available_jobs_and_the_oldest_age(dsn: str) -> None:
    async with awa.AsyncClient(dsn) as client:
        await client.insert_many([{"n": i} for i in range(3)], kind="mail", queue="email")
        await client.insert({"n": 9}, kind="report", queue="reports", run_at=_in_an_hour())
        running = await client.insert({"n": 10}, kind="report", queue="reports")
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(
            "UPDATE awa.jobs SET run_at = now() - interval '90 seconds' "
            "WHERE id = (SELECT min(id) FROM awa.jobs WHERE queue = 'email')"
        )
        conn.execute("UPDATE awa.jobs SET state = 'running' WHERE id = %s", (running.id,))
    [email] = await snapshot(dsn)  # the scheduled and the running report are no backlog
    assert (email.queue, email.available) == ("email", 3)
    assert email.oldest_available_age is not None and 89 < email.oldest_available_age < 150


@pytest.mark.asyncio
async def test_plugins_export_the_snapshot_as_gauges(dsn: str) -> None:
    otel = pytest.importorskip("awa_cli.plugins.otel")
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import InMemoryMetricReader

    prometheus = PrometheusPlugin(None)
    reader = InMemoryMetricReader()
    tracing = otel.OtelPlugin(
        tracer_provider=_tracer_provider(), meter_provider=MeterProvider(metric_readers=[reader])
    )
    host = build_plugin_host(
        entry_points=False,
        extra_builtins=[("prometheus", lambda: prometheus), ("otel", lambda: tracing)],
    )
    try:
        async with awa.AsyncClient(dsn) as client:
            await client.insert_many([{"n": i} for i in range(4)], kind="mail", queue="email")
        async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
            reported = await report_depth(conn, host)  # the leader's step
        assert [(d.queue, d.available) for d in reported] == [("email", 4)]
        text = generate_latest(prometheus.registry).decode()
        assert 'awa_queue_available_jobs{queue="email"} 4.0' in text
        assert 'awa_queue_oldest_available_age_seconds{queue="email"}' in text
        assert _gauges(reader)[("awa.queue.available", "email")] == 4

        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute("DELETE FROM awa.jobs")
        await host.queue_depth(await snapshot(dsn))  # drained: the gauge falls to zero
        text = generate_latest(prometheus.registry).decode()
        assert 'awa_queue_available_jobs{queue="email"} 0.0' in text
        assert _gauges(reader)[("awa.queue.available", "email")] == 0
    finally:
        tracing.close()


def test_a_stale_snapshot_is_dropped() -> None:
    gauges = DepthGauges(stale_after=0.05)
    assert gauges.current() == []
    gauges.update([QueueDepth("email", 2, 1.5)])
    assert gauges.current() == [QueueDepth("email", 2, 1.5)]
    asyncio.run(asyncio.sleep(0.1))  # leadership moved away: this process stops reporting
    assert gauges.current() == []


def _in_an_hour():  # type: ignore[no-untyped-def]
    from datetime import UTC, datetime, timedelta

    return datetime.now(UTC) + timedelta(hours=1)


def _tracer_provider():  # type: ignore[no-untyped-def]
    from opentelemetry.sdk.trace import TracerProvider

    return TracerProvider()


def _gauges(reader) -> dict[tuple[str, str], float]:  # type: ignore[no-untyped-def]
    found = {}
    data = reader.get_metrics_data()
    for resource in data.resource_metrics:
        for scope in resource.scope_metrics:
            for metric in scope.metrics:
                for point in metric.data.data_points:
                    if "queue" in (point.attributes or {}):
                        found[(metric.name, point.attributes["queue"])] = point.value
    return found


class _DepthRecorder:
    """A plugin recording every snapshot the leader hands to ``awa_queue_depth``."""

    def __init__(self) -> None:
        self.snapshots: list[list[QueueDepth]] = []

    @awa.hookimpl
    def awa_queue_depth(self, snapshot: list[QueueDepth]) -> None:
        self.snapshots.append(list(snapshot))


def noop_app() -> awa.App:
    """An app with one handler, "noop", that does nothing."""
    app = awa.App()

    @app.task(dict, kind="noop")
    async def noop(job: awa.Job) -> None:
        return None

    return app


@pytest.mark.asyncio
async def test_a_running_workers_leader_reports_the_depth_each_interval(dsn: str) -> None:
    # The wiring, not only the query: the maintenance leader of a real Worker takes the
    # snapshot once per interval and hands it to the plugins (computed there, not per scrape).
    from tests.helpers import running_worker, wait_until

    app = noop_app()
    recorder = _DepthRecorder()
    host = build_plugin_host(entry_points=False, extra_builtins=[("recorder", lambda: recorder)])
    async with awa.AsyncClient(dsn) as client:  # a queue no worker serves: its backlog stays
        await client.insert_many([{"n": i} for i in range(5)], kind="mail", queue="backlog")
    async with running_worker(app, dsn, {"default": 2}, plugins=host, rescue_interval=0.2):
        await wait_until(
            lambda: any(
                (d.queue, d.available) == ("backlog", 5) for s in recorder.snapshots for d in s
            )
        )
        seen = len(recorder.snapshots)
        await wait_until(lambda: len(recorder.snapshots) > seen)  # again, the next interval


@pytest.mark.asyncio
async def test_the_worker_checks_the_notify_round_trip_once_at_start(dsn: str) -> None:
    # Behind a transaction-mode pooler LISTEN/NOTIFY does not work; the listener finds out at
    # start (awa doctor runs the same check) and says so. Here it works, and was checked.
    from tests.helpers import running_worker

    app = noop_app()
    async with running_worker(app, dsn) as worker:
        assert worker.listener.checked_notify and worker.listener.notify_works
