"""A real OTLP/HTTP receiver for metrics on loopback (no collector binary can be installed
here, and Phoenix takes traces only): it decodes each export with the OpenTelemetry protobuf
definitions and keeps the data points. It takes traces too, keeping the span names, or holds
every trace export unanswered (a collector whose trace pipeline hangs)."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import (
    ExportMetricsServiceRequest,
    ExportMetricsServiceResponse,
)
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)


class MetricsReceiver:
    """Points received, as (metric name, attributes, value), in arrival order."""

    def __init__(self) -> None:
        self.points: list[tuple[str, dict[str, str], float]] = []
        self.services: set[str] = set()
        #: (span name, trace id in hex) of every span received.
        self.spans: list[tuple[str, str]] = []
        #: (span name, its string, integer and boolean attributes) of every span received.
        self.span_attributes: list[tuple[str, dict[str, str | int | bool]]] = []
        self._lock = threading.Lock()

    def take_spans(self, body: bytes) -> None:
        request = ExportTraceServiceRequest()
        request.ParseFromString(body)
        with self._lock:
            for resource in request.resource_spans:
                for scope in resource.scope_spans:
                    for span in scope.spans:
                        self.spans.append((span.name, span.trace_id.hex()))
                        attributes: dict[str, str | int | bool] = {}
                        for attribute in span.attributes:
                            kind = attribute.value.WhichOneof("value")
                            if kind in ("string_value", "int_value", "bool_value"):
                                attributes[attribute.key] = getattr(attribute.value, kind)
                        self.span_attributes.append((span.name, attributes))

    def take(self, body: bytes) -> None:
        request = ExportMetricsServiceRequest()
        request.ParseFromString(body)
        with self._lock:
            for resource in request.resource_metrics:
                for attribute in resource.resource.attributes:
                    if attribute.key == "service.name":
                        self.services.add(attribute.value.string_value)
                for scope in resource.scope_metrics:
                    for metric in scope.metrics:
                        kind = metric.WhichOneof("data")
                        for point in getattr(metric, kind).data_points:
                            attributes = {a.key: a.value.string_value for a in point.attributes}
                            value = (
                                point.as_double
                                if point.WhichOneof("value") == "as_double"
                                else float(point.as_int)
                            )
                            self.points.append((metric.name, attributes, value))

    def last(self, name: str) -> dict[tuple[tuple[str, str], ...], float]:
        """The latest value of each attribute set of metric ``name`` (counters are cumulative)."""
        with self._lock:
            return {
                tuple(sorted(attributes.items())): value
                for metric, attributes, value in self.points
                if metric == name
            }


@contextlib.contextmanager
def metrics_receiver(*, hold_traces: bool = False) -> Iterator[tuple[MetricsReceiver, str]]:
    """A receiver serving ``POST /v1/metrics`` and ``/v1/traces`` on a free loopback port;
    yields it and its URL. ``hold_traces``: trace exports are read and never answered (until
    the receiver stops)."""
    receiver = MetricsReceiver()
    released = threading.Event()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
            if self.path == "/v1/traces":
                if hold_traces:
                    released.wait()
                    return
                receiver.take_spans(body)
                answer = ExportTraceServiceResponse().SerializeToString()
            elif self.path == "/v1/metrics":
                receiver.take(body)
                answer = ExportMetricsServiceResponse().SerializeToString()
            else:
                self.send_response(404)
                self.end_headers()
                return
            self.send_response(200)
            self.send_header("Content-Type", "application/x-protobuf")
            self.send_header("Content-Length", str(len(answer)))
            self.end_headers()
            self.wfile.write(answer)

        def log_message(self, format: str, *args: object) -> None:
            return None

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield receiver, f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        released.set()
        server.shutdown()
        server.server_close()
        thread.join()
