"""The built-in OpenTelemetry plugin, against a real worker and the real PostgreSQL: one trace
id from the enqueuing request through every attempt (a retry included), the follow-ups (a
registered spec's and a staged one) and their attempts, a callback wait, and a rescue; the
metrics through the SDK's in-memory reader; span size bounds; off by default (not even
imported) and loaded by ``[telemetry] otlp_endpoint``; a real OTLP/HTTP receiver on loopback."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple

import psycopg
import pytest

pytest.importorskip("opentelemetry.sdk")

from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

import awa_cli as awa
from awa_cli import metadata
from awa_cli.events import JobEvent
from awa_cli.plugins.manager import PluginHost, build_plugin_host
from awa_cli.plugins.otel import NAME, TRACEPARENT, OtelPlugin
from tests.helpers import ROOT, all_terminal, running_worker, wait_until


@dataclass
class Order:
    n: int


@dataclass
class Receipt:
    n: int


@dataclass
class Audit:
    n: int


@dataclass
class Parked:
    n: int


@dataclass
class Stuck:
    n: int


app = awa.App()


@app.task(Order)
async def order(job: awa.Job) -> awa.JobResult | None:
    if job.attempt == 1:
        return awa.RetryAfter(0.05)  # the second attempt must join the same trace
    job.enqueue_on_completion(Audit(job.args.n))
    return None


@app.task(Receipt)
async def receipt(job: awa.Job) -> None:
    pass


@app.task(Audit)
async def audit(job: awa.Job) -> None:
    pass


@app.task(Parked)
async def parked(job: awa.Job) -> awa.JobResult:
    return awa.WaitForCallback(await job.register_callback(timeout=600))


@app.task(Stuck)
async def stuck(job: awa.Job) -> None:
    pass


app.on_completed_enqueue(Order, Receipt, lambda args, job: Receipt(args.n))


class Otel(NamedTuple):
    plugin: OtelPlugin
    exporter: InMemorySpanExporter  # the finished spans
    reader: InMemoryMetricReader  # the metrics
    host: PluginHost  # the plugin as the one built-in (no entry points), for clients and workers


@pytest.fixture
def otel() -> Iterator[Otel]:
    exporter = InMemorySpanExporter()
    tracer_provider = TracerProvider()
    tracer_provider.add_span_processor(SimpleSpanProcessor(exporter))
    reader = InMemoryMetricReader()
    plugin = OtelPlugin(
        tracer_provider=tracer_provider, meter_provider=MeterProvider(metric_readers=[reader])
    )
    host = build_plugin_host(entry_points=False, extra_builtins=[(NAME, lambda: plugin)])
    try:
        yield Otel(plugin, exporter, reader, host)
    finally:
        plugin.close()
    assert plugin.contribute not in metadata.registered()


def spans_named(exporter: InMemorySpanExporter, prefix: str) -> list[ReadableSpan]:
    return [s for s in exporter.get_finished_spans() if s.name.startswith(prefix)]


def trace_id_of(traceparent: str) -> int:
    return int(traceparent.split("-")[1], 16)


def jobs(dsn: str) -> dict[str, list[dict[str, Any]]]:
    with psycopg.connect(dsn) as conn:
        rows = conn.execute(
            "SELECT kind, metadata, state::text FROM awa.jobs ORDER BY id"
        ).fetchall()
    found: dict[str, list[dict[str, Any]]] = {}
    for kind, meta, state in rows:
        found.setdefault(kind, []).append({"metadata": meta, "state": state})
    return found


@pytest.mark.asyncio
async def test_one_trace_from_request_through_attempts_and_follow_ups(dsn: str, otel: Otel) -> None:
    plugin, exporter, reader, host = otel
    tracer = plugin.tracer_provider.get_tracer("test")
    client = awa.AsyncClient(dsn, app, plugin_hooks=host.event_hooks())
    try:
        with tracer.start_as_current_span("POST /orders") as request:
            await client.insert(Order(1))
            await client.insert(Parked(2))
        trace_id = request.get_span_context().trace_id
        async with running_worker(app, dsn, plugins=host):
            await wait_until(lambda: _count(dsn, "audit", "completed") == 1)
            await wait_until(lambda: _count(dsn, "receipt", "completed") == 1)
            await wait_until(lambda: _count(dsn, "parked", "waiting_external") == 1)
            callback_id = _callback_id(dsn)
            await client.complete_external(callback_id, {"paid": True})
            await wait_until(lambda: len(spans_named(exporter, "awa.callback_wait")) == 1)
            await wait_until(lambda: len(spans_named(exporter, "awa.attempt")) == 5)
    finally:
        await client.close()

    stored = jobs(dsn)
    for kind in ("order", "receipt", "audit", "parked"):
        [job] = stored[kind]
        assert trace_id_of(job["metadata"][TRACEPARENT]) == trace_id, kind
    everything = exporter.get_finished_spans()
    assert {s.context.trace_id for s in everything} == {trace_id}

    enqueues = {s.name: s for s in spans_named(exporter, "awa.enqueue")}
    assert set(enqueues) == {
        "awa.enqueue order",
        "awa.enqueue parked",
        "awa.enqueue receipt",
        "awa.enqueue audit",
    }
    assert enqueues["awa.enqueue order"].parent.span_id == request.get_span_context().span_id
    attempts = [(s.name, dict(s.attributes or {})) for s in spans_named(exporter, "awa.attempt")]
    order_attempts = sorted(
        (a["awa.job.attempt"], a["awa.job.outcome"])
        for n, a in attempts
        if n == "awa.attempt order"
    )
    assert order_attempts == [(1, "retried"), (2, "completed")]
    by_name = {n: a for n, a in attempts}
    assert by_name["awa.attempt receipt"]["awa.job.outcome"] == "completed"
    assert by_name["awa.attempt parked"]["awa.job.outcome"] == "waiting_for_callback"
    assert by_name["awa.attempt order"]["awa.job.queue"] == "default"
    # Each attempt's parent is its job's enqueue span; follow-ups' enqueues hang off their
    # trigger's enqueue span (the trigger's awa.traceparent), all in the request's trace.
    order_ctx = enqueues["awa.enqueue order"].context.span_id
    assert enqueues["awa.enqueue receipt"].parent.span_id == order_ctx
    assert enqueues["awa.enqueue audit"].parent.span_id == order_ctx
    for span in spans_named(exporter, "awa.attempt order"):
        assert span.parent.span_id == order_ctx
    [wait] = spans_named(exporter, "awa.callback_wait")
    assert wait.attributes["awa.callback.resolution"] == "completed"
    assert wait.end_time >= wait.start_time

    points = _metric_points(reader)
    # labels in key order: kind, outcome, queue
    assert points[("awa.jobs", ("order", "retried", "default"))] == 1
    assert points[("awa.jobs", ("audit", "completed", "default"))] == 1
    assert points[("awa.job.duration", ("order", "default"))] == 1  # one handler completion


@pytest.mark.asyncio
async def test_rescue_closes_the_dead_attempt_with_its_reason(dsn: str, otel: Otel) -> None:
    _, exporter, reader, host = otel
    async with awa.AsyncClient(dsn) as client:
        job = await client.insert(Stuck(1), max_attempts=1)
    with psycopg.connect(dsn, autocommit=True) as conn:  # a worker died mid-attempt
        conn.execute(
            "UPDATE awa.jobs SET state = 'running', attempt = 1, run_lease = 1, "
            "attempted_at = now() - interval '1 minute', heartbeat_at = now() - interval '1 minute'"
        )
    timings = {"heartbeat_interval": 0.1, "heartbeat_staleness": 1.0, "rescue_interval": 0.1}
    async with running_worker(app, dsn, plugins=host, leader_election_interval=0.1, **timings):
        await wait_until(lambda: all_terminal(dsn, 1))
        await wait_until(lambda: len(spans_named(exporter, "awa.attempt")) == 1)
    [span] = spans_named(exporter, "awa.attempt")
    assert span.attributes["awa.rescue.reason"] == "stale_heartbeat"
    assert span.attributes["awa.job.id"] == job.id
    assert span.status.status_code.name == "ERROR"
    assert (span.end_time - span.start_time) / 1e9 >= 59  # from the attempt's real start
    assert span.parent is not None  # the enqueue (no request span around it: a new trace)
    assert _metric_points(reader)[("awa.job.rescues", ("stale_heartbeat",))] == 1


def test_spans_are_bounded(
    otel: Otel,
) -> None:
    import asyncio

    from tests.integration.plugins.test_prometheus import row

    plugin, exporter, _, _ = otel
    huge = "x" * 100_000
    job = row(kind="k" * 300, metadata={TRACEPARENT: "garbage"})
    asyncio.run(plugin.awa_job_event(JobEvent.Exhausted(job, {}, huge, 3)))
    [span] = exporter.get_finished_spans()
    assert len(span.attributes["awa.job.error"]) <= 2048
    assert len(span.attributes["awa.job.kind"]) <= 1024
    assert len(span.status.description or "") <= 1024
    assert span.parent is None  # an unreadable traceparent starts a new trace, never fails


def test_caller_traceparent_is_kept_and_contributors_never_break_enqueue(
    otel: Otel,
) -> None:
    from awa_cli.jobs import InsertOpts, prepare

    given = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
    job = prepare({"a": 1}, InsertOpts(kind="k", metadata={TRACEPARENT: given}))
    assert '"awa.traceparent": "' + given in job.metadata_json.replace('":"', '": "')

    def broken(*_: Any) -> None:
        raise RuntimeError("boom")

    metadata.register(broken)
    try:
        job = prepare({"a": 1}, InsertOpts(kind="k"))
        assert TRACEPARENT in job.metadata_json
    finally:
        metadata.unregister(broken)


def test_off_by_default_and_loaded_by_the_config(tmp_path: Path) -> None:
    probe = (
        "import sys\n"
        "from awa_cli.commands.context import CliContext\n"
        "from awa_cli.terminal import Terminal\n"
        "from awa_cli import metadata\n"
        "ctx = CliContext(sys.argv[1], None, False, 0, Terminal(no_color=True))\n"
        "names = [p.name for p in ctx.plugins.loaded]\n"
        "import awa_cli as awa\n"
        "awa.Client\n"
        "print('otel' if 'awa_cli.plugins.otel' in names else 'none',\n"
        "      'imported' if 'awa_cli.plugins.otel' in sys.modules or 'opentelemetry' in sys.modules else 'not-imported',\n"
        "      len(metadata.registered()), flush=True)\n"
        "import os\n"
        "os._exit(0)  # no exit-time export to the unreachable collector\n"
    )
    off = tmp_path / "off.toml"
    off.write_text("[worker]\nprocesses = 1\n")
    on = tmp_path / "on.toml"
    on.write_text('[telemetry]\notlp_endpoint = "http://127.0.0.1:9"\n')
    run = [sys.executable, "-c", probe]
    assert subprocess.check_output([*run, str(off)], cwd=ROOT, text=True).split() == [
        "none",
        "not-imported",
        "0",
    ]
    assert subprocess.check_output([*run, str(on)], cwd=ROOT, text=True).split() == [
        "otel",
        "imported",
        "1",
    ]


def test_exports_to_a_real_otlp_http_receiver_on_loopback() -> None:
    from tests.integration.plugins.test_otel_signals import otlp_receiver

    with otlp_receiver() as (port, received):
        plugin = OtelPlugin(f"http://127.0.0.1:{port}/", service_name="awa-test")
        try:
            from tests.integration.plugins.test_prometheus import row

            import asyncio

            asyncio.run(plugin.awa_job_event(JobEvent.Completed(row(), {}, 0.25)))
            plugin.close()  # flushes both providers
        finally:
            plugin.tracer_provider.shutdown()  # while the receiver still answers
            plugin.meter_provider.shutdown()
    paths = {path for path, _, _ in received}
    assert {"/v1/traces", "/v1/metrics"} <= paths
    assert all(ctype == "application/x-protobuf" and size > 0 for _, ctype, size in received)


def _count(dsn: str, kind: str, state: str) -> int:
    with psycopg.connect(dsn) as conn:
        [(n,)] = conn.execute(
            "SELECT count(*) FROM awa.jobs WHERE kind = %s AND state = %s", (kind, state)
        ).fetchall()
    return int(n)


def _callback_id(dsn: str) -> Any:
    with psycopg.connect(dsn) as conn:
        [(callback_id,)] = conn.execute(
            "SELECT callback_id FROM awa.jobs WHERE kind = 'parked'"
        ).fetchall()
    return callback_id


def _metric_points(reader: InMemoryMetricReader) -> dict[tuple[str, tuple[str, ...]], float]:
    points: dict[tuple[str, tuple[str, ...]], float] = {}
    data = reader.get_metrics_data()
    for resource in data.resource_metrics if data else ():
        for scope in resource.scope_metrics:
            for metric in scope.metrics:
                for point in metric.data.data_points:
                    labels = tuple(v for _, v in sorted((point.attributes or {}).items()))
                    value = getattr(point, "value", None)
                    points[(metric.name, labels)] = value if value is not None else point.count
    return points


def test_sync_client_and_awa_insert_see_the_callers_span(dsn: str, otel: Otel) -> None:
    plugin, exporter, _, _ = otel
    tracer = plugin.tracer_provider.get_tracer("test")
    with tracer.start_as_current_span("script") as outer:
        with awa.Client(dsn) as client:  # runs on its own loop thread: the context goes along
            client.insert(Receipt(1))
        with psycopg.connect(dsn) as conn:
            awa.insert(conn, Receipt(2))
    spans = spans_named(exporter, "awa.enqueue receipt")
    assert len(spans) == 2
    assert {s.parent.span_id for s in spans} == {outer.get_span_context().span_id}
    for job in jobs(dsn)["receipt"]:
        assert trace_id_of(job["metadata"][TRACEPARENT]) == outer.get_span_context().trace_id


def test_config_check_says_when_the_otel_extra_is_missing(tmp_path: Path) -> None:
    config = tmp_path / "awa.toml"
    config.write_text('[telemetry]\notlp_endpoint = "http://127.0.0.1:4318"\n')
    probe = (
        "import sys\n"
        "sys.modules['opentelemetry'] = None  # as if the extra were not installed\n"
        "from awa_cli.cli import main\n"
        "sys.argv = ['awa', '--config', sys.argv[1], 'config', 'check']\n"
        "main()\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", probe, str(config)], cwd=ROOT, capture_output=True, text=True
    )
    assert result.returncode == 2
    assert "[telemetry] otlp_endpoint: needs the otel extra" in result.stderr
    ok = subprocess.run(
        [sys.executable, "-m", "awa_cli", "--config", str(config), "config", "check"],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    assert ok.returncode == 0, ok.stderr
