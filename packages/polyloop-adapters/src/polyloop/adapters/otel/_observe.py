"""Telemetry added to an agent built elsewhere, without changing its runs (design 0062).

``polyloop batch --otlp`` drives agents a user's factory built, each with the user's own event
sink. Telemetry goes beside that sink, and the pair reports that sink's parameters: a run's
parameter snapshot holds its sink's parameters, so a run started without telemetry still
resumes with it, and the other way round.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping

from polyloop.adapters.otel._sink import OpenTelemetryEventSink
from polyloop.ports import Event, EventSink
from polyloop.session import AgentDefinition

__all__ = ["observe"]


class _Beside:
    """Each event to the agent's own sink, then to the telemetry sink (which never suspends);
    a failure of either is the delivery's failure, the other still gets the event."""

    __slots__ = ("_sink", "_telemetry")

    def __init__(self, sink: EventSink, telemetry: OpenTelemetryEventSink) -> None:
        self._sink = sink
        self._telemetry = telemetry

    async def emit(self, event: Event) -> None:
        try:
            await self._sink.emit(event)
        finally:  # never suspends (design 0049): also while a cancellation passes
            await self._telemetry.emit(event)

    def parameters(self) -> Mapping[str, str]:
        return self._sink.parameters()


def observe(definition: AgentDefinition, sink: OpenTelemetryEventSink) -> AgentDefinition:
    """``definition`` with ``sink`` receiving its events too, beside its own event sink; its
    parameter snapshot is unchanged (the snapshot names the agent's own sink only), so adding
    or removing the telemetry never keeps a run from resuming. ``definition`` itself when its
    sink is already ``sink``."""
    if definition.event_sink is sink:
        return definition
    return dataclasses.replace(definition, event_sink=_Beside(definition.event_sink, sink))
