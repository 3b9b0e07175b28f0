"""An :class:`~polyloop.ports.EventSink` that shows runs in OpenTelemetry tools (design 0049).

Install with ``polyloop-adapters[otel]``. Every invocation of a run (the first ``run``, each
``resume``) becomes an ``invoke_agent`` span in one trace whose id is derived from the run id,
so a resumed run is found from the crashed one and back; each invocation is a root span of that
trace. Model calls (``chat``) and actions (``execute_tool``) are its children, each timed, named and attributed by the OpenTelemetry
semantic conventions for generative AI, with PolyLoop's own facts under ``polyloop.``: the
stop reason, the budgets left, and on resume what was made again (``polyloop.replayed``) and
what was refused (``polyloop.refused``).

    telemetry = OtlpTelemetry("http://127.0.0.1:4318", service_name="my-agent")
    definition = AgentDefinition(..., event_sink=telemetry.event_sink())
    ...
    telemetry.shutdown()

The messages sent to the model, its replies, tool arguments and observations are recorded only
with ``capture_content=True``. :func:`observe` adds a sink to an agent built elsewhere (``polyloop
batch --otlp``) without changing its parameter snapshot. Export is batched on the SDK's thread: a slow or dead collector
never slows a run, and failed exports count in ``RunResult.event_delivery_failures``.

:class:`BatchMetrics` is a report observer for ``polyloop.batch.run_batch``: episodes done,
failed and parked, steps, steps per second.
"""

from polyloop.adapters.otel._batch import BatchMetrics
from polyloop.adapters.otel._export import CountingSpanExporter, OtlpTelemetry
from polyloop.adapters.otel._ids import run_span_id, run_trace_id
from polyloop.adapters.otel._observe import observe
from polyloop.adapters.otel._sink import OpenTelemetryEventSink, TelemetryExportError

__all__ = [
    "BatchMetrics",
    "CountingSpanExporter",
    "OpenTelemetryEventSink",
    "OtlpTelemetry",
    "TelemetryExportError",
    "observe",
    "run_span_id",
    "run_trace_id",
]
