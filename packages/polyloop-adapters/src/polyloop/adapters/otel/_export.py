"""Providers that export over OTLP/HTTP, batched on the SDK's own threads (design 0049)."""

from __future__ import annotations

import threading
import weakref
from collections.abc import Mapping, Sequence

from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import MetricReader, PeriodicExportingMetricReader
from opentelemetry.sdk.resources import SERVICE_NAME, Resource
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult

from polyloop.adapters.otel._batch import BatchMetrics
from polyloop.adapters.otel._sink import OpenTelemetryEventSink
from polyloop.errors import ConfigurationError

__all__ = ["CountingSpanExporter", "OtlpTelemetry"]


class CountingSpanExporter(SpanExporter):
    """Wraps a span exporter and counts the exports that failed (result or exception).

    Runs on the batch processor's thread; :attr:`failures` may be read from any thread.
    """

    def __init__(self, inner: SpanExporter) -> None:
        self._inner = inner
        self._lock = threading.Lock()
        self._failures = 0

    @property
    def failures(self) -> int:
        """Exports that failed so far."""
        with self._lock:
            return self._failures

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        try:
            result = self._inner.export(spans)
        except Exception:  # an exporter that raises loses its batch like one that fails
            result = SpanExportResult.FAILURE
        if result is not SpanExportResult.SUCCESS:
            with self._lock:
                self._failures += 1
        return result

    def shutdown(self) -> None:
        self._inner.shutdown()

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
    event-delivery failures. Call :meth:`shutdown` before the process exits (it sends what
    is queued, bounded by the export timeout).
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
        self._sinks: weakref.WeakSet[OpenTelemetryEventSink] = weakref.WeakSet()
        self.tracer_provider = TracerProvider(resource=resource)
        self.tracer_provider.add_span_processor(
            BatchSpanProcessor(
                self._spans,
                max_queue_size=max_queue_size,
                schedule_delay_millis=round(export_interval_seconds * 1000),
                max_export_batch_size=max_export_batch_size,
                export_timeout_millis=round(export_timeout_seconds * 1000),
            )
        )
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

    def __repr__(self) -> str:
        return "OtlpTelemetry(...)"  # never the headers

    @property
    def export_failures(self) -> int:
        """Span exports that failed so far."""
        return self._spans.failures

    def event_sink(
        self, *, capture_content: bool = False, agent_name: str = "polyloop"
    ) -> OpenTelemetryEventSink:
        """A sink on these providers; its ``emit`` reports failed exports as delivery failures."""
        sink = OpenTelemetryEventSink(
            tracer_provider=self.tracer_provider,
            meter_provider=self.meter_provider,
            capture_content=capture_content,
            agent_name=agent_name,
            export_failures=lambda: self._spans.failures,
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

    def shutdown(self) -> None:
        """End the invocation spans of runs that raised instead of finishing (as errors), send
        what is queued, and stop the export threads."""
        for sink in list(self._sinks):
            sink.end_open_invocations()
        self.tracer_provider.shutdown()
        self.meter_provider.shutdown()
