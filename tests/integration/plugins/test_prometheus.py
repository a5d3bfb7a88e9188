"""The built-in Prometheus plugin: counting hand-built events, its own registry and endpoint,
loading only when ``[metrics] prometheus_port`` is set, a real ``awa worker`` scraped over
HTTP (one process, and ``--processes 2`` on two ports), and the Grafana dashboard."""

from __future__ import annotations

import json
import logging
import os
import re
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from datetime import datetime, UTC
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import REGISTRY, generate_latest
from prometheus_client.parser import text_string_to_metric_families

import awa_cli as awa
from awa_cli.depth import QueueDepth
from awa_cli.events import JobEvent, RescueReason
from awa_cli.jobs import JobRow
from awa_cli.plugins.prometheus import NAME, SLOT_ENV, PrometheusPlugin
from awa_cli.worker.services import WorkerStats
from tests.helpers import AwaRunner, ROOT, memory_row, spawn_worker
from tests.apps.metrics_app import (
    MetricsFail,
    MetricsOk,
    MetricsPark,
    MetricsSlow,
    MetricsStage,
)

DASHBOARD = ROOT / "dashboards" / "awa-grafana.json"
NOW = datetime(2025, 1, 1, tzinfo=UTC)
HOOKS = [
    "awa_job_event",
    "awa_worker_started",
    "awa_worker_stopping",
    "awa_limit_waiting",
    "awa_queue_depth",
]


def row(kind: str = "send_email", queue: str = "email", **changes: Any) -> JobRow:
    return memory_row(NOW, kind=kind, queue=queue, **changes)


class FakeWorker:
    """What the plugin reads of a worker: ``stats()`` (the fields tests change are live)."""

    def __init__(
        self,
        running: dict[int, str],
        staged: tuple[int, int, int],
        failures: int,
        queues: tuple[str, ...],
    ) -> None:
        self.running, self.staged, self.failures, self.queues = running, staged, failures, queues

    def stats(self) -> WorkerStats:
        inserted, duplicate, discarded = self.staged
        by_queue: dict[str, int] = {}
        for queue in self.running.values():
            by_queue[queue] = by_queue.get(queue, 0) + 1
        return WorkerStats(
            queues={q: 1 for q in self.queues},
            running=by_queue,
            staged_inserted=inserted,
            staged_duplicate=duplicate,
            staged_discarded=discarded,
            hook_failures=self.failures,
            listening=True,
            stopping=False,
        )


def fake_worker(
    running: dict[int, str] | None = None,
    staged: tuple[int, int, int] = (0, 0, 0),
    failures: int = 0,
    queues: tuple[str, ...] = ("email", "idle"),
) -> Any:
    return FakeWorker(dict(running or {}), staged, failures, queues)


def all_events(job: JobRow) -> list[Any]:
    return [
        JobEvent.Started(job, {}),
        JobEvent.Completed(job, {}, 0.2),
        JobEvent.Retried(job, {}, "boom", 1, NOW),
        JobEvent.Exhausted(job, {}, "boom", 2),
        JobEvent.Cancelled(job, {}, "by operator"),
        JobEvent.WaitingForCallback(job, {}),
        JobEvent.Rescued(job, {}, RescueReason.DEADLINE_EXCEEDED),
    ]


def free_ports(count: int = 1) -> int:
    """A port such that it and the ``count - 1`` after it are free now."""
    for _ in range(50):
        with socket.socket() as s:
            s.bind(("", 0))
            base = s.getsockname()[1]
        if base + count > 65535:
            continue
        try:
            for port in range(base, base + count):
                with socket.socket() as s:
                    s.bind(("", port))
        except OSError:
            continue
        return base
    raise AssertionError("no free ports")


def scrape(port: int, timeout: float = 2.0) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """``/metrics`` as {(sample name, sorted labels): value}."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=timeout) as response:
        text = response.read().decode()
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def value(samples: dict[Any, float], name: str, **labels: str) -> float | None:
    return samples.get((name, tuple(sorted(labels.items()))))


# -- the plugin on its own ---------------------------------------------------------------
@pytest.mark.asyncio
async def test_events_increment_the_counters_and_the_histogram() -> None:
    plugin = PrometheusPlugin(None)
    job = row()
    for event in all_events(job):
        await plugin.awa_job_event(event)
    await plugin.awa_job_event(JobEvent.Started(job, {}))
    await plugin.awa_job_event(JobEvent.Completed(job, {}, 0.0))  # by a callback: no duration
    await plugin.awa_job_event(
        JobEvent.Rescued(row(queue="other"), {}, RescueReason.STALE_HEARTBEAT)
    )
    get = plugin.registry.get_sample_value
    email_counts = {
        "started": 2,
        "completed": 2,
        "retried": 1,
        "exhausted": 1,
        "cancelled": 1,
        "waiting_for_callback": 1,
        "rescued": 1,
    }
    email = {"kind": "send_email", "queue": "email"}
    jobs = {o: get("awa_jobs_total", {**email, "outcome": o}) for o in email_counts}
    assert jobs == email_counts
    assert (
        get("awa_jobs_total", {"kind": "send_email", "queue": "other", "outcome": "rescued"}) == 1
    )
    hist = {"kind": "send_email", "queue": "email"}
    assert get("awa_job_duration_seconds_count", hist) == 1
    assert get("awa_job_duration_seconds_sum", hist) == pytest.approx(0.2)
    assert get("awa_job_duration_seconds_bucket", {**hist, "le": "0.25"}) == 1
    assert get("awa_job_duration_seconds_bucket", {**hist, "le": "0.1"}) == 0
    assert {r.value: get("awa_job_rescues_total", {"reason": r.value}) for r in RescueReason} == {
        "stale_heartbeat": 1,
        "deadline_exceeded": 1,
        "expired_callback": 0,
    }


@pytest.mark.asyncio
async def test_worker_state_is_read_at_scrape_time_and_summed_over_workers() -> None:
    plugin = PrometheusPlugin(None)
    one = fake_worker({1: "email", 2: "email"}, staged=(3, 1, 2), failures=1)
    two = fake_worker({3: "email"}, staged=(1, 0, 0), failures=2, queues=("email",))
    await plugin.awa_worker_started(one)
    await plugin.awa_worker_started(two)
    get = plugin.registry.get_sample_value
    assert get("awa_job_staged_follow_ups_committed_total", {"result": "inserted"}) == 4
    assert get("awa_job_staged_follow_ups_committed_total", {"result": "duplicate"}) == 1
    assert get("awa_job_staged_follow_ups_discarded_total") == 2
    assert get("awa_hook_failures_total") == 3
    assert get("awa_jobs_running", {"queue": "email"}) == 3
    assert get("awa_jobs_running", {"queue": "idle"}) == 0
    one.running.clear()
    one.failures = 5
    assert get("awa_jobs_running", {"queue": "email"}) == 1
    assert get("awa_hook_failures_total") == 7


@pytest.mark.asyncio
async def test_the_endpoint_serves_its_own_registry_and_closes_when_the_worker_stops() -> None:
    port = free_ports()
    plugin = PrometheusPlugin(port, env={})
    worker = fake_worker()
    await plugin.awa_job_event(JobEvent.Started(row(), {}))
    await plugin.awa_worker_started(worker)
    try:
        assert plugin.serving_port == port
        samples = scrape(port)
        assert (
            value(samples, "awa_jobs_total", kind="send_email", queue="email", outcome="started")
            == 1
        )
        assert not any(
            name.startswith(("python_", "process_")) for name, _ in samples
        )  # not the global one
        assert b"awa_jobs_total" not in generate_latest(REGISTRY)
        await plugin.awa_worker_started(fake_worker())  # a second worker: the same endpoint
        assert plugin.serving_port == port
    finally:
        await plugin.awa_worker_stopping(worker)
    assert plugin.serving_port == port  # the other worker still runs
    await plugin.awa_worker_stopping(plugin.workers[1])
    assert plugin.serving_port is None
    with pytest.raises(urllib.error.URLError):
        scrape(port, timeout=1)


def listening_on(port: int) -> set[str]:
    """The IPv4 addresses a socket of this machine listens on at ``port`` (/proc/net/tcp)."""
    found = set()
    for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
        local, state = line.split()[1], line.split()[3]
        address, _, hex_port = local.partition(":")
        if state == "0A" and int(hex_port, 16) == port:  # 0A: LISTEN
            found.add(socket.inet_ntoa(bytes.fromhex(address)[::-1]))
    return found


@pytest.mark.skipif(not Path("/proc/net/tcp").exists(), reason="needs /proc/net/tcp")
@pytest.mark.asyncio
@pytest.mark.parametrize("host", [None, "0.0.0.0", "127.0.0.2"])
async def test_the_endpoint_binds_to_the_configured_host_loopback_by_default(
    host: str | None,
) -> None:
    port = free_ports()
    plugin = PrometheusPlugin(port, env={}) if host is None else PrometheusPlugin(port, {}, host)
    worker = fake_worker()
    await plugin.awa_worker_started(worker)
    try:
        expected = host or "127.0.0.1"
        assert plugin._server.server_address[0] == expected
        assert listening_on(port) == {expected}  # nothing on 0.0.0.0 unless configured
        if expected != "0.0.0.0":
            with pytest.raises(OSError):  # the loopback bind did not take the other addresses
                with urllib.request.urlopen(f"http://{_other_address()}:{port}/metrics", timeout=1):
                    pass
    finally:
        await plugin.awa_worker_stopping(worker)


def _other_address() -> str:
    """An address of this machine that is not 127.0.0.1 (127.0.0.3 when there is none)."""
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            s.connect(("10.255.255.255", 1))  # no packet is sent: this only picks a route
            address = s.getsockname()[0]
    except OSError:
        return "127.0.0.3"
    return address if address != "127.0.0.1" else "127.0.0.3"


def test_metrics_host_comes_from_the_config(tmp_path: Path) -> None:
    from awa_cli.commands.context import CliContext
    from awa_cli.terminal import Terminal

    config = tmp_path / "awa.toml"
    for text, expected in (
        ("[metrics]\nprometheus_port = 9464\n", "127.0.0.1"),
        ('[metrics]\nprometheus_port = 9464\nhost = "0.0.0.0"\n', "0.0.0.0"),
    ):
        config.write_text(text)
        ctx = CliContext(str(config), None, False, 0, Terminal(no_color=True, quiet=True), env={})
        assert ctx.plugins.pm.get_plugin(NAME).host == expected


def test_each_supervised_process_serves_on_port_plus_its_slot() -> None:
    from awa_cli.worker.supervisor import WORKER_SLOT_ENV, child_env

    assert WORKER_SLOT_ENV == SLOT_ENV
    assert child_env({}, 5, 3)[SLOT_ENV] == "3"
    assert PrometheusPlugin(9464, env={}).port_for_process() == 9464
    assert PrometheusPlugin(9464, env={SLOT_ENV: "1"}).port_for_process() == 9464
    assert PrometheusPlugin(9464, env={SLOT_ENV: "3"}).port_for_process() == 9466


# -- loading -------------------------------------------------------------------------------
@pytest.mark.parametrize("port", [None, 9464])
def test_loaded_as_a_builtin_only_when_a_port_is_configured(
    tmp_path: Path, port: int | None
) -> None:
    from awa_cli.cli import cli

    config = tmp_path / "awa.toml"
    config.write_text("" if port is None else f"[metrics]\nprometheus_port = {port}\n")
    result = AwaRunner().invoke(cli, ["--config", str(config), "plugins", "--json"])
    assert result.exit_code == 0, result.output
    loaded = [p for p in json.loads(result.stdout) if p["name"] == NAME]
    assert loaded == ([] if port is None else [{"name": NAME, "origin": "builtin", "hooks": HOOKS}])


def test_extra_builtins_load_after_the_builtin_logger_and_the_hook_skips_the_args_copy() -> None:
    from awa_cli.plugins.manager import build_plugin_host

    host = build_plugin_host(
        entry_points=False, extra_builtins=[(NAME, lambda: PrometheusPlugin(None))]
    )
    assert [(p.name, p.origin) for p in host.loaded] == [
        ("awa_cli.plugins.builtin_logging", "builtin"),
        (NAME, "builtin"),
    ]
    [(_, hook)] = [(name, fn) for name, fn in host.event_hooks() if name == NAME]
    assert getattr(hook, "awa_reads_args", True) is False  # it never reads event.args


# -- the dashboard -------------------------------------------------------------------------
@pytest.mark.asyncio
async def test_the_dashboard_queries_only_exported_metrics_and_has_the_staged_panel() -> None:
    dashboard = json.loads(DASHBOARD.read_text(encoding="utf-8"))
    plugin = PrometheusPlugin(None)
    await plugin.awa_worker_started(fake_worker({1: "email"}))
    for event in all_events(row()):
        await plugin.awa_job_event(event)
    await plugin.awa_queue_depth([QueueDepth("email", 3, 12.5)])
    exported = {s.name for family in plugin.registry.collect() for s in family.samples}

    def queries(node: Any) -> Iterator[str]:
        if isinstance(node, dict):
            for key, item in node.items():
                if key in ("expr", "query", "definition") and isinstance(item, str):
                    yield item
                else:
                    yield from queries(item)
        elif isinstance(node, list):
            for item in node:
                yield from queries(item)

    used = {name for q in queries(dashboard) for name in re.findall(r"\bawa_[a-z0-9_]+", q)}
    assert used and used <= exported, used - exported
    for family in (
        "awa_jobs_total",
        "awa_job_duration_seconds_bucket",
        "awa_jobs_running",
        "awa_job_rescues_total",
        "awa_hook_failures_total",
        "awa_queue_available_jobs",
        "awa_queue_oldest_available_age_seconds",
    ):
        assert family in used
    [staged] = [p for p in dashboard["panels"] if p["title"] == "Staged Follow-ups"]
    exprs = " ".join(t["expr"] for t in staged["targets"])
    assert "awa_job_staged_follow_ups_committed_total" in exprs and "by (result)" in exprs
    assert "awa_job_staged_follow_ups_discarded_total" in exprs
    assert len({p["id"] for p in dashboard["panels"]}) == len(dashboard["panels"])


# -- a real worker ---------------------------------------------------------------------------
def start_worker(
    tmp_path: Path, dsn: str, port: int, *args: str
) -> tuple[subprocess.Popen[bytes], Path]:
    config = tmp_path / "awa.toml"
    config.write_text(
        '[app]\nmodules = ["tests.apps.metrics_app"]\n'
        "[queues.default]\nconcurrency = 10\n"
        '[maintenance]\nheartbeat_interval = "0.5s"\nheartbeat_staleness = "5s"\n'
        'rescue_interval = "0.5s"\nleader_election_interval = "0.5s"\n'
        '[worker]\nshutdown_timeout = "5s"\n'
        f"[metrics]\nprometheus_port = {port}\n"
    )
    env = {**os.environ, "AWA_DATABASE_URL": dsn, "PYTHONPATH": str(ROOT)}
    for name in ("NOTIFY_SOCKET", "WATCHDOG_USEC", "WATCHDOG_PID", SLOT_ENV):
        env.pop(name, None)
    log_path = tmp_path / "stderr.log"
    with log_path.open("w") as log:
        proc = spawn_worker(config, log, env, *args)
    return proc, log_path


def stop_worker(proc: subprocess.Popen[bytes]) -> int:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            return proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            raise
    return proc.returncode


def scrape_until(
    port: int,
    expected: dict[tuple[str, tuple[tuple[str, str], ...]], float],
    proc: subprocess.Popen[bytes],
    log_path: Path,
    timeout: float = 15.0,
) -> dict[Any, float]:
    deadline = time.monotonic() + timeout
    samples: dict[Any, float] = {}
    while time.monotonic() < deadline:
        assert proc.poll() is None, log_path.read_text()
        try:
            samples = scrape(port)
        except (urllib.error.URLError, ConnectionError):
            time.sleep(0.1)
            continue
        if all(samples.get(key) == want for key, want in expected.items()):
            return samples
        time.sleep(0.1)
    wrong = {
        key: (samples.get(key), want) for key, want in expected.items() if samples.get(key) != want
    }
    raise AssertionError(
        f"metrics not as expected (got, want): {wrong}\n{log_path.read_text()[-3000:]}"
    )


def jobs_key(kind: str, outcome: str) -> tuple[str, tuple[tuple[str, str], ...]]:
    return (
        "awa_jobs_total",
        tuple(sorted({"kind": kind, "queue": "default", "outcome": outcome}.items())),
    )


@pytest.mark.integration
def test_a_real_worker_exports_its_jobs_on_the_configured_port(dsn: str, tmp_path: Path) -> None:
    with awa.Client(dsn) as client:
        for n in range(3):
            client.insert(MetricsOk(n))
        client.insert(MetricsFail(1), max_attempts=1)
        client.insert(MetricsStage("same"))
        client.insert(MetricsStage("same"))
        client.insert(MetricsPark(1))
        client.insert(MetricsSlow(1), max_attempts=1, deadline_duration=0.5)
    port = free_ports()
    proc, log_path = start_worker(tmp_path, dsn, port)
    try:
        expected = {
            jobs_key("metrics_ok", "started"): 3,
            jobs_key("metrics_ok", "completed"): 3,
            jobs_key("metrics_fail", "started"): 1,
            jobs_key("metrics_fail", "exhausted"): 1,
            jobs_key("metrics_stage", "started"): 2,
            jobs_key("metrics_stage", "completed"): 2,
            jobs_key("metrics_follow", "started"): 1,
            jobs_key("metrics_follow", "completed"): 1,
            jobs_key("metrics_park", "started"): 1,
            jobs_key("metrics_park", "waiting_for_callback"): 1,
            jobs_key("metrics_slow", "started"): 1,
            jobs_key("metrics_slow", "rescued"): 1,
            ("awa_job_duration_seconds_count", (("kind", "metrics_ok"), ("queue", "default"))): 3,
            ("awa_job_rescues_total", (("reason", "deadline_exceeded"),)): 1,
            ("awa_job_rescues_total", (("reason", "stale_heartbeat"),)): 0,
            ("awa_hook_failures_total", ()): 1,
            ("awa_job_staged_follow_ups_committed_total", (("result", "inserted"),)): 1,
            ("awa_job_staged_follow_ups_committed_total", (("result", "duplicate"),)): 1,
            ("awa_job_staged_follow_ups_discarded_total", ()): 1,
            ("awa_jobs_running", (("queue", "default"),)): 0,
        }
        samples = scrape_until(port, expected, proc, log_path)
        ok = (("kind", "metrics_ok"), ("queue", "default"))
        assert samples[("awa_job_duration_seconds_sum", ok)] >= 0.03  # each slept 10 ms
        assert samples[("awa_job_duration_seconds_bucket", (*ok[:1], ("le", "+Inf"), *ok[1:]))] == 3
        # No handler ran for the parked job's completion, nor did the rescued one complete.
        assert (
            "awa_job_duration_seconds_count",
            (("kind", "metrics_slow"), ("queue", "default")),
        ) not in samples
        assert not any(key[1] and dict(key[1]).get("outcome") == "retried" for key in samples)
    finally:
        code = stop_worker(proc)
    assert code == 0, log_path.read_text()
    with pytest.raises(urllib.error.URLError):
        scrape(port, timeout=1)


@pytest.mark.integration
def test_with_processes_each_worker_serves_on_port_plus_its_slot(dsn: str, tmp_path: Path) -> None:
    with awa.Client(dsn) as client:
        for n in range(20):
            client.insert(MetricsOk(n))
    port = free_ports(2)
    proc, log_path = start_worker(tmp_path, dsn, port, "--processes", "2")
    try:
        deadline = time.monotonic() + 15
        while True:
            assert proc.poll() is None, log_path.read_text()
            try:
                first, second = scrape(port), scrape(port + 1)
            except (urllib.error.URLError, ConnectionError):
                first = second = {}
            done = [
                value(s, "awa_jobs_total", kind="metrics_ok", queue="default", outcome="completed")
                or 0
                for s in (first, second)
            ]
            if first and second and sum(done) == 20:
                break
            assert time.monotonic() < deadline, (done, log_path.read_text()[-3000:])
            time.sleep(0.1)
        for samples in (first, second):  # each process reports its own jobs and its own gauge
            assert value(samples, "awa_jobs_running", queue="default") == 0
    finally:
        code = stop_worker(proc)
    assert code == 0, log_path.read_text()


@pytest.mark.asyncio
async def test_a_port_already_taken_is_one_clear_line_not_a_traceback(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """D12: a second `awa worker` on one host with the same prometheus_port logs one ERROR
    line with the way out, and runs on without metrics."""
    port = free_ports()
    first, second = PrometheusPlugin(port, env={}), PrometheusPlugin(port, env={})
    one, two = fake_worker(), fake_worker()
    await first.awa_worker_started(one)
    try:
        with caplog.at_level(logging.INFO, logger="awa.metrics"):
            await second.awa_worker_started(two)  # must not raise
        assert second.serving_port is None and first.serving_port == port
        [record] = [r for r in caplog.records if r.levelno >= logging.ERROR]
        assert (
            record.exc_info is None and getattr(record, "action", "") == "metrics_port_unavailable"
        )
        message = record.getMessage()
        assert f"port {port}" in message and "--processes" in message
        assert len(message.splitlines()) == 1
        await second.awa_worker_stopping(two)
    finally:
        await first.awa_worker_stopping(one)
