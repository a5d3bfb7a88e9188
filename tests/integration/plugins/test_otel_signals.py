"""Tracing where the operator expects it (issue 28, trial D18): `awa job enqueue` with
`[telemetry]` stores `awa.traceparent` and sends its enqueue span; a web application that
traces with its own OpenTelemetry SDK records an `awa.enqueue` span under its current span for
`awa.insert` and `AsyncClient` inserts, with no `[telemetry]` of awa's; with the collector
down, `awa plugins` is quick and prints nothing of the exporters', whose complaints fold into
one short line."""

from __future__ import annotations

import contextlib
import http.server
import json
import logging
import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest

pytest.importorskip("opentelemetry.sdk")

from awa_cli.plugins.otel import FoldedExporterLog, fold_exporter_logs
from tests.helpers import ROOT, run_python

pytestmark = [pytest.mark.integration]


@contextlib.contextmanager
def otlp_receiver() -> Iterator[tuple[int, list[tuple[str, str, int]]]]:
    """A real OTLP/HTTP receiver on loopback: its port, and (path, content type, body size)
    of each request it was sent."""
    received: list[tuple[str, str, int]] = []

    class Receiver(http.server.BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
            received.append((self.path, self.headers.get("Content-Type", ""), len(body)))
            self.send_response(200)
            self.send_header("Content-Type", "application/x-protobuf")
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *_: Any) -> None:
            pass

    server = http.server.HTTPServer(("127.0.0.1", 0), Receiver)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server.server_port, received
    finally:
        server.shutdown()
        server.server_close()


@pytest.fixture
def receiver() -> Iterator[tuple[int, list[tuple[str, str, int]]]]:
    with otlp_receiver() as served:
        yield served


def awa_cli(config: Path, *args: str, dsn: str | None = None) -> subprocess.CompletedProcess[str]:
    argv = [sys.executable, "-m", "awa_cli", "--config", str(config)]
    if dsn is not None:
        argv += ["--database-url", dsn]
    env = {**os.environ, "NO_COLOR": "1", "PYTHONPATH": str(ROOT)}
    return subprocess.run(
        [*argv, *args], capture_output=True, text=True, env=env, cwd=ROOT, timeout=120, check=False
    )


def test_cli_enqueue_with_telemetry_stores_the_traceparent(
    dsn: str, tmp_path: Path, receiver: tuple[int, list[tuple[str, str, int]]]
) -> None:
    port, received = receiver
    config = tmp_path / "awa.toml"
    config.write_text(f'[telemetry]\notlp_endpoint = "http://127.0.0.1:{port}"\n')
    done = awa_cli(config, "job", "enqueue", "ping", "--args", "{}", "--json", dsn=dsn)
    assert done.returncode == 0, done.stderr
    job = json.loads(done.stdout)
    traceparent = job["metadata"]["awa.traceparent"]
    assert traceparent.startswith("00-") and len(traceparent.split("-")) == 4
    with psycopg.connect(dsn) as conn:
        [(meta,)] = conn.execute("SELECT metadata FROM awa.jobs WHERE id = %s", (job["id"],))
    assert meta["awa.traceparent"] == traceparent
    assert "/v1/traces" in [
        path for path, _, _ in received
    ]  # the enqueue span was sent before the command ended


WEB_APP = """
import asyncio, json, sys
import psycopg
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

import awa_cli as awa  # imported before the application configures its tracing

exporter = InMemorySpanExporter()
provider = TracerProvider()
provider.add_span_processor(SimpleSpanProcessor(exporter))
trace.set_tracer_provider(provider)
tracer = trace.get_tracer("web")
dsn = sys.argv[1]


async def handler() -> None:
    with tracer.start_as_current_span("POST /orders") as request:
        with psycopg.connect(dsn) as conn:
            awa.insert(conn, {"order": 1}, kind="receipt")
        async with awa.AsyncClient(dsn) as client:
            await client.insert({"order": 2}, kind="receipt")
    spans = [
        {"name": s.name, "parent": s.parent.span_id if s.parent else None}
        for s in exporter.get_finished_spans()
    ]
    ctx = request.get_span_context()
    print(json.dumps({"span_id": ctx.span_id, "trace_id": ctx.trace_id, "spans": spans}))


asyncio.run(handler())
"""


def test_a_web_app_tracing_with_its_own_sdk_records_enqueue_spans(dsn: str) -> None:
    done = run_python("-c", WEB_APP, dsn, timeout=120)
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout.strip().splitlines()[-1])
    enqueues = [s for s in report["spans"] if s["name"] == "awa.enqueue receipt"]
    assert len(enqueues) == 2, report
    assert {s["parent"] for s in enqueues} == {report["span_id"]}
    with psycopg.connect(dsn) as conn:
        rows = conn.execute("SELECT metadata FROM awa.jobs WHERE kind = 'receipt'").fetchall()
    assert len(rows) == 2
    for (meta,) in rows:
        assert int(meta["awa.traceparent"].split("-")[1], 16) == report["trace_id"]


def test_awa_plugins_with_the_collector_down_is_quick_and_quiet(tmp_path: Path) -> None:
    off = tmp_path / "off.toml"
    off.write_text("")
    on = tmp_path / "on.toml"
    on.write_text('[telemetry]\notlp_endpoint = "http://127.0.0.1:9"\n')  # nothing listens
    started = time.monotonic()
    baseline = awa_cli(off, "plugins")
    off_seconds = time.monotonic() - started
    started = time.monotonic()
    done = awa_cli(on, "plugins")
    on_seconds = time.monotonic() - started
    assert baseline.returncode == 0 and done.returncode == 0, done.stderr
    assert "awa_cli.plugins.otel" in done.stdout
    assert done.stderr.strip() == "", done.stderr  # no exporter warnings, no traceback
    assert on_seconds < off_seconds + 4.0, (on_seconds, off_seconds)  # was 7 s more


def test_exporter_complaints_fold_into_one_short_line(caplog: pytest.LogCaptureFixture) -> None:
    fold_exporter_logs("http://127.0.0.1:9")
    name = "opentelemetry.exporter.otlp.proto.http.metric_exporter"
    noisy = logging.getLogger(name)
    [folding] = [f for f in noisy.filters if isinstance(f, FoldedExporterLog)]
    folding.last.clear()  # an earlier test of this process may have logged through it
    long = "Transient error HTTPConnectionPool(host='127.0.0.1', port=9): Max retries " + "x" * 300
    with caplog.at_level(logging.WARNING, logger=name):
        for _ in range(4):
            try:
                raise ConnectionError("refused")
            except ConnectionError:
                noisy.warning(long, exc_info=True)
    records = [r for r in caplog.records if r.name == name]
    assert len(records) == 1
    line = records[0].getMessage()
    assert line.startswith("OpenTelemetry export to http://127.0.0.1:9 failing: ")
    assert len(line) < 200 and records[0].exc_info is None
    for f in list(noisy.filters):  # leave the logger as the other tests expect it
        if isinstance(f, FoldedExporterLog):
            noisy.removeFilter(f)
