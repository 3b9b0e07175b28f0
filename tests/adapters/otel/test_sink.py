"""The OpenTelemetry sink on real runs, read back from the SDK's in-memory exporter and reader:
the span tree, the GenAI names and attributes, PolyLoop's own, the metrics, and resume marks."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Mapping

import pytest
from opentelemetry import trace
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import StatusCode

from polyloop.adapters.otel import (
    OpenTelemetryEventSink,
    TelemetryExportError,
    run_span_id,
    run_trace_id,
)
from polyloop.adapters.tool_calls import ReplyToolCall, ToolCallReplyParser, render_tool_calls
from polyloop.asking import RunParked
from polyloop.errors import EnvironmentFailure
from polyloop.ports import Event, EventKind, ModelCall
from polyloop.session import approve, resume, resume_or_park, run, run_or_park
from polyloop.stores.memory import MemoryRunStore
from polyloop.testing import ScriptedModelClient, reply
from polyloop.tools import Tool, ToolRegistry, ToolSpec
from polyloop.types import ModelReply, ReplayPolicy, RunResult, StopReason
from tests.adapters.otel._agent import (
    Telemetry,
    children,
    definition,
    in_memory,
    measurements,
    request,
)
from tests.asking_kit import AboveLimit, gated_request
from tests.loop_kit import (
    Crash,
    Effects,
    make_definition,
    make_request,
    replies,
    scenario_tools,
)

USAGE = {
    "prompt_tokens": 120,
    "completion_tokens": 7,
    "completion_tokens_details.reasoning_tokens": 3,
}


def said(text: str, k: int) -> ModelReply:
    return ModelReply(f"cmpl-{k}", text, "", finish_reason="stop", usage=USAGE)


SCRIPT = [
    said('CALL lookup {"q": "otel"}', 0),
    said("CALL broken {}", 1),
    said("FINAL: done", 2),
]


class _Yielding(ScriptedModelClient):
    """Gives the event loop a turn on every call, so that concurrent runs interleave."""

    async def call(self, call: ModelCall) -> ModelReply:
        await asyncio.sleep(0)
        return await super().call(call)


async def _three_steps(
    telemetry: Telemetry, run_id: str = "r-otel", *, interleave: bool = False
) -> None:
    model = (_Yielding if interleave else ScriptedModelClient)(SCRIPT)
    result = await run(definition(model, MemoryRunStore(), telemetry.sink), request(run_id))
    assert StopReason.AGENT_FINISHED == result.stop_reason
    assert 0 == result.event_delivery_failures


def _attrs(span: object) -> Mapping[str, object]:
    return dict(span.attributes or {})  # type: ignore[attr-defined]


async def test_a_run_is_one_invocation_span_in_the_trace_derived_from_its_run_id() -> None:
    """The invocation span is named and attributed as a GenAI agent invocation, and is a root
    span (receivers list roots) in the trace derived from the run id (design 0062)."""
    telemetry = in_memory()
    await _three_steps(telemetry)
    (invocation,) = telemetry.named("invoke_agent")
    assert "invoke_agent polyloop" == invocation.name
    assert run_trace_id("r-otel") == invocation.context.trace_id
    assert invocation.parent is None
    assert {s.context.trace_id for s in telemetry.finished()} == {run_trace_id("r-otel")}
    attributes = _attrs(invocation)
    assert {
        "gen_ai.operation.name": "invoke_agent",
        "gen_ai.agent.name": "polyloop",
        "gen_ai.provider.name": "scripted",
        "gen_ai.conversation.id": "r-otel",
        "polyloop.run_id": "r-otel",
        "polyloop.resumed": False,
        "polyloop.first_step": 0,
        "polyloop.stop_reason": "agent_finished",
        "polyloop.steps": 3,
        "polyloop.budget.steps_left": 3,
        "polyloop.budget.actions_left": 2,
        "polyloop.event_delivery_failures": 0,
    } == attributes
    assert StatusCode.UNSET == invocation.status.status_code


async def test_each_step_has_a_model_call_and_its_action_under_the_invocation() -> None:
    """Each step is a chat span and, for an action, an execute_tool span, children of the
    invocation with the step index as an attribute, the conventions' attributes, and
    PolyLoop's outcome and replay policy."""
    telemetry = in_memory()
    await _three_steps(telemetry)
    spans = telemetry.finished()
    (invocation,) = telemetry.named("invoke_agent")
    under = sorted(
        ((_attrs(s)["polyloop.step"], s.name) for s in children(spans, invocation)), key=repr
    )
    assert [
        (0, "chat"),
        (0, "execute_tool lookup"),
        (1, "chat"),
        (1, "execute_tool broken"),
        (2, "chat"),
    ] == under
    assert len(spans) == 1 + len(under)
    chat = next(s for s in telemetry.named("chat") if _attrs(s)["polyloop.step"] == 0)
    assert {
        "gen_ai.operation.name": "chat",
        "gen_ai.provider.name": "scripted",
        "polyloop.run_id": "r-otel",
        "polyloop.step": 0,
        "polyloop.parse_ok": True,
        "polyloop.result_id": "model-0",
        "gen_ai.response.id": "cmpl-0",
        "gen_ai.response.finish_reasons": ("stop",),
        "gen_ai.usage.input_tokens": 120,
        "gen_ai.usage.output_tokens": 7,
        "gen_ai.usage.reasoning.output_tokens": 3,
    } == _attrs(chat)
    (lookup,) = telemetry.named("execute_tool lookup")
    assert {
        "gen_ai.operation.name": "execute_tool",
        "gen_ai.tool.name": "lookup",
        "gen_ai.tool.call.id": "action-0",
        "polyloop.run_id": "r-otel",
        "polyloop.step": 0,
        "polyloop.replay_policy": "safe",
        "polyloop.action.outcome": "executed",
        "polyloop.action.observation_is_synthetic": False,
        "polyloop.action.env_reported_completion": False,
    } == _attrs(lookup)
    assert StatusCode.UNSET == lookup.status.status_code
    (broken,) = telemetry.named("execute_tool broken")
    assert "never" == _attrs(broken)["polyloop.replay_policy"]
    assert "executed" == _attrs(broken)["polyloop.action.outcome"]
    assert _attrs(broken)["polyloop.action.observation_is_synthetic"] is True
    # Each part has its own time: in a step the action follows the model call, the steps
    # follow each other, all inside the invocation.
    assert invocation.start_time is not None
    assert invocation.end_time is not None
    previous_end = invocation.start_time
    for span in sorted(children(spans, invocation), key=lambda s: s.start_time or 0):
        assert span.start_time is not None
        assert span.end_time is not None
        assert previous_end <= span.start_time <= span.end_time <= invocation.end_time
        previous_end = span.end_time


async def test_content_is_off_by_default_and_on_by_the_switch() -> None:
    """Without capture_content no reply text, tool argument or observation is recorded; with
    it they appear under the conventions' names."""
    off = in_memory()
    await _three_steps(off)
    for span in off.finished():
        text = repr(_attrs(span))
        assert "otel" not in text.replace("r-otel", "")
        assert "found" not in text
        assert "gen_ai.output.messages" not in text
        assert "gen_ai.tool.call" not in text.replace("gen_ai.tool.call.id", "")

    on = in_memory(capture_content=True)
    await _three_steps(on)
    chat = next(s for s in on.named("chat") if _attrs(s)["polyloop.step"] == 0)
    assert (
        '[{"role": "assistant", "parts": [{"type": "text", "content": "CALL lookup {\\"q\\": '
        '\\"otel\\"}"}], "finish_reason": "stop"}]'
    ) == _attrs(chat)["gen_ai.output.messages"]
    (lookup,) = on.named("execute_tool lookup")
    assert '{"q":"otel"}' == _attrs(lookup)["gen_ai.tool.call.arguments"]
    assert "found otel" == _attrs(lookup)["gen_ai.tool.call.result"]


async def test_with_content_on_the_messages_sent_are_exported_as_input_messages() -> None:
    """Each model call's messages, as the conventions' ``gen_ai.input.messages``: the prompt of
    step 1 holds the system and goal messages, the step-0 reply and its observation."""
    on = in_memory(capture_content=True)
    await _three_steps(on)
    chat = next(s for s in on.named("chat") if _attrs(s)["polyloop.step"] == 1)
    messages = json.loads(str(_attrs(chat)["gen_ai.input.messages"]))
    assert [
        ("system", "You are a test agent."),
        ("user", "Look things up, then answer."),
        ("assistant", 'CALL lookup {"q": "otel"}'),
        ("user", "Observation: found otel"),
    ] == [
        (m["role"], m["parts"][0]["content"])
        for m in messages
        if not m["parts"][0]["content"].startswith("Tools:")
    ]
    assert all(part["type"] == "text" for m in messages for part in m["parts"])
    off = in_memory()
    await _three_steps(off)
    assert all("gen_ai.input.messages" not in _attrs(s) for s in off.finished())


async def test_a_tool_that_raised_is_an_error_naming_its_exception_type() -> None:
    """The action still counts as executed (the model sees the failure), but its span is an
    error with the exception's type, never its message."""
    telemetry = in_memory()

    def leaky(arguments: Mapping[str, object]) -> str:
        raise KeyError("token sk-live-0042 not found")

    registry = ToolRegistry([Tool(ToolSpec("leaky", "Fails.", {"type": "object"}), leaky)])
    model = ScriptedModelClient([reply("CALL leaky {}"), reply("FINAL: no")])
    result = await run(
        definition(model, MemoryRunStore(), telemetry.sink), request("r-raise", registry)
    )
    assert StopReason.AGENT_FINISHED == result.stop_reason
    (tool,) = telemetry.named("execute_tool leaky")
    assert StatusCode.ERROR == tool.status.status_code
    assert "KeyError" == _attrs(tool)["error.type"]
    assert "executed" == _attrs(tool)["polyloop.action.outcome"]
    assert "sk-live" not in repr(_attrs(tool)) + repr(tool.status.description)
    (invocation,) = telemetry.named("invoke_agent")
    assert StatusCode.UNSET == invocation.status.status_code


async def test_the_model_call_and_the_action_each_span_their_own_time() -> None:
    """A model call and an action that each take at least 50 ms: the chat span covers the call
    only, the execute_tool span the action only, one after the other."""
    telemetry = in_memory()

    class Slow(ScriptedModelClient):
        async def call(self, call: ModelCall) -> ModelReply:
            await asyncio.sleep(0.05)
            return await super().call(call)

    async def slow(arguments: Mapping[str, object]) -> str:
        await asyncio.sleep(0.05)
        return "done"

    registry = ToolRegistry([Tool(ToolSpec("slow", "Slow.", {"type": "object"}), slow)])
    model = Slow([reply("CALL slow {}"), reply("FINAL: ok")])
    await run(definition(model, MemoryRunStore(), telemetry.sink), request("r-t", registry))
    chat = next(s for s in telemetry.named("chat") if _attrs(s)["polyloop.step"] == 0)
    (tool,) = telemetry.named("execute_tool slow")
    assert chat.start_time is not None
    assert chat.end_time is not None
    assert tool.start_time is not None
    assert tool.end_time is not None
    assert chat.end_time - chat.start_time >= 50_000_000
    assert tool.end_time - tool.start_time >= 50_000_000
    assert chat.end_time <= tool.start_time


def test_capture_content_must_be_a_bool() -> None:
    """A truthy non-bool does not switch content on by accident; the error says what to pass."""
    with pytest.raises(TypeError, match="True or False"):
        OpenTelemetryEventSink(capture_content="yes")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="agent_name"):
        OpenTelemetryEventSink(agent_name="")


async def test_a_failed_model_call_is_an_llm_error_status_without_its_message() -> None:
    """A failing model call gives its chat span an error status naming llm_error and the
    exception type (never the message); the invocation ends as an llm_error error."""
    telemetry = in_memory()
    model = ScriptedModelClient([RuntimeError("upstream said Bearer sk-live-123")])
    result = await run(definition(model, MemoryRunStore(), telemetry.sink), request("r-fail"))
    assert StopReason.LLM_ERROR == result.stop_reason
    (chat,) = telemetry.named("chat")
    assert StatusCode.ERROR == chat.status.status_code
    assert "llm_error: RuntimeError" == chat.status.description
    assert "RuntimeError" == _attrs(chat)["error.type"]
    (invocation,) = telemetry.named("invoke_agent")
    assert StatusCode.ERROR == invocation.status.status_code
    assert "llm_error" == _attrs(invocation)["polyloop.stop_reason"]
    for span in telemetry.finished():
        assert "sk-live" not in repr(_attrs(span)) + repr(span.status.description)


async def test_an_environment_failure_is_an_env_error_status_on_action_and_invocation() -> None:
    """An action whose environment is gone ends as an env_error error span, and so does the
    invocation it stopped."""
    telemetry = in_memory()

    def gone(arguments: Mapping[str, object]) -> str:
        raise EnvironmentFailure("the sandbox is gone")

    registry = ToolRegistry([Tool(ToolSpec("gone", "Gone.", {"type": "object"}), gone)])
    model = ScriptedModelClient([reply("CALL gone {}")])
    result = await run(
        definition(model, MemoryRunStore(), telemetry.sink), request("r-env", registry)
    )
    assert StopReason.ENV_ERROR == result.stop_reason
    (tool,) = telemetry.named("execute_tool")
    assert "env_error" == _attrs(tool)["polyloop.action.outcome"]
    assert "env_error" == _attrs(tool)["error.type"]
    assert StatusCode.ERROR == tool.status.status_code
    (invocation,) = telemetry.named("invoke_agent")
    assert StatusCode.ERROR == invocation.status.status_code
    assert 4 == _attrs(invocation)["polyloop.budget.actions_left"]


async def test_the_metrics_count_steps_actions_tokens_and_stop_reasons() -> None:
    """Steps by parse outcome, actions by outcome, the GenAI token-usage histogram by token
    type, and ended invocations by stop reason."""
    telemetry = in_memory()
    await _three_steps(telemetry)
    await _three_steps(telemetry, "r-otel-2")
    measured = telemetry.measurements()
    assert [({"polyloop.parse_ok": True}, 6.0)] == measured["polyloop.steps"]
    assert [({"polyloop.action.outcome": "executed"}, 4.0)] == measured["polyloop.actions"]
    assert [({"polyloop.stop_reason": "agent_finished"}, 2.0)] == measured["polyloop.runs"]
    tokens = {str(a["gen_ai.token.type"]): v for a, v in measured["gen_ai.client.token.usage"]}
    assert {"input": 6 * 120.0, "output": 6 * 7.0} == tokens


def _crashing_tools(policy: ReplayPolicy, crash: bool) -> ToolRegistry:
    def act(arguments: Mapping[str, object]) -> str:
        if crash:
            raise Crash("the process dies inside the action")
        return "acted"

    return ToolRegistry([Tool(ToolSpec("act", "Acts.", {"type": "object"}, policy), act)])


async def _crash_then_resume(policy: ReplayPolicy) -> tuple[Telemetry, StopReason]:
    telemetry = in_memory()
    store = MemoryRunStore()
    script = [reply("CALL act {}", call_id="c0"), reply("FINAL: ok", call_id="c1")]
    crashing = definition(ScriptedModelClient(script, by_call_index=True), store, telemetry.sink)
    with pytest.raises(Crash):
        await run(crashing, request("r-crash", _crashing_tools(policy, crash=True)))
    fresh = definition(ScriptedModelClient(script, by_call_index=True), store, telemetry.sink)
    result = await resume(fresh, request("r-crash", _crashing_tools(policy, crash=False)))
    telemetry.sink.end_open_invocations()
    return telemetry, result.stop_reason


async def test_a_safe_action_made_again_on_resume_is_marked_replayed() -> None:
    """Crash inside a SAFE action, resume: both invocations share the trace; the resumed one
    names the move and the intent, its action is marked replayed, its model call (taken from
    the log) reused."""
    telemetry, stop = await _crash_then_resume(ReplayPolicy.SAFE)
    assert StopReason.AGENT_FINISHED == stop
    crashed, resumed = sorted(telemetry.named("invoke_agent"), key=lambda s: s.start_time or 0)
    assert crashed.context.trace_id == resumed.context.trace_id == run_trace_id("r-crash")
    assert StatusCode.ERROR == crashed.status.status_code  # ended without run_finished
    attributes = _attrs(resumed)
    assert attributes["polyloop.resumed"] is True
    assert "execute_action_again" == attributes["polyloop.resume.move"]
    assert "action" == attributes["polyloop.resume.intent_kind"]
    assert "action-0" == attributes["polyloop.resume.result_id"]
    assert "safe" == attributes["polyloop.resume.replay_policy"]
    spans = telemetry.finished()
    replayed = sorted((c.name, _attrs(c)["polyloop.step"]) for c in children(spans, resumed))
    assert [("chat", 0), ("chat", 1), ("execute_tool act", 0)] == replayed
    (tool,) = [c for c in children(spans, resumed) if c.name == "execute_tool act"]
    assert _attrs(tool)["polyloop.replayed"] is True
    assert "executed" == _attrs(tool)["polyloop.action.outcome"]
    chat, final = sorted(
        (c for c in children(spans, resumed) if c.name == "chat"),
        key=lambda c: _attrs(c)["polyloop.step"],  # type: ignore[arg-type, return-value]
    )
    assert _attrs(chat)["polyloop.reused"] is True
    assert "polyloop.reused" not in _attrs(final)
    assert "polyloop.replayed" not in _attrs(final)


async def test_a_never_action_in_doubt_is_a_refused_span_and_the_run_stops_state_unknown() -> None:
    """Crash inside a NEVER action, resume: the resumed invocation holds a refused
    execute_tool span for the intent and ends as a resume_state_unknown error."""
    telemetry, stop = await _crash_then_resume(ReplayPolicy.NEVER)
    assert StopReason.RESUME_STATE_UNKNOWN == stop
    _, resumed = sorted(telemetry.named("invoke_agent"), key=lambda s: s.start_time or 0)
    assert "stop_state_unknown" == _attrs(resumed)["polyloop.resume.move"]
    assert StatusCode.ERROR == resumed.status.status_code
    (refused,) = list(children(telemetry.finished(), resumed))
    assert "execute_tool" == refused.name
    assert {
        "gen_ai.operation.name": "execute_tool",
        "gen_ai.tool.call.id": "action-0",
        "polyloop.run_id": "r-crash",
        "polyloop.step": 0,
        "polyloop.result_id": "action-0",
        "polyloop.replay_policy": "never",
        "polyloop.refused": True,
        "polyloop.action.outcome": "refused",
        "error.type": "resume_state_unknown",
    } == _attrs(refused)
    assert StatusCode.ERROR == refused.status.status_code


async def test_a_model_call_in_doubt_made_again_is_marked_replayed() -> None:
    """Crash inside the model call (replay policy SAFE), resume: the chat span of that step
    says it was made again."""
    telemetry = in_memory()
    store = MemoryRunStore()
    crashing = definition(ScriptedModelClient([Crash("dies in the call")]), store, telemetry.sink)
    with pytest.raises(Crash):
        await run(crashing, request("r-call"))
    fresh = definition(ScriptedModelClient([reply("FINAL: ok")]), store, telemetry.sink)
    assert StopReason.AGENT_FINISHED == (await resume(fresh, request("r-call"))).stop_reason
    (chat,) = telemetry.named("chat")
    assert _attrs(chat)["polyloop.replayed"] is True


async def test_failed_exports_are_reported_by_the_next_emit_and_counted_by_the_run() -> None:
    """When the exporter reports failed exports, the next emit raises TelemetryExportError
    (the event is still recorded) and the run counts it in event_delivery_failures."""
    failures = [0]
    telemetry = in_memory(export_failures=lambda: failures[0])
    sink = telemetry.sink
    failures[0] = 2
    with pytest.raises(TelemetryExportError, match="2 span export"):
        await sink.emit(Event(EventKind.STEP_STARTED, "nobody", 0))
    await sink.emit(Event(EventKind.STEP_STARTED, "nobody", 0))  # nothing new: no error

    class FailingOnce:
        def __init__(self) -> None:
            self.calls = 0

        def __call__(self) -> int:
            self.calls += 1
            return 0 if self.calls < 3 else 1  # a failure shows up after the second event

    telemetry = in_memory(export_failures=FailingOnce())
    model = ScriptedModelClient(SCRIPT)
    result = await run(definition(model, MemoryRunStore(), telemetry.sink), request("r-x"))
    assert StopReason.AGENT_FINISHED == result.stop_reason
    assert 1 == result.event_delivery_failures
    assert 1 == len(telemetry.named("invoke_agent"))


def test_the_parameters_name_only_the_kind() -> None:
    """Where telemetry goes or whether content is captured never blocks a resume."""
    assert {"kind": "opentelemetry"} == OpenTelemetryEventSink(capture_content=True).parameters()


async def test_concurrent_runs_through_one_sink_keep_their_own_trees() -> None:
    """Runs interleaving on one sink (as in a batch) each get their own trace, with every model
    call and action under their own invocation."""
    telemetry = in_memory()
    run_ids = [f"r-{k}" for k in range(5)]
    await asyncio.gather(*(_three_steps(telemetry, r, interleave=True) for r in run_ids))
    spans = telemetry.finished()
    invocations = {_attrs(s)["polyloop.run_id"]: s for s in telemetry.named("invoke_agent")}
    assert set(run_ids) == set(invocations)
    # They did interleave: every invocation started before any ended.
    assert max(s.start_time or 0 for s in invocations.values()) < min(
        s.end_time or 0 for s in invocations.values()
    )
    for run_id, invocation in invocations.items():
        assert run_trace_id(run_id) == invocation.context.trace_id
        mine = [s for s in spans if _attrs(s)["polyloop.run_id"] == run_id and s is not invocation]
        assert 5 == len(mine)
        assert mine == list(children(spans, invocation))


async def test_sinks_sharing_a_meter_provider_all_count() -> None:
    """A sink per episode on one provider (as a batch factory makes them): every run counts,
    though the SDK keeps only the first registration of an observable instrument."""
    reader = InMemoryMetricReader()
    provider = MeterProvider(metric_readers=[reader])
    spans = TracerProvider()
    for run_id in ("a", "b", "c"):
        sink = OpenTelemetryEventSink(tracer_provider=spans, meter_provider=provider)
        model = ScriptedModelClient(SCRIPT)
        await run(definition(model, MemoryRunStore(), sink), request(run_id))
    measured = measurements(reader)
    assert [({"polyloop.parse_ok": True}, 9.0)] == measured["polyloop.steps"]
    assert [({"polyloop.stop_reason": "agent_finished"}, 3.0)] == measured["polyloop.runs"]


async def test_the_calls_a_step_did_not_execute_are_named_on_its_model_call() -> None:
    """A reply with three tool calls: the chat span names the two the step did not execute,
    in the model's order; a step whose reply had one call carries no such attribute."""
    parallel = render_tool_calls(
        "Noting the time and saving it.",
        [
            ReplyToolCall("read", {}),
            ReplyToolCall("write", {"path": "t.txt"}),
            ReplyToolCall("noop", {}),
        ],
    )
    telemetry = in_memory()
    model = [reply(parallel, call_id="c0"), reply("Done.", call_id="c1")]
    built = make_definition(model, sink=telemetry.sink, parser=ToolCallReplyParser())
    result = await run(built, make_request("p-otel", tools=scenario_tools(Effects())))
    assert StopReason.AGENT_FINISHED is result.stop_reason
    by_step = {_attrs(s)["polyloop.step"]: _attrs(s) for s in telemetry.named("chat")}
    assert ("write", "noop") == by_step[0]["polyloop.calls_not_executed"]
    assert "polyloop.calls_not_executed" not in by_step[1]


async def test_an_invocation_that_parks_for_a_person_ends_without_an_error() -> None:
    """A run parks before a gated refund: its invocation ends then, marked parked, not as an
    error; the resume that carries out the approval is the next invocation of the trace."""
    telemetry = in_memory()
    store = MemoryRunStore()
    effects = Effects()
    script = replies('CALL refund {"amount": 80}', "FINAL: refunded")
    request_ = gated_request("r-park", effects)
    parked = await run_or_park(
        make_definition(script, store, sink=telemetry.sink), request_, approval_policy=AboveLimit()
    )
    assert isinstance(parked, RunParked)
    assert 0 == telemetry.sink.open_invocations
    (first,) = telemetry.named("invoke_agent")
    assert StatusCode.UNSET == first.status.status_code
    assert _attrs(first)["polyloop.parked"] is True
    await approve(
        store,
        "r-park",
        step=parked.ask.step,
        arguments_sha256=parked.ask.arguments_sha256,
        decided_by="ana",
    )
    done = await resume_or_park(
        make_definition(script, store, sink=telemetry.sink), request_, approval_policy=AboveLimit()
    )
    assert isinstance(done, RunResult)
    assert StopReason.AGENT_FINISHED == done.stop_reason
    invocations = telemetry.named("invoke_agent")
    assert 2 == len(invocations)
    assert {StatusCode.UNSET} == {s.status.status_code for s in invocations}
    assert {run_trace_id("r-park")} == {s.context.trace_id for s in invocations}


class _Forwarding(trace.TracerProvider):
    """A tracer provider that is not the SDK's (as a vendor's may be): its tracers hand every
    call to an SDK tracer, so the sink cannot reach their id generator."""

    def __init__(self, inner: TracerProvider) -> None:
        self._inner = inner

    def get_tracer(self, *args: object, **kwargs: object) -> trace.Tracer:
        inner = self._inner.get_tracer(*args, **kwargs)  # type: ignore[arg-type]

        class Forwarding(trace.Tracer):
            def start_span(self, *a: object, **k: object) -> trace.Span:
                return inner.start_span(*a, **k)  # type: ignore[arg-type]

            def start_as_current_span(self, *a: object, **k: object) -> object:  # type: ignore[override]
                return inner.start_as_current_span(*a, **k)  # type: ignore[arg-type]

        return Forwarding()


async def test_with_a_tracer_that_is_not_the_sdks_the_invocation_hangs_under_the_run() -> None:
    """The sink cannot choose a root's trace id there: the invocation is the child of the
    run's remote span (design 0049), still in the run's trace; provider_name names the
    provider."""
    spans = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(spans))
    sink = OpenTelemetryEventSink(tracer_provider=_Forwarding(provider), provider_name="anthropic")
    model = ScriptedModelClient(SCRIPT)
    await run(definition(model, MemoryRunStore(), sink), request("r-fwd"))
    (invocation,) = [s for s in spans.get_finished_spans() if s.name.startswith("invoke_agent")]
    assert invocation.parent is not None
    assert invocation.parent.is_remote
    assert run_span_id("r-fwd") == invocation.parent.span_id
    assert {run_trace_id("r-fwd")} == {s.context.trace_id for s in spans.get_finished_spans()}
    assert {"anthropic"} == {
        (s.attributes or {})["gen_ai.provider.name"]
        for s in spans.get_finished_spans()
        if not s.name.startswith("execute_tool")
    }
