"""Governed runs (polyloop.session) whose model is GatewayModelClient over real HTTP.

The gateway on loopback replies from a script (no model can run here); the HTTP exchange,
the client and the loop are real.
"""

from __future__ import annotations

import json
from collections.abc import Mapping

from polyloop.adapters.gateway import BINDING_HEADER, GatewayModelClient
from polyloop.session import AgentDefinition, RunRequest, run
from polyloop.stores.memory import MemoryRunStore
from polyloop.testing import LineDecisionParser, RecordingEventSink
from polyloop.tools import Tool, ToolRegistry, ToolSpec
from polyloop.types import (
    ActionStatus,
    Budget,
    Context,
    Message,
    ReplayPolicy,
    Role,
    StopReason,
    SyntheticObservations,
    TextBlock,
)
from tests.adapters.gateway._server import FakeGateway

TEXTS = SyntheticObservations(
    action_rejected="That tool call was rejected.",
    env_failed="The environment failed.",
    model_call_failed="The model call failed.",
)


def add(arguments: Mapping[str, object]) -> str:
    a, b = arguments["a"], arguments["b"]
    assert isinstance(a, int)
    assert isinstance(b, int)
    return str(a + b)


ADD = Tool(
    ToolSpec(
        "add",
        "Add two integers.",
        {
            "type": "object",
            "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
            "required": ["a", "b"],
        },
        replay_policy=ReplayPolicy.SAFE,
    ),
    add,
)


def make_request(run_id: str, tools: ToolRegistry) -> RunRequest:
    return RunRequest(
        run_id=run_id,
        budget=Budget(
            max_steps=5, max_actions=5, max_consecutive_parse_failures=2, max_prompt_chars=50_000
        ),
        action_executor=tools.executor(),
        tools=tools,
        context=Context(
            run_level=(Message(Role.SYSTEM, (TextBlock("Answer with the line protocol."),)),),
            goal_level=(Message(Role.USER, (TextBlock("What is 2 + 3?"),)),),
        ),
        injections={},
        model_binding={"episode": "12", "task": "arith"},
        model_replay_policy=ReplayPolicy.SAFE,
        observation_template="Observation: {observation}",
        tool_section_template="Tools: {tools}",
        cancel_grace_seconds=1.0,
    )


async def test_a_governed_run_through_the_gateway(fake_gateway: tuple[FakeGateway, str]) -> None:
    """A run driven through the gateway executes the tool, finishes with the answer, and records
    each response id as the step's call id."""
    gateway, root = fake_gateway
    gateway.scripts["e2e"] = ['CALL add {"a": 2, "b": 3}', "FINAL: 5"]
    store = MemoryRunStore()
    tools = ToolRegistry([ADD])
    async with GatewayModelClient(
        f"{root}/scripted/e2e/v1", "served-model", api_key="k-e2e", temperature=0.0, seed=1
    ) as client:
        definition = AgentDefinition(
            model_client=client,
            decision_parser=LineDecisionParser(),
            store=store,
            event_sink=RecordingEventSink(),
            synthetic_observations=TEXTS,
        )
        result = await run(definition, make_request("gw-e2e", tools))

    assert result.stop_reason is StopReason.AGENT_FINISHED
    assert result.final_answer == "5"
    first, second = result.steps
    assert first.action_status is ActionStatus.EXECUTED
    assert first.observation == "5"
    assert (first.thinking_chars, second.thinking_chars) == (3, 3)

    received = gateway.requests_for("scripted/e2e")
    assert len(received) == 2
    # Each step's call id is the response id the gateway sent for that very request.
    assert [s.call_id for s in result.steps] == [
        "cmpl-" + r.headers["x-polyloop-result-id"] for r in received
    ]
    assert [r.headers["x-polyloop-call-index"] for r in received] == ["0", "1"]
    # Call k+1 begins with the messages of call k (prefix caches stay warm), over the wire.
    one, two = (r.body["messages"] for r in received)
    assert two[: len(one)] == one
    assert two[len(one)] == {"role": "assistant", "content": 'CALL add {"a": 2, "b": 3}'}
    assert two[len(one) + 1] == {"role": "user", "content": "Observation: 5"}
    for r in received:
        assert json.loads(r.headers[BINDING_HEADER.lower()]) == {"episode": "12", "task": "arith"}
        assert r.body["temperature"] == 0.0

    log = await store.read_log("gw-e2e")
    assert log.started is not None
    snapshot = log.started.parameter_snapshot
    assert snapshot["model_client.base_url"] == f"{root}/scripted/e2e/v1"
    assert snapshot["model_client.model"] == "served-model"
    assert snapshot["model_client.temperature"] == "0.0"
    assert "k-e2e" not in repr(snapshot)


async def test_a_gateway_failure_stops_the_run_with_llm_error(
    fake_gateway: tuple[FakeGateway, str],
) -> None:
    """A gateway failure stops the run with llm_error, recording the failure (not a reply) in the
    log."""
    _, root = fake_gateway
    store = MemoryRunStore()
    async with GatewayModelClient(f"{root}/status/503/e2e/v1", "served-model") as client:
        definition = AgentDefinition(
            model_client=client,
            decision_parser=LineDecisionParser(),
            store=store,
            event_sink=RecordingEventSink(),
            synthetic_observations=TEXTS,
        )
        result = await run(definition, make_request("gw-fail", ToolRegistry()))
    assert result.stop_reason is StopReason.LLM_ERROR
    (step,) = result.steps
    assert step.observation == TEXTS.model_call_failed
    assert step.call_id is None
    log = await store.read_log("gw-fail")
    (model_result,) = log.model_results
    assert model_result.reply is None
    assert model_result.failure is not None
    assert model_result.failure.startswith("GatewayStatusError: ")
    assert "HTTP 503" in model_result.failure
