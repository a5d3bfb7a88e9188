"""Built-in plugin: Prometheus metrics, loaded only when ``[metrics] prometheus_port`` is set.

Exported (from a registry of its own, never prometheus_client's global one):

- ``awa_jobs_total{kind,queue,outcome}``: every event this process dispatched, outcome being
  ``started``, ``completed``, ``retried``, ``exhausted``, ``cancelled``,
  ``waiting_for_callback`` or ``rescued``.
- ``awa_job_duration_seconds{kind,queue}``: histogram of the handlers' wall time
  (``Completed.duration``). A completion by an external callback (duration 0) is not observed.
- ``awa_job_rescues_total{reason}``: rescues by ``stale_heartbeat``, ``deadline_exceeded``,
  ``expired_callback``.
- ``awa_hook_failures_total``: hook and ``awa_job_event`` implementations that raised.
- ``awa_job_staged_follow_ups_committed_total{result="inserted|duplicate"}`` and
  ``awa_job_staged_follow_ups_discarded_total``: handler-staged follow-ups.
- ``awa_jobs_running{queue}``: jobs this process is running now.
- ``awa_jobs_unknown_kind_total{kind,queue}``: jobs this process failed because it registers
  no handler for their kind (each is also logged at ERROR, ``action=unknown_kind``).
- ``awa_queue_available_jobs{queue}`` and ``awa_queue_oldest_available_age_seconds{queue}``:
  each queue's backlog, from the snapshot the maintenance leader takes once per interval
  (``awa_queue_depth``), so only the leader's process exports them (take ``max by (queue)``
  across instances); a process that stopped being leader drops them after a minute.
- ``awa_limit_waiting_jobs{limit}``: due available jobs whose key is at its ``[limits.NAME]``
  max_running or out of rate budget, counted by the leader once per interval
  (``awa_limit_waiting``) when its worker has limits configured; leader-only as above.

The staged, hook-failure, running and unknown-kind families are read from the worker at scrape time (``Worker.stats()``), so
event handling only increments in-memory counters.

The HTTP endpoint (``/metrics``) listens on ``[metrics] host`` (``127.0.0.1`` unless
configured otherwise) and starts with the first worker of the process
(``awa_worker_started``) and closes when the process's last worker begins its graceful stop
(``awa_worker_stopping``). Under ``awa worker --processes N`` each worker process serves on
``prometheus_port + slot - 1`` (slot 1..N, given by the supervisor in ``$AWA_WORKER_SLOT``):
scrape all N ports. The supervisor itself serves nothing. Counters are per process and start
from zero when a process restarts (Prometheus' ``rate()`` handles that).
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Iterator, Mapping
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Histogram, start_http_server
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from awa_cli.depth import DepthGauges
from awa_cli.limits import LimitGauges
from awa_cli.events import RescueReason
from awa_cli.plugins.marker import hookimpl

log = logging.getLogger("awa.metrics")

NAME = "awa_cli.plugins.prometheus"
SLOT_ENV = "AWA_WORKER_SLOT"  # set by the --processes supervisor for each child (1..N)
OUTCOMES = (
    "started",
    "completed",
    "retried",
    "exhausted",
    "cancelled",
    "waiting_for_callback",
    "rescued",
)
DURATION_BUCKETS = (
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1.0,
    2.5,
    5.0,
    10.0,
    30.0,
    60.0,
    120.0,
    300.0,
    600.0,
    1800.0,
    3600.0,
)


class PrometheusPlugin:
    """The metrics of one process; register the instance with the plugin manager."""

    def __init__(
        self, port: int | None, env: Mapping[str, str] | None = None, host: str = "127.0.0.1"
    ) -> None:
        self.port = port
        self.host = host  # [metrics] host: loopback unless the operator exposes it
        self.env = os.environ if env is None else env
        self.registry = CollectorRegistry(auto_describe=True)
        self.jobs = Counter(
            "awa_jobs",
            "Job lifecycle events by kind, queue and outcome.",
            ("kind", "queue", "outcome"),
            registry=self.registry,
        )
        self.durations = Histogram(
            "awa_job_duration_seconds",
            "Handler wall time of completed jobs.",
            ("kind", "queue"),
            buckets=DURATION_BUCKETS,
            registry=self.registry,
        )
        self.rescues = Counter(
            "awa_job_rescues",
            "Jobs rescued by maintenance, by reason.",
            ("reason",),
            registry=self.registry,
        )
        for reason in RescueReason:  # every reason exported from the start, at 0
            self.rescues.labels(reason.value)
        self.workers: list[Any] = []  # every worker this plugin saw start, in this process
        self._stopping: set[int] = set()
        self._children: dict[tuple[str, ...], Any] = {}
        self._server: Any = None
        self.serving_port: int | None = None
        self.registry.register(_WorkerCollector(self))
        self.depth = DepthGauges()
        self.registry.register(_DepthCollector(self.depth))
        self.limits = LimitGauges()
        self.registry.register(_LimitCollector(self.limits))

    # -- hooks -----------------------------------------------------------------------------
    @hookimpl
    async def awa_job_event(self, event: Any) -> None:
        """Count the event (and observe a handler's duration); nothing else, no I/O."""
        job = event.job
        name = event.name
        key = (job.kind, job.queue, name)
        child = self._children.get(key)
        if child is None:
            child = self._children[key] = self.jobs.labels(*key)
        child.inc()
        if name == "completed":
            duration = float(getattr(event, "duration", 0.0) or 0.0)
            if duration > 0.0:  # 0: completed by a callback resolution, no handler ran
                hkey = ("duration", job.kind, job.queue)
                hist = self._children.get(hkey)
                if hist is None:
                    hist = self._children[hkey] = self.durations.labels(job.kind, job.queue)
                hist.observe(duration)
        elif name == "rescued":
            self.rescues.labels(str(getattr(event, "reason", ""))).inc()

    # The dispatcher may hand this hook the committed event without a private copy of the
    # args: it never reads them.
    awa_job_event.awa_reads_args = False  # type: ignore[attr-defined]

    @hookimpl
    async def awa_limit_waiting(self, snapshot: Any) -> None:
        """Keep the leader's counts of jobs waiting on each limit (read at scrape)."""
        self.limits.update(snapshot)

    @hookimpl
    async def awa_queue_depth(self, snapshot: Any) -> None:
        """Keep the leader's snapshot for the backlog gauges (read at scrape, no query)."""
        self.depth.update(snapshot)

    @hookimpl
    async def awa_worker_started(self, worker: Any) -> None:
        """Track the worker; start the endpoint if this process does not serve one yet."""
        if worker not in self.workers:
            self.workers.append(worker)
        self._stopping.discard(id(worker))
        if self._server is None and self.port is not None:
            port = self.port_for_process()
            try:  # binds now, serves in a thread
                started = start_http_server(port, addr=self.host, registry=self.registry)
            except OSError as exc:
                self.port = None  # this process serves no metrics; it says so once
                log.error(
                    "cannot serve Prometheus metrics on %s port %d: %s; this worker runs "
                    "without them (a second `awa worker` on this host needs another "
                    "[metrics] prometheus_port, or run one `awa worker --processes N`, which "
                    "serves port+0 .. port+N-1)",
                    self.host,
                    port,
                    exc.strerror or exc,
                    extra={"action": "metrics_port_unavailable", "host": self.host, "port": port},
                )
                return
            self._server = started[0] if isinstance(started, tuple) else _Unclosable()
            self.serving_port = port
            log.info(
                "serving Prometheus metrics on %s port %d",
                self.host,
                port,
                extra={"action": "metrics_serving", "host": self.host, "port": port},
            )

    @hookimpl
    async def awa_worker_stopping(self, worker: Any) -> None:
        """Close the endpoint once every worker of the process is stopping (port released)."""
        self._stopping.add(id(worker))
        if self._server is not None and all(id(w) in self._stopping for w in self.workers):
            await asyncio.to_thread(self.close)

    # -- helpers ---------------------------------------------------------------------------
    def port_for_process(self) -> int:
        """``prometheus_port``, plus the supervisor slot minus one under ``--processes``."""
        assert self.port is not None
        slot = self.env.get(SLOT_ENV, "")
        return self.port + (int(slot) - 1 if slot.isdigit() and int(slot) > 0 else 0)

    def close(self) -> None:
        server, self._server, self.serving_port = self._server, None, None
        if server is not None:
            server.shutdown()
            server.server_close()


class _Unclosable:
    """An endpoint an old prometheus_client did not give a handle to: served until exit."""

    def shutdown(self) -> None:
        pass

    def server_close(self) -> None:
        pass


class _DepthCollector(Collector):
    """The backlog gauges, from the last snapshot the leader handed over."""

    def __init__(self, depth: DepthGauges) -> None:
        self.depth = depth

    def describe(self) -> list[Metric]:
        return list(self._families([]))

    def collect(self) -> Iterator[Metric]:
        return self._families(self.depth.current())

    @staticmethod
    def _families(rows: list[Any]) -> Iterator[Metric]:
        available = GaugeMetricFamily(
            "awa_queue_available_jobs",
            "Available jobs per queue (the maintenance leader's last snapshot).",
            labels=("queue",),
        )
        oldest = GaugeMetricFamily(
            "awa_queue_oldest_available_age_seconds",
            "Seconds the oldest due available job of each queue has waited (leader's snapshot).",
            labels=("queue",),
        )
        for row in rows:
            available.add_metric((row.queue,), row.available)
            oldest.add_metric((row.queue,), row.oldest_available_age or 0.0)
        yield available
        yield oldest


class _LimitCollector(Collector):
    """``awa_limit_waiting_jobs{limit}``, from the last counts the leader handed over."""

    def __init__(self, limits: LimitGauges) -> None:
        self.limits = limits

    def describe(self) -> list[Metric]:
        return [self._family({})]

    def collect(self) -> Iterator[Metric]:
        yield self._family(self.limits.current())

    @staticmethod
    def _family(values: dict[str, int]) -> Metric:
        gauge = GaugeMetricFamily(
            "awa_limit_waiting_jobs",
            "Due available jobs whose key is at its limit's max_running or rate (leader's count).",
            labels=("limit",),
        )
        for name, count in values.items():
            gauge.add_metric((name,), count)
        return gauge


class _WorkerCollector(Collector):
    """The families read from the workers when Prometheus scrapes (summed over workers)."""

    def __init__(self, plugin: PrometheusPlugin) -> None:
        self.plugin = plugin

    def describe(self) -> list[Metric]:
        return list(self._families({}, (0, 0, 0), 0, {}))

    def collect(self) -> Iterator[Metric]:
        inserted = duplicate = discarded = failures = 0
        running: dict[str, int] = {}
        unknown: dict[tuple[str, str], int] = {}
        for worker in list(self.plugin.workers):
            stats = worker.stats()
            inserted += stats.staged_inserted
            duplicate += stats.staged_duplicate
            discarded += stats.staged_discarded
            failures += stats.hook_failures
            for queue in stats.queues:
                running.setdefault(queue, 0)
            for queue, count in stats.running.items():
                running[queue] = running.get(queue, 0) + count
            for key, count in stats.unknown_kinds.items():
                unknown[key] = unknown.get(key, 0) + count
        return self._families(running, (inserted, duplicate, discarded), failures, unknown)

    @staticmethod
    def _families(
        running: dict[str, int],
        staged: tuple[int, int, int],
        failures: int,
        unknown: dict[tuple[str, str], int],
    ) -> Iterator[Metric]:
        inserted, duplicate, discarded = staged
        committed = CounterMetricFamily(
            "awa_job_staged_follow_ups_committed",
            "Handler-staged follow-ups of committed completions, by result.",
            labels=("result",),
        )
        committed.add_metric(("inserted",), inserted)
        committed.add_metric(("duplicate",), duplicate)
        yield committed
        yield CounterMetricFamily(
            "awa_job_staged_follow_ups_discarded",
            "Handler-staged follow-ups discarded (the job parked on a callback).",
            value=discarded,
        )
        yield CounterMetricFamily(
            "awa_hook_failures",
            "Hook and awa_job_event implementations that raised.",
            value=failures,
        )
        unknown_kind = CounterMetricFamily(
            "awa_jobs_unknown_kind",
            "Jobs failed because this worker registers no handler for their kind.",
            labels=("kind", "queue"),
        )
        for (kind, queue), count in sorted(unknown.items()):
            unknown_kind.add_metric((kind, queue), count)
        yield unknown_kind
        gauge = GaugeMetricFamily(
            "awa_jobs_running", "Jobs running in this process, by queue.", labels=("queue",)
        )
        for queue, count in sorted(running.items()):
            gauge.add_metric((queue,), count)
        yield gauge
