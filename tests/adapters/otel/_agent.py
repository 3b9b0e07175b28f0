"""A small agent and an in-memory OpenTelemetry pipeline for the sink's tests.

The in-memory exporter and reader are the SDK's own (real SDK, no collector); the tests against
a real receiver are in ``test_phoenix.py``.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass

from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from polyloop.adapters.otel import OpenTelemetryEventSink
from polyloop.ports import EventSink, ModelClient, RunStore
from polyloop.session import AgentDefinition, RunRequest
from polyloop.testing import LineDecisionParser
from polyloop.tools import Tool, ToolRegistry, ToolSpec
from polyloop.types import (
    Budget,
    Context,
    Message,
    ReplayPolicy,
    Role,
    SyntheticObservations,
    TextBlock,
)

TEXTS = SyntheticObservations(
    action_rejected="Rejected tool call.",
    env_failed="The environment failed.",
    model_call_failed="The model call failed.",
)
CONTEXT = Context(
    run_level=(Message(Role.SYSTEM, (TextBlock("You are a test agent."),)),),
    goal_level=(Message(Role.USER, (TextBlock("Look things up, then answer."),)),),
)


def lookup(arguments: Mapping[str, object]) -> str:
    return f"found {arguments.get('q')}"


def broken(arguments: Mapping[str, object]) -> str:
    raise RuntimeError("the environment is down")


def tools() -> ToolRegistry:
    return ToolRegistry(
        [
            Tool(ToolSpec("lookup", "Look up.", {"type": "object"}, ReplayPolicy.SAFE), lookup),
            Tool(ToolSpec("broken", "Fails.", {"type": "object"}, ReplayPolicy.NEVER), broken),
        ]
    )


def definition(model: ModelClient, store: RunStore, sink: EventSink) -> AgentDefinition:
    return AgentDefinition(
        model_client=model,
        decision_parser=LineDecisionParser(),
        store=store,
        event_sink=sink,
        synthetic_observations=TEXTS,
    )


def request(run_id: str, registry: ToolRegistry | None = None, max_steps: int = 6) -> RunRequest:
    registry = tools() if registry is None else registry
    return RunRequest(
        run_id=run_id,
        budget=Budget(
            max_steps=max_steps,
            max_actions=4,
            max_consecutive_parse_failures=3,
            max_prompt_chars=100_000,
        ),
        action_executor=registry.executor(),
        tools=registry,
        context=CONTEXT,
        injections={},
        model_binding={},
        model_replay_policy=ReplayPolicy.SAFE,
        observation_template="Observation: {observation}",
        tool_section_template="Tools: {tools}",
        cancel_grace_seconds=1.0,
    )


@dataclass
class Telemetry:
    """A sink on real SDK providers whose output stays in memory."""

    sink: OpenTelemetryEventSink
    spans: InMemorySpanExporter
    metrics: InMemoryMetricReader

    def finished(self) -> tuple[ReadableSpan, ...]:
        return tuple(self.spans.get_finished_spans())

    def named(self, prefix: str) -> list[ReadableSpan]:
        return [s for s in self.finished() if (s.name or "").startswith(prefix)]

    def measurements(self) -> dict[str, list[tuple[dict[str, object], float]]]:
        return measurements(self.metrics)


def measurements(reader: InMemoryMetricReader) -> dict[str, list[tuple[dict[str, object], float]]]:
    """Each metric's data points as (attributes, value): the sum, the histogram's sum, or the
    gauge's value."""
    out: dict[str, list[tuple[dict[str, object], float]]] = {}
    data = reader.get_metrics_data()
    if data is None:
        return out
    for resource in data.resource_metrics:
        for scope in resource.scope_metrics:
            for metric in scope.metrics:
                for point in metric.data.data_points:
                    value = getattr(point, "value", None)
                    if value is None:
                        value = point.sum  # type: ignore[union-attr]
                    out.setdefault(metric.name, []).append(
                        (dict(point.attributes or {}), float(value))
                    )
    return out


def in_memory(**options: object) -> Telemetry:
    spans = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(spans))
    reader = InMemoryMetricReader()
    sink = OpenTelemetryEventSink(
        tracer_provider=provider,
        meter_provider=MeterProvider(metric_readers=[reader]),
        **options,  # type: ignore[arg-type]
    )
    return Telemetry(sink, spans, reader)


def children(spans: Sequence[ReadableSpan], parent: ReadableSpan) -> Iterator[ReadableSpan]:
    assert parent.context is not None
    for span in spans:
        if span.parent is not None and span.parent.span_id == parent.context.span_id:
            yield span
