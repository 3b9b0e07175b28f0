"""Fixtures handing OpenTelemetryEventSink to the polyloop-contract EventSink suite.

Only collected as a contract run with ``pytest tests/adapters/otel/contract_kit
--polyloop-contract`` (``test_contract_kit.py`` does that in a subprocess); without the flag
these fixtures are inert.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from polyloop.adapters.otel import OpenTelemetryEventSink
from polyloop.ports import EventSink


@pytest.fixture
def polyloop_event_sink() -> Iterator[EventSink]:
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(InMemorySpanExporter()))
    yield OpenTelemetryEventSink(tracer_provider=provider, capture_content=True)
    provider.shutdown()
