"""Export through OtlpTelemetry: a dead or silent collector never slows or breaks a run, its
failures are counted, and no secret reaches a span, a metric or a resource."""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Iterator, Mapping
from pathlib import Path

import pytest
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import StatusCode

from polyloop.adapters.gateway import GatewayModelClient
from polyloop.adapters.otel import OpenTelemetryEventSink, OtlpTelemetry
from polyloop.errors import ConfigurationError
from polyloop.ports import Event
from polyloop.session import run
from polyloop.stores.memory import MemoryRunStore
from polyloop.testing import ScriptedModelClient, reply
from polyloop.tools import Tool, ToolRegistry, ToolSpec
from polyloop.types import StopReason
from tests.adapters.gateway._server import FakeGateway, closed_port, serve_in_thread
from tests.adapters.gateway._server import unaccepting_listener as silent_listener
from tests.adapters.otel._agent import definition, request
from tests.adapters.otel._receiver import metrics_receiver
from tests.adapters.otel.test_sink import SCRIPT
from tests.loop_kit import Crash
from tests.stores import _postgres
from tests.stores._helpers import close_store


class _Stepping:
    """Wraps a sink and checks that every emit finishes without suspending (no I/O, no wait):
    it returns or raises at its first step."""

    def __init__(self, inner: OpenTelemetryEventSink) -> None:
        self.inner = inner
        self.emits = 0

    async def emit(self, event: Event) -> None:
        coroutine = self.inner.emit(event)
        self.emits += 1
        try:
            coroutine.send(None)
        except StopIteration:
            return
        coroutine.close()
        raise AssertionError(f"emit({event.kind.value}) suspended")

    def parameters(self) -> Mapping[str, str]:
        return self.inner.parameters()


def _wait_for_failures(telemetry: OtlpTelemetry) -> None:
    deadline = time.monotonic() + 30  # the exporter gives up after its 0.5 s timeout
    while telemetry.export_failures == 0:
        assert time.monotonic() < deadline, "the exporter never reported the failed export"
        time.sleep(0.05)


@pytest.mark.parametrize("collector", ["dead", "silent"])
async def test_an_unreachable_collector_never_holds_up_a_run_and_its_failures_are_counted(
    collector: str,
) -> None:
    """With nothing listening (or a listener that never accepts), every emit returns without
    suspending, the runs finish as they would, and once the exporter has given up the next run
    counts the failed export in event_delivery_failures."""
    with silent_listener() as silent_port:
        port = closed_port() if collector == "dead" else silent_port
        telemetry = OtlpTelemetry(
            f"http://127.0.0.1:{port}",
            export_interval_seconds=0.05,
            export_timeout_seconds=0.5,
            metrics=False,
        )
        try:
            sink = _Stepping(telemetry.event_sink())
            first = await run(
                definition(ScriptedModelClient(SCRIPT), MemoryRunStore(), sink), request("r1")
            )
            assert StopReason.AGENT_FINISHED == first.stop_reason
            assert 8 == sink.emits
            await asyncio.to_thread(_wait_for_failures, telemetry)
            second = await run(
                definition(ScriptedModelClient(SCRIPT), MemoryRunStore(), sink), request("r2")
            )
            assert StopReason.AGENT_FINISHED == second.stop_reason
            assert 1 <= second.event_delivery_failures
            assert 16 == sink.emits
        finally:
            await asyncio.to_thread(telemetry.shutdown)


def test_the_endpoint_and_intervals_are_checked_with_a_clear_error() -> None:
    """A schemeless endpoint, a non-positive interval, an empty service name and a header
    that is not a string are refused, saying what to pass (and never showing a header)."""
    with pytest.raises(ConfigurationError, match="OTLP/HTTP"):
        OtlpTelemetry("127.0.0.1:4317")
    with pytest.raises(ConfigurationError, match="export_interval_seconds"):
        OtlpTelemetry("http://127.0.0.1:4318", export_interval_seconds=0)
    with pytest.raises(ConfigurationError, match="service_name"):
        OtlpTelemetry("http://127.0.0.1:4318", service_name="")
    with pytest.raises(ConfigurationError, match="'Authorization'") as refused:
        OtlpTelemetry("http://127.0.0.1:4318", headers={"Authorization": b"Basic c2VjcmV0"})  # type: ignore[dict-item]
    assert "c2VjcmV0" not in str(refused.value)


def test_headers_never_show_in_the_repr() -> None:
    """An exporter header (an API key) is sent, never shown."""
    telemetry = OtlpTelemetry(
        "http://127.0.0.1:4318", headers={"Authorization": "Basic c2VjcmV0LWtleQ=="}, metrics=False
    )
    try:
        assert "c2VjcmV0" not in repr(telemetry)
        assert "c2VjcmV0" not in repr(telemetry.event_sink().parameters())
    finally:
        telemetry.shutdown()


@pytest.fixture(scope="module")
def gateway() -> Iterator[tuple[FakeGateway, str]]:
    served = FakeGateway()
    with serve_in_thread(served) as root:
        yield served, root


@pytest.mark.server
async def test_no_secret_reaches_the_telemetry_even_with_content_on(
    gateway: tuple[FakeGateway, str], tmp_path: Path
) -> None:
    """Runs through the gateway client (with an API key) on the PostgreSQL store (with a
    password in its URL), one of them failing at a careless gateway that echoes the request's
    headers: neither the key nor the password nor the URL appears in any span, metric or
    resource, even with content capture switched on."""
    served, root = gateway
    api_key = "sk-otel-test-9d3b1f7a2c"
    password = _postgres.server_url().split("://", 1)[1].split("@", 1)[0].split(":", 1)[1]
    assert len(password) >= 8
    served.scripts["otel"] = ['CALL lookup {"q": "x"}', "FINAL: done"]
    spans = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(spans))
    reader = InMemoryMetricReader()
    sink = OpenTelemetryEventSink(
        tracer_provider=provider,
        meter_provider=MeterProvider(metric_readers=[reader]),
        capture_content=True,
    )
    store = _postgres.open_postgres_store(str(tmp_path))
    try:
        for scenario, run_id, stop in (
            ("scripted/otel", "gw-ok", StopReason.AGENT_FINISHED),
            ("echo", "gw-echo", StopReason.LLM_ERROR),
        ):
            async with GatewayModelClient(
                f"{root}/{scenario}/v1", "served-model", api_key=api_key
            ) as client:
                result = await run(definition(client, store, sink), request(run_id))
            assert stop == result.stop_reason
        log = await store.read_log("gw-echo")
        assert log.model_results[0].failure is not None
    finally:
        await close_store(store)
        _postgres.drop_used_schemas()
    finished = spans.get_finished_spans()
    assert 2 == sum(1 for s in finished if s.name.startswith("invoke_agent"))
    chat = next(s for s in finished if s.name == "chat served-model")
    assert "served-model" == (chat.attributes or {})["gen_ai.request.model"]
    assert "served-model" == (chat.attributes or {})["gen_ai.response.model"]
    assert "openai" == (chat.attributes or {})["gen_ai.provider.name"]
    everything = "\n".join(s.to_json() for s in finished)
    data = reader.get_metrics_data()
    assert data is not None
    everything += data.to_json() + json.dumps(dict(provider.resource.attributes))
    for secret in (api_key, password, _postgres.server_url()):
        assert secret not in everything


async def test_the_response_model_is_the_model_that_answered(
    gateway: tuple[FakeGateway, str],
) -> None:
    """A gateway whose responses name the model that answered (a dated version of the one
    asked): the log's replies record it and the receiver's chat spans carry it as
    gen_ai.response.model beside the requested gen_ai.request.model. A response without the
    name falls back to the model asked."""
    served, root = gateway
    store = MemoryRunStore()
    with metrics_receiver() as (receiver, url):
        telemetry = OtlpTelemetry(url, metrics=False)
        try:
            for run_id, answered in (("named", "served-model-2026-12-01"), ("unnamed", None)):
                served.scripts[run_id] = ['CALL lookup {"q": "x"}', "FINAL: done"]
                served.served_model = answered
                try:
                    async with GatewayModelClient(
                        f"{root}/scripted/{run_id}/v1", "served-model"
                    ) as client:
                        done = await run(
                            definition(client, store, telemetry.event_sink()), request(run_id)
                        )
                finally:
                    served.served_model = None
                assert StopReason.AGENT_FINISHED == done.stop_reason
                log = await store.read_log(run_id)
                assert [answered, answered] == [
                    None if r.reply is None else r.reply.model for r in log.model_results
                ]
        finally:
            telemetry.shutdown()
    chats = [attributes for name, attributes in receiver.span_attributes if name.startswith("chat")]
    assert 4 == len(chats)
    assert {"served-model"} == {chat["gen_ai.request.model"] for chat in chats}
    by_run = sorted(
        (str(chat["polyloop.run_id"]), str(chat["gen_ai.response.model"])) for chat in chats
    )
    assert [
        ("named", "served-model-2026-12-01"),
        ("named", "served-model-2026-12-01"),
        ("unnamed", "served-model"),
        ("unnamed", "served-model"),
    ] == by_run


async def test_shutdown_ends_the_invocation_of_a_run_that_raised() -> None:
    """A run that raised (no run_finished) still has its invocation span ended, as an error,
    when the telemetry shuts down — so its steps do not hang under a span that never comes."""
    telemetry = OtlpTelemetry(f"http://127.0.0.1:{closed_port()}", metrics=False)
    kept = InMemorySpanExporter()
    telemetry.tracer_provider.add_span_processor(SimpleSpanProcessor(kept))
    sink = telemetry.event_sink()
    script = [reply("CALL act {}"), reply("FINAL: no")]

    def act(arguments: Mapping[str, object]) -> str:
        raise Crash("dies inside the action")

    tools = ToolRegistry([Tool(ToolSpec("act", "Acts.", {"type": "object"}), act)])
    with pytest.raises(Crash):
        await run(
            definition(ScriptedModelClient(script), MemoryRunStore(), sink), request("r", tools)
        )
    assert 1 == sink.open_invocations
    assert [] == [s.name for s in kept.get_finished_spans() if s.name.startswith("invoke_agent")]
    await asyncio.to_thread(telemetry.shutdown)
    assert 0 == sink.open_invocations
    (invocation,) = [s for s in kept.get_finished_spans() if s.name.startswith("invoke_agent")]
    assert StatusCode.ERROR == invocation.status.status_code


def test_spans_dropped_on_a_full_queue_are_counted_logged_once_and_measured(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A collector that holds every trace export: beyond the 5 spans the queue may hold, spans
    are dropped, and every span is either handed to the exporter or counted as dropped — in
    ``dropped_spans`` and the ``polyloop.telemetry.spans_dropped`` metric the receiver gets;
    the first drop is logged, once, at WARNING."""
    caplog.set_level(logging.WARNING, logger="polyloop")
    with metrics_receiver(hold_traces=True) as (receiver, url):
        telemetry = OtlpTelemetry(
            url,
            export_interval_seconds=0.05,
            export_timeout_seconds=1.0,
            max_queue_size=5,
            max_export_batch_size=5,
        )
        tracer = telemetry.tracer_provider.get_tracer("test")
        for _ in range(50):
            tracer.start_span("burst").end()
        dropped = telemetry.dropped_spans
        assert 35 <= dropped < 50
        deadline = time.monotonic() + 30
        while receiver.last("polyloop.telemetry.spans_dropped") != {(): float(dropped)}:
            assert time.monotonic() < deadline, receiver.last("polyloop.telemetry.spans_dropped")
            time.sleep(0.05)
        telemetry.shutdown()
    assert 50 == telemetry.dropped_spans + telemetry._spans.spans_taken
    warnings = [r for r in caplog.records if "span queue is full" in r.getMessage()]
    assert 1 == len(warnings)
    assert logging.WARNING == warnings[0].levelno
