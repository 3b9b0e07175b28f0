"""Cost of the OpenTelemetry event sink per step (issue 30): the loop bench's runs (memory store,
zero-latency seams, one tool action per step) with and without the sink, beside the
OpenTelemetry SDK's own cost for the same spans made directly.

    uv run python bench/otel_bench.py [--quick]

Every figure is CPU time per step: of the thread that drives the run (what the run pays), and
of the whole process (adding the batch processor's export thread). Spans go to a real
``TracerProvider`` with a ``BatchSpanProcessor`` whose exporter discards them (encoding for the
wire happens on the export thread, after the run has moved on); metrics to a real
``MeterProvider``. Rows:

- ``loop alone``: the run with a sink that does nothing.
- ``loop + sink``: the run with ``OpenTelemetryEventSink`` (spans and metrics).
- ``SDK alone``: the same spans (one invocation; per step a chat span and an execute_tool
  span, with as many attributes) made straight on the SDK, without a run — the SDK's own
  share.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import gc
import statistics
import time
from collections.abc import Sequence

from opentelemetry import trace
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult
from opentelemetry.trace import SpanKind

from loop_bench import setup
from polyloop.adapters.otel import OpenTelemetryEventSink
from polyloop.session import run
from polyloop.stores.memory import MemoryRunStore


class Discard(SpanExporter):
    def __init__(self) -> None:
        self.spans = 0

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        self.spans += len(spans)
        return SpanExportResult.SUCCESS

    def shutdown(self) -> None:
        return None


def providers() -> tuple[TracerProvider, MeterProvider, Discard]:
    exporter = Discard()
    tracer_provider = TracerProvider()
    tracer_provider.add_span_processor(BatchSpanProcessor(exporter, max_queue_size=1_000_000))
    return tracer_provider, MeterProvider(metric_readers=[InMemoryMetricReader()]), exporter


def _clocks() -> tuple[float, float]:
    return time.thread_time(), time.process_time()


async def loop_run(steps: int, with_sink: bool) -> tuple[float, float]:
    """CPU seconds (driving thread, process) of one ``steps``-step run, export included."""
    definition, request = setup(steps, MemoryRunStore(), with_tool=True)
    tracer_provider, meter_provider, exporter = providers()
    if with_sink:
        sink = OpenTelemetryEventSink(
            tracer_provider=tracer_provider, meter_provider=meter_provider
        )
        definition = dataclasses.replace(definition, event_sink=sink)
    gc.collect()
    thread0, process0 = _clocks()
    result = await run(definition, request)
    thread1, _ = _clocks()
    tracer_provider.force_flush()
    _, process1 = _clocks()
    assert len(result.steps) == steps
    if with_sink:
        assert exporter.spans == 2 * steps, exporter.spans  # the final step has no action
    tracer_provider.shutdown()
    return thread1 - thread0, process1 - process0


def sdk_alone(steps: int) -> tuple[float, float]:
    """CPU seconds of the same spans made straight on the SDK (the sink's counts are plain
    dictionary additions, read by the metric reader on its own thread: no SDK call)."""
    tracer_provider, _, exporter = providers()
    tracer = tracer_provider.get_tracer("bench")
    gc.collect()
    thread0, process0 = _clocks()
    invocation = tracer.start_span(
        "invoke_agent polyloop", attributes={f"a{i}": i for i in range(6)}
    )
    context = trace.set_span_in_context(invocation)
    for k in range(steps):
        began = time.time_ns()
        chat = tracer.start_span(
            "chat",
            context=context,
            kind=SpanKind.CLIENT,
            attributes={"o": "chat", "r": "r", "k": k, "p": True, "id": "m"},
            start_time=began,
        )
        chat.end()
        if k < steps - 1:
            tool = tracer.start_span(
                "execute_tool noop",
                context=context,
                attributes={
                    "o": "x",
                    "id": "a",
                    "r": "r",
                    "k": k,
                    "p": "never",
                    "s": "executed",
                    "y": False,
                    "c": False,
                    "n": "noop",
                },
                start_time=began,
            )
            tool.end()
    for name in ("s", "n", "d", "l", "a"):
        invocation.set_attribute(name, 1)
    invocation.end()
    thread1, _ = _clocks()
    tracer_provider.force_flush()
    _, process1 = _clocks()
    assert exporter.spans == 2 * steps, exporter.spans
    tracer_provider.shutdown()
    return thread1 - thread0, process1 - process0


async def main(quick: bool) -> None:
    steps, repeats = (1_000, 5) if quick else (1_000, 21)
    print(
        f"OpenTelemetry sink cost — {steps}-step runs, one tool action per step, {repeats} repeats"
    )
    print(f"{'':24} {'run thread µs/step':>19} {'process µs/step':>16}")
    rows: dict[str, tuple[float, float]] = {}
    for label in ("loop alone", "loop + sink", "SDK alone"):
        samples: list[tuple[float, float]] = []
        for attempt in range(repeats + 1):
            if label == "SDK alone":
                sample = sdk_alone(steps)
            else:
                sample = await loop_run(steps, with_sink=label == "loop + sink")
            if attempt:  # the first is a warm-up
                samples.append(sample)
        thread = statistics.median(s[0] for s in samples) / steps * 1e6
        process = statistics.median(s[1] for s in samples) / steps * 1e6
        rows[label] = (thread, process)
        print(f"{label:24} {thread:19.1f} {process:16.1f}")
    sink = tuple(w - a for w, a in zip(rows["loop + sink"], rows["loop alone"], strict=True))
    own = tuple(s - d for s, d in zip(sink, rows["SDK alone"], strict=True))
    print(f"{'sink (with SDK)':24} {sink[0]:19.1f} {sink[1]:16.1f}   target ≤ 100 µs/step")
    print(f"{'sink’s own share':24} {own[0]:19.1f} {own[1]:16.1f}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer repeats")
    asyncio.run(main(parser.parse_args().quick))
