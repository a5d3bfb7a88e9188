"""Built-in plugin: OpenTelemetry traces and metrics, loaded only when ``[telemetry]
otlp_endpoint`` is set (extra ``otel``). Off, it is never imported and costs nothing.

Traces (one trace from the enqueuer through every attempt to the follow-ups):

- **Enqueue.** Every insert in this process (``awa.insert``, clients, follow-ups) records a
  short ``awa.enqueue <kind>`` span (kind PRODUCER) whose parent is the current span — the
  web request's, say — and stores its W3C context in the job's metadata as
  ``awa.traceparent`` (a caller-set ``awa.traceparent`` is kept). A follow-up's parent is
  its trigger's ``awa.traceparent`` (the core marks follow-ups with their trigger, see
  :mod:`awa_cli.metadata`), so follow-ups stay in the trace whichever process runs them.
- **Attempts.** Each outcome event (``Completed``, ``Retried``, ``Exhausted``,
  ``Cancelled``, ``Rescued``, ``WaitingForCallback``) becomes one ``awa.attempt <kind>`` span
  (kind CONSUMER) from the attempt's start (``attempted_at``) to the event, child of the job's
  ``awa.traceparent``: retries are sibling attempts in the same trace. Attributes:
  ``awa.job.id``, ``awa.job.kind``, ``awa.job.queue``, ``awa.job.attempt``,
  ``awa.job.max_attempts``, ``awa.job.outcome``, and where they apply ``awa.rescue.reason``,
  ``awa.job.error``, ``awa.cancel.reason``, ``awa.job.next_run_at``. Failed outcomes set the
  span status to ERROR. Spans are built from the committed row when the outcome commits, so
  nothing is held in memory while a job runs, and a rescue (in the leader's process) still
  closes the attempt a dead worker left open.
- **Callback waits.** A resolution of a job this process saw park (``WaitingForCallback``),
  a callback's ``Completed`` (duration 0) and an ``expired_callback`` rescue become an
  ``awa.callback_wait <kind>`` span from the park (or, when the park happened in another
  process, from the attempt's start) to the resolution; a ``resume_external`` that re-runs
  the job ends it at the next ``Started``.
- **Bounded.** Every text attribute is cut to 1,024 characters, error texts to their first
  2,048; the plugin's own tracer provider also applies span limits (32 attributes, 16 events).

Metrics (mirroring the Prometheus plugin): ``awa.jobs`` {kind, queue, outcome},
``awa.job.duration`` (s) {kind, queue}, ``awa.job.rescues`` {reason}, and, read from this
process's workers at collection, ``awa.job.staged_follow_ups.committed`` {result},
``awa.job.staged_follow_ups.discarded``, ``awa.hook.failures``, ``awa.jobs.running`` {queue}.
Queue depth (``awa.queue.available``, ``awa.queue.oldest_available_age``) is exported from the
leader's snapshot (``awa_queue_depth``), in the leader's process only.
"""

from __future__ import annotations

import logging
import time
from collections import OrderedDict
from collections.abc import Iterable, Mapping
from datetime import datetime
from typing import Any

from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.metrics import CallbackOptions, MeterProvider, Observation
from opentelemetry.trace import SpanKind, Status, StatusCode, TracerProvider
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from awa_cli import metadata
from awa_cli.depth import DepthGauges
from awa_cli.plugins.marker import hookimpl

NAME = "awa_cli.plugins.otel"
TRACEPARENT = "awa.traceparent"
MAX_ATTRIBUTE = 1024
MAX_ERROR = 2048
MAX_WAITING = 10_000  # callback parks remembered for their wait spans (oldest forgotten first)
FAILED_OUTCOMES = {"retried", "exhausted", "rescued"}
_PROPAGATOR = TraceContextTextMapPropagator()


def _clip(value: str, limit: int = MAX_ATTRIBUTE) -> str:
    return value if len(value) <= limit else value[: limit - 1] + "…"


def _ns(at: datetime | None) -> int | None:
    return None if at is None else int(at.timestamp() * 1_000_000_000)


def parent_context(meta: Mapping[str, Any] | None) -> Context | None:
    """The span context stored in a job's (or trigger's) metadata, if any."""
    value = (meta or {}).get(TRACEPARENT)
    if not isinstance(value, str):
        return None
    ctx = _PROPAGATOR.extract({"traceparent": value})
    return ctx if trace.get_current_span(ctx).get_span_context().is_valid else None


class OtelPlugin:
    """Traces and metrics of one process; register the instance with the plugin manager.

    Give ``tracer_provider`` / ``meter_provider`` to use your own (tests use the SDK's
    in-memory exporter); otherwise both export over OTLP/HTTP to ``endpoint``.
    """

    def __init__(
        self,
        endpoint: str | None = None,
        *,
        service_name: str = "awa-worker",
        tracer_provider: TracerProvider | None = None,
        meter_provider: MeterProvider | None = None,
    ) -> None:
        if tracer_provider is None or meter_provider is None:
            built_tracer, built_meter = _sdk_providers(endpoint, service_name)
            tracer_provider = tracer_provider or built_tracer
            meter_provider = meter_provider or built_meter
        self.tracer_provider = tracer_provider
        self.meter_provider = meter_provider
        self.tracer = tracer_provider.get_tracer("awa_cli")
        self.workers: list[Any] = []
        self.depth = DepthGauges()
        self._waiting: OrderedDict[int, int] = OrderedDict()
        self._instruments(meter_provider.get_meter("awa_cli"))
        metadata.register(self.contribute)
        _ACTIVE.append(self)

    def flush(self, timeout: float) -> None:
        """Export what is buffered, waiting at most ``timeout`` seconds per provider (a
        short-lived command: `awa job enqueue` sends its enqueue span)."""
        millis = max(1, int(timeout * 1000))
        for provider in (self.tracer_provider, self.meter_provider):
            flush = getattr(provider, "force_flush", None)
            if flush is not None:
                flush(timeout_millis=millis)

    def close(self) -> None:
        """Stop contributing trace context and flush what is buffered."""
        metadata.unregister(self.contribute)
        if self in _ACTIVE:
            _ACTIVE.remove(self)
        for provider in (self.tracer_provider, self.meter_provider):
            flush = getattr(provider, "force_flush", None)
            if flush is not None:
                flush()

    # -- enqueue ---------------------------------------------------------------------------
    def contribute(
        self, kind: str, queue: str, meta: Mapping[str, Any], trigger: Mapping[str, Any] | None
    ) -> dict[str, Any] | None:
        """The metadata contributor: an enqueue span and its ``awa.traceparent``."""
        return enqueue_span(self.tracer, kind, queue, meta, trigger)

    # -- events ----------------------------------------------------------------------------
    @hookimpl
    async def awa_job_event(self, event: Any) -> None:
        """Count the event and record its span (in memory, on the loop: no I/O here; the
        exporter sends in batches from its own thread)."""
        job, name = event.job, event.name
        now = time.time_ns()
        self._count(event)
        if name == "started":
            parked = self._waiting.pop(job.id, None)
            if parked is not None:  # resume_external re-ran the job: its wait ended
                self._callback_span(job, "resumed", parked, now, event)
            return
        if name == "waiting_for_callback":
            self._remember_park(job.id, now)
        elif self._is_callback_resolution(event):
            start = self._waiting.pop(job.id, None) or _ns(job.attempted_at) or now
            self._callback_span(job, name, start, now, event)
            return
        self._attempt_span(job, name, _ns(job.attempted_at) or now, now, event)

    awa_job_event.awa_reads_args = False  # type: ignore[attr-defined]

    @hookimpl
    async def awa_worker_started(self, worker: Any) -> None:
        if worker not in self.workers:
            self.workers.append(worker)

    @hookimpl
    def awa_worker_stopping(self, worker: Any) -> None:
        """Flush buffered spans and metrics while the process is still up."""
        if worker in self.workers:
            self.workers.remove(worker)
        for provider in (self.tracer_provider, self.meter_provider):
            flush = getattr(provider, "force_flush", None)
            if flush is not None:
                flush()

    @hookimpl
    async def awa_queue_depth(self, snapshot: Iterable[Any]) -> None:
        """Keep the leader's queue-depth snapshot for the backlog gauges."""
        self.depth.update(snapshot)

    # -- helpers ---------------------------------------------------------------------------
    def _remember_park(self, job_id: int, at: int) -> None:
        self._waiting[job_id] = at
        self._waiting.move_to_end(job_id)
        while len(self._waiting) > MAX_WAITING:
            self._waiting.popitem(last=False)

    def _is_callback_resolution(self, event: Any) -> bool:
        if event.job.id in self._waiting:
            return True
        if event.name == "completed" and not getattr(event, "duration", 0.0):
            return True
        return event.name == "rescued" and str(getattr(event, "reason", "")) == "expired_callback"

    def _attributes(self, job: Any, outcome: str, event: Any) -> dict[str, Any]:
        attrs: dict[str, Any] = {
            "awa.job.id": job.id,
            "awa.job.kind": _clip(job.kind),
            "awa.job.queue": _clip(job.queue),
            "awa.job.attempt": int(getattr(event, "attempt", 0) or job.attempt),
            "awa.job.max_attempts": job.max_attempts,
            "awa.job.outcome": outcome,
        }
        if (reason := getattr(event, "reason", None)) is not None:
            key = "awa.rescue.reason" if event.name == "rescued" else "awa.cancel.reason"
            attrs[key] = _clip(str(reason))
        if error := getattr(event, "error", ""):
            attrs["awa.job.error"] = _clip(str(error), MAX_ERROR)
        if (next_run_at := getattr(event, "next_run_at", None)) is not None:
            attrs["awa.job.next_run_at"] = next_run_at.isoformat()
        return attrs

    def _attempt_span(self, job: Any, outcome: str, start: int, end: int, event: Any) -> None:
        span = self.tracer.start_span(
            f"awa.attempt {job.kind}",
            context=parent_context(job.metadata),
            kind=SpanKind.CONSUMER,
            attributes=self._attributes(job, outcome, event),
            start_time=min(start, end),
        )
        if outcome in FAILED_OUTCOMES:
            span.set_status(Status(StatusCode.ERROR, _clip(str(getattr(event, "error", outcome)))))
        span.end(end_time=end)

    def _callback_span(self, job: Any, outcome: str, start: int, end: int, event: Any) -> None:
        span = self.tracer.start_span(
            f"awa.callback_wait {job.kind}",
            context=parent_context(job.metadata),
            kind=SpanKind.CONSUMER,
            attributes={
                **self._attributes(job, outcome, event),
                "awa.callback.resolution": outcome,
            },
            start_time=min(start, end),
        )
        if outcome in FAILED_OUTCOMES:
            span.set_status(Status(StatusCode.ERROR, outcome))
        span.end(end_time=end)

    # -- metrics ---------------------------------------------------------------------------
    def _instruments(self, meter: Any) -> None:
        self.jobs = meter.create_counter(
            "awa.jobs", description="Job lifecycle events by kind, queue and outcome."
        )
        self.durations = meter.create_histogram(
            "awa.job.duration", unit="s", description="Handler wall time of completed jobs."
        )
        self.rescues = meter.create_counter(
            "awa.job.rescues", description="Jobs rescued by maintenance, by reason."
        )
        meter.create_observable_counter(
            "awa.job.staged_follow_ups.committed",
            callbacks=[self._observe_staged],
            description="Handler-staged follow-ups of committed completions, by result.",
        )
        meter.create_observable_counter(
            "awa.job.staged_follow_ups.discarded",
            callbacks=[lambda _: [Observation(self._staged_total("discarded"))]],
            description="Handler-staged follow-ups discarded (the job parked on a callback).",
        )
        meter.create_observable_counter(
            "awa.hook.failures",
            callbacks=[
                lambda _: [Observation(sum(w.dispatcher.failures for w in list(self.workers)))]
            ],
            description="Hook and awa_job_event implementations that raised.",
        )
        meter.create_observable_gauge(
            "awa.jobs.running", callbacks=[self._observe_running], description="Jobs running here."
        )
        meter.create_observable_gauge(
            "awa.queue.available",
            callbacks=[
                lambda _: [
                    Observation(d.available, {"queue": d.queue}) for d in self.depth.current()
                ]
            ],
            description="Available jobs per queue (the leader's last snapshot).",
        )
        meter.create_observable_gauge(
            "awa.queue.oldest_available_age",
            unit="s",
            callbacks=[
                lambda _: [
                    Observation(d.oldest_available_age or 0.0, {"queue": d.queue})
                    for d in self.depth.current()
                ]
            ],
            description="Age of the oldest available job per queue (the leader's last snapshot).",
        )

    def _count(self, event: Any) -> None:
        job = event.job
        self.jobs.add(1, {"kind": job.kind, "queue": job.queue, "outcome": event.name})
        if event.name == "completed":
            duration = float(getattr(event, "duration", 0.0) or 0.0)
            if duration > 0.0:
                self.durations.record(duration, {"kind": job.kind, "queue": job.queue})
        elif event.name == "rescued":
            self.rescues.add(1, {"reason": str(getattr(event, "reason", ""))})

    def _staged_total(self, key: str) -> int:
        return sum(w.core.counters.snapshot()[key] for w in list(self.workers))

    def _observe_staged(self, _: CallbackOptions) -> list[Observation]:
        return [
            Observation(self._staged_total("inserted"), {"result": "inserted"}),
            Observation(self._staged_total("duplicate"), {"result": "duplicate"}),
        ]

    def _observe_running(self, _: CallbackOptions) -> list[Observation]:
        running: dict[str, int] = {}
        for worker in list(self.workers):
            for queue in worker.queues:
                running.setdefault(queue, 0)
            for job in list(dict(worker.running).values()):
                running[job.queue] = running.get(job.queue, 0) + 1
        return [Observation(n, {"queue": q}) for q, n in sorted(running.items())]


_ACTIVE: list[OtelPlugin] = []  # the plugins of this process (the ambient spans defer to them)


def flush_active(timeout: float) -> None:
    """Flush every OpenTelemetry plugin of this process, each within ``timeout`` seconds."""
    for plugin in list(_ACTIVE):
        plugin.flush(timeout)


def enqueue_span(
    tracer: trace.Tracer,
    kind: str,
    queue: str,
    meta: Mapping[str, Any],
    trigger: Mapping[str, Any] | None,
) -> dict[str, Any] | None:
    """Record one ``awa.enqueue <kind>`` span and return its ``awa.traceparent`` entry (None:
    the caller set one, or the span has no valid context)."""
    if TRACEPARENT in meta:
        return None
    parent = parent_context(trigger) if trigger is not None else None
    span = tracer.start_span(
        f"awa.enqueue {kind}",
        context=parent,  # None: the current context (the caller's span, or a new trace)
        kind=SpanKind.PRODUCER,
        attributes={"awa.job.kind": _clip(kind), "awa.job.queue": _clip(queue)},
    )
    span.end()
    carrier: dict[str, str] = {}
    _PROPAGATOR.inject(carrier, trace.set_span_in_context(span))
    return {TRACEPARENT: carrier["traceparent"]} if "traceparent" in carrier else None


def ambient_contributor() -> metadata.Contributor | None:
    """The enqueue-span contributor for an application tracing with its own SDK provider
    (:mod:`awa_cli.plugins.ambient`); None while awa's plugin runs here or no SDK is set."""
    if _ACTIVE:
        return None
    provider = trace.get_tracer_provider()
    if isinstance(provider, trace.ProxyTracerProvider | trace.NoOpTracerProvider):
        return None
    tracer = provider.get_tracer("awa_cli")

    def contribute(
        kind: str, queue: str, meta: Mapping[str, Any], trigger: Mapping[str, Any] | None
    ) -> dict[str, Any] | None:
        return enqueue_span(tracer, kind, queue, meta, trigger)

    return contribute


def _sdk_providers(endpoint: str | None, service_name: str) -> tuple[Any, Any]:
    """The SDK's providers exporting OTLP/HTTP (protobuf) to ``endpoint``, with span limits."""
    from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.metrics import MeterProvider as SdkMeterProvider
    from opentelemetry.sdk.metrics.export import PeriodicExportingMetricReader
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import SpanLimits
    from opentelemetry.sdk.trace import TracerProvider as SdkTracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    if endpoint is None:
        raise ValueError("an OTLP endpoint is needed when no providers are given")
    base = endpoint.rstrip("/")
    fold_exporter_logs(base)
    resource = Resource.create({"service.name": service_name})
    limits = SpanLimits(max_attributes=32, max_events=16, max_attribute_length=MAX_ERROR)
    # No export at interpreter exit: a command that only loads the plugins (`awa plugins`)
    # must not wait on (or print about) a collector that is down. The worker flushes at
    # awa_worker_stopping and `awa job enqueue` flushes its span, each with a bound.
    tracer_provider = SdkTracerProvider(
        resource=resource, span_limits=limits, shutdown_on_exit=False
    )
    tracer_provider.add_span_processor(
        BatchSpanProcessor(OTLPSpanExporter(endpoint=f"{base}/v1/traces", timeout=EXPORT_TIMEOUT))
    )
    reader = PeriodicExportingMetricReader(
        OTLPMetricExporter(endpoint=f"{base}/v1/metrics", timeout=EXPORT_TIMEOUT)
    )
    meter_provider = SdkMeterProvider(
        resource=resource, metric_readers=[reader], shutdown_on_exit=False
    )
    return tracer_provider, meter_provider


EXPORT_TIMEOUT = 5.0  # seconds an OTLP export may take, its retries included
FOLD_SECONDS = 60.0  # one line per exporter logger per minute while the collector is down
EXPORTER_LOGGERS = (
    "opentelemetry.exporter.otlp.proto.http.trace_exporter",
    "opentelemetry.exporter.otlp.proto.http.metric_exporter",
    "opentelemetry.exporter.otlp.proto.http._log_exporter",
    "opentelemetry.sdk.trace.export",
    "opentelemetry.sdk.metrics._internal.export",
    "opentelemetry.sdk._shared_internal",
)


class FoldedExporterLog(logging.Filter):
    """The OpenTelemetry exporters' complaints about an unreachable collector, folded as
    awa's own database warnings are: one short line (no traceback, no 300-character urllib3
    text) per logger per :data:`FOLD_SECONDS`, naming the endpoint."""

    def __init__(self, endpoint: str) -> None:
        super().__init__()
        self.endpoint = endpoint
        self.last: dict[str, float] = {}

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno < logging.WARNING:
            return True
        now = time.monotonic()
        if now - self.last.get(record.name, float("-inf")) < FOLD_SECONDS:
            return False
        self.last[record.name] = now
        text = record.getMessage()
        reason = "collector unreachable" if "Max retries" in text or "onnection" in text else text
        record.msg = "OpenTelemetry export to %s failing: %s (repeats folded for %ds)"
        record.args = (
            self.endpoint,
            _clip(reason.splitlines()[0] if reason else "?", 200),
            int(FOLD_SECONDS),
        )
        record.exc_info = None
        record.exc_text = None
        record.stack_info = None
        return True


def fold_exporter_logs(endpoint: str) -> None:
    """Install :class:`FoldedExporterLog` on the exporters' loggers (once per process; a
    later plugin's endpoint replaces the one it names)."""
    for name in EXPORTER_LOGGERS:
        target = logging.getLogger(name)
        installed = [f for f in target.filters if isinstance(f, FoldedExporterLog)]
        if installed:
            installed[0].endpoint = endpoint
        else:
            target.addFilter(FoldedExporterLog(endpoint))
