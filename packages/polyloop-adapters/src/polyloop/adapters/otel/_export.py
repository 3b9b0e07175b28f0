"""Providers that export over OTLP/HTTP, batched on the SDK's own threads (designs 0049, 0062)."""

from __future__ import annotations

import logging
import threading
import time
import weakref
from collections.abc import Callable, Mapping, Sequence

from opentelemetry.context import Context
from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import MetricReader, PeriodicExportingMetricReader
from opentelemetry.sdk.resources import SERVICE_NAME, Resource
from opentelemetry.sdk.trace import ReadableSpan, Span, SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult

from polyloop.adapters.otel import _names as n
from polyloop.adapters.otel._batch import BatchMetrics
from polyloop.adapters.otel._counts import shared_counts
from polyloop.adapters.otel._sink import OpenTelemetryEventSink
from polyloop.errors import ConfigurationError

__all__ = ["CountingSpanExporter", "OtlpTelemetry"]

logger = logging.getLogger("polyloop")


class CountingSpanExporter(SpanExporter):
    """Wraps a span exporter and counts the exports that failed (result or exception).

    Runs on the batch processor's thread; :attr:`failures` may be read from any thread.
    """

    def __init__(self, inner: SpanExporter) -> None:
        self._inner = inner
        self._lock = threading.Lock()
        self._failures = 0
        self._taken = 0
        self._closed = False

    @property
    def failures(self) -> int:
        """Exports that failed so far."""
        with self._lock:
            return self._failures

    @property
    def spans_taken(self) -> int:
        """Spans handed to :meth:`export` so far (sent, failed or being sent)."""
        with self._lock:
            return self._taken

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        with self._lock:
            self._taken += len(spans)
            closed = self._closed
        if closed:  # shut down: what is still queued is given up at once, not tried
            result = SpanExportResult.FAILURE
        else:
            try:
                result = self._inner.export(spans)
            except Exception:  # an exporter that raises loses its batch like one that fails
                result = SpanExportResult.FAILURE
        if result is not SpanExportResult.SUCCESS:
            with self._lock:
                self._failures += 1
        return result

    def shutdown(self) -> None:
        """Stop exporting: later exports fail at once; the wrapped exporter is shut down (its
        retries stop waiting). Idempotent."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
        self._inner.shutdown()

    def force_flush(self, timeout_millis: int = 30_000) -> bool:
        return self._inner.force_flush(timeout_millis)


class _BoundedSpans(SpanProcessor):
    """A :class:`BatchSpanProcessor` whose drops are counted.

    The SDK's processor drops a span when its queue is full and says so only in a log line. This
    one keeps at most ``max_queue_size`` spans pending — ended and not yet handed to the
    exporter — and drops (and counts) the newest beyond that, so the SDK's queue, as large,
    never fills. Pending includes a batch the SDK has taken from its queue and not yet handed
    over, so a drop may come a batch early; never late.
    """

    def __init__(
        self,
        inner: BatchSpanProcessor,
        exporter: CountingSpanExporter,
        max_queue_size: int,
        on_drop: Callable[[int], None],
    ) -> None:
        self._inner = inner
        self._exporter = exporter
        self._limit = max_queue_size
        self._on_drop = on_drop
        self._lock = threading.Lock()
        self._forwarded = 0
        self.dropped = 0

    def on_start(self, span: Span, parent_context: Context | None = None) -> None:
        self._inner.on_start(span, parent_context)

    def on_end(self, span: ReadableSpan) -> None:
        if not (span.context and span.context.trace_flags.sampled):
            return
        with self._lock:
            full = self._forwarded - self._exporter.spans_taken >= self._limit
            if full:
                self.dropped += 1
                dropped = self.dropped
            else:
                self._forwarded += 1
        if full:
            self._on_drop(dropped)
            return
        self._inner.on_end(span)

    def shutdown(self) -> None:
        self._inner.shutdown()  # type: ignore[no-untyped-call]

    def force_flush(self, timeout_millis: int = 30_000) -> bool:
        return self._inner.force_flush(timeout_millis)


def _signal_url(endpoint: str, path: str) -> str:
    if not endpoint.startswith(("http://", "https://")):
        raise ConfigurationError(
            f"The OTLP endpoint must be an http:// or https:// URL (OTLP/HTTP, e.g. "
            f"'http://127.0.0.1:4318'), got {endpoint.rpartition('@')[2]!r}."
        )
    return endpoint.rstrip("/") + path


class OtlpTelemetry:
    """A tracer provider and a meter provider exporting to one OTLP/HTTP endpoint.

    ``endpoint`` is the collector's base URL (``http://127.0.0.1:4318`` for a collector or
    Jaeger, ``http://127.0.0.1:6006`` for Phoenix); ``/v1/traces`` and ``/v1/metrics`` are
    appended. ``None`` takes the standard ``OTEL_EXPORTER_OTLP_*`` variables (endpoint,
    headers, timeout), as every OpenTelemetry SDK does. ``headers`` (an API key, for example)
    are sent with each export and never shown.

    Spans are queued (at most ``max_queue_size``; beyond that the newest are dropped) and sent
    every ``export_interval_seconds`` or when ``max_export_batch_size`` are waiting, on the
    SDK's worker thread, each export bounded by ``export_timeout_seconds``: a slow or dead
    collector never holds up the run. Failed exports are counted and reported by the sinks as
    event-delivery failures; dropped spans are counted in :attr:`dropped_spans` and the
    ``polyloop.telemetry.spans_dropped`` metric, and the first drop is logged. Call
    :meth:`shutdown` before the process exits (it sends what is queued, bounded by the export
    timeout).
    """

    def __init__(
        self,
        endpoint: str | None = None,
        *,
        service_name: str = "polyloop",
        headers: Mapping[str, str] | None = None,
        export_interval_seconds: float = 1.0,
        export_timeout_seconds: float = 10.0,
        max_queue_size: int = 2048,
        max_export_batch_size: int = 512,
        metrics: bool = True,
    ) -> None:
        for name, value in (
            ("export_interval_seconds", export_interval_seconds),
            ("export_timeout_seconds", export_timeout_seconds),
        ):
            if isinstance(value, bool) or not isinstance(value, int | float) or not value > 0:
                raise ConfigurationError(f"{name} must be a number > 0, got {value!r}.")
        if not isinstance(service_name, str) or not service_name:
            raise ConfigurationError(
                f"service_name must be a non-empty string naming the service in the traces, "
                f"got {service_name!r}."
            )
        if headers is not None and not all(
            isinstance(k, str) and isinstance(v, str) for k, v in headers.items()
        ):
            names = sorted(repr(k) for k in headers)
            raise ConfigurationError(
                "headers must map strings to strings (e.g. {'Authorization': 'Basic …'}); "
                f"check the values of {', '.join(names)} (not shown: they may be secrets)."
            )
        resource = Resource.create({SERVICE_NAME: service_name})
        header_map = None if headers is None else dict(headers)
        span_exporter = OTLPSpanExporter(
            endpoint=None if endpoint is None else _signal_url(endpoint, "/v1/traces"),
            headers=header_map,
            timeout=export_timeout_seconds,
        )
        self._spans = CountingSpanExporter(span_exporter)
        self._timeout = float(export_timeout_seconds)
        self._sinks: weakref.WeakSet[OpenTelemetryEventSink] = weakref.WeakSet()
        self.tracer_provider = TracerProvider(resource=resource)
        self._processor = _BoundedSpans(
            BatchSpanProcessor(
                self._spans,
                max_queue_size=max_queue_size,
                schedule_delay_millis=round(export_interval_seconds * 1000),
                max_export_batch_size=max_export_batch_size,
                export_timeout_millis=round(export_timeout_seconds * 1000),
            ),
            self._spans,
            max_queue_size,
            self._dropped,
        )
        self.tracer_provider.add_span_processor(self._processor)
        readers: list[MetricReader] = []
        if metrics:
            metric_exporter = OTLPMetricExporter(
                endpoint=None if endpoint is None else _signal_url(endpoint, "/v1/metrics"),
                headers=header_map,
                timeout=export_timeout_seconds,
            )
            readers.append(
                PeriodicExportingMetricReader(
                    metric_exporter,
                    export_interval_millis=max(1000, round(export_interval_seconds * 1000)),
                    export_timeout_millis=round(export_timeout_seconds * 1000),
                )
            )
        self.meter_provider = MeterProvider(resource=resource, metric_readers=readers)
        self._max_queue_size = max_queue_size
        self._drops = shared_counts(self.meter_provider).counter(
            n.SPANS_DROPPED_METRIC,
            "{span}",
            "Spans dropped because the export queue was full (the collector is slow or away).",
        )

    def __repr__(self) -> str:
        return "OtlpTelemetry(...)"  # never the headers

    @property
    def export_failures(self) -> int:
        """Span exports that failed so far."""
        return self._spans.failures

    @property
    def dropped_spans(self) -> int:
        """Spans dropped so far because the export queue was full."""
        return self._processor.dropped

    def _dropped(self, dropped: int) -> None:
        # On the thread that ended the span: the count so far, for the metric reader; the
        # first drop logged.
        self._drops[()] = max(dropped, self._drops.get((), 0))
        if dropped == 1:
            logger.warning(
                "polyloop: the OpenTelemetry span queue is full (max_queue_size=%d): spans are "
                "being dropped and counted in OtlpTelemetry.dropped_spans and the %s metric; the "
                "collector is slow or unreachable, or raise max_queue_size",
                self._max_queue_size,
                n.SPANS_DROPPED_METRIC,
            )

    def event_sink(
        self,
        *,
        capture_content: bool = False,
        agent_name: str = "polyloop",
        provider_name: str | None = None,
    ) -> OpenTelemetryEventSink:
        """A sink on these providers; its ``emit`` reports failed exports as delivery failures."""
        sink = OpenTelemetryEventSink(
            tracer_provider=self.tracer_provider,
            meter_provider=self.meter_provider,
            capture_content=capture_content,
            agent_name=agent_name,
            export_failures=lambda: self._spans.failures,
            provider_name=provider_name,
        )
        self._sinks.add(sink)
        return sink

    def batch_metrics(self, *, batch: str = "batch") -> BatchMetrics:
        """A ``run_batch`` report observer measuring on this meter provider."""
        return BatchMetrics(self.meter_provider, batch=batch)

    def force_flush(self, timeout_seconds: float = 10.0) -> bool:
        """Send what is queued now; whether everything went out within the timeout."""
        millis = round(timeout_seconds * 1000)
        spans = self.tracer_provider.force_flush(millis)
        measurements = self.meter_provider.force_flush(millis)
        return spans and measurements

    def shutdown(self, timeout_seconds: float | None = None) -> None:
        """End the invocation spans of runs that raised instead of finishing (as errors), send
        what is queued, and stop the export threads — within ``timeout_seconds`` (default: the
        export timeout), however many batches wait and whatever the collector does. Spans not
        sent by then are given up (counted in :attr:`export_failures`)."""
        for sink in list(self._sinks):
            sink.end_open_invocations()
        limit = self._timeout if timeout_seconds is None else float(timeout_seconds)
        deadline = time.monotonic() + limit
        # Each provider's own shutdown waits up to 30 s per signal (the SDK's default, which no
        # argument of TracerProvider.shutdown changes): both run on threads of their own here,
        # and what is still exporting at the deadline is cut off.
        stops = [
            threading.Thread(
                target=self.tracer_provider.shutdown, name="polyloop-otel-spans", daemon=True
            ),
            threading.Thread(
                target=self.meter_provider.shutdown,
                kwargs={"timeout_millis": max(1.0, limit * 1000)},
                name="polyloop-otel-metrics",
                daemon=True,
            ),
        ]
        for stop in stops:
            stop.start()
        for stop in stops:
            stop.join(max(0.0, deadline - time.monotonic()))
        if stops[0].is_alive():
            # The queue's last batches: refused at once, so the SDK's worker ends promptly.
            self._spans.shutdown()
