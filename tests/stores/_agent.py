"""A small real agent for store tests that drive runs through ``polyloop.session``.

Every run follows one script: ``steps - 1`` tool calls, alternating ``noop`` (replay SAFE) and
``poke`` (replay NEVER), then a final answer. Even-numbered runs may replay their model call
(SAFE), odd-numbered ones may not (NEVER), so crashes land in every row of the recovery table.
"""

from __future__ import annotations

import functools

from polyloop.ports import RunStore
from polyloop.session import AgentDefinition, RunRequest
from polyloop.testing import LineDecisionParser, NullEventSink, ScriptedModelClient, reply
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

SYNTHETIC = SyntheticObservations(
    action_rejected="Rejected tool call.",
    env_failed="The environment failed.",
    model_call_failed="The model call failed.",
)
CONTEXT = Context(
    run_level=(Message(Role.SYSTEM, (TextBlock("You are a test agent."),)),),
    goal_level=(Message(Role.USER, (TextBlock("Call tools, then finish."),)),),
)


@functools.cache
def tools() -> ToolRegistry:
    """One shared registry (a value): compiling its schemas once keeps crash rounds fast."""
    return ToolRegistry(
        [
            Tool(
                ToolSpec("noop", "Does nothing.", {"type": "object"}, ReplayPolicy.SAFE),
                lambda arguments: "ok",
            ),
            Tool(
                ToolSpec("poke", "A side effect.", {"type": "object"}, ReplayPolicy.NEVER),
                lambda arguments: "poked",
            ),
        ]
    )


def script(steps: int) -> list[object]:
    calls = [f"CALL {'noop' if k % 2 == 0 else 'poke'} {{}}" for k in range(steps - 1)]
    return [reply(text, call_id=f"c{k}") for k, text in enumerate([*calls, "FINAL: done"])]


def definition(store: RunStore, steps: int) -> AgentDefinition:
    return AgentDefinition(
        model_client=ScriptedModelClient(script(steps), by_call_index=True),  # type: ignore[arg-type]
        decision_parser=LineDecisionParser(),
        store=store,
        event_sink=NullEventSink(),
        synthetic_observations=SYNTHETIC,
    )


def request(run_id: str, index: int, steps: int, **binding: str) -> RunRequest:
    registry = tools()
    return RunRequest(
        run_id=run_id,
        budget=Budget(
            max_steps=steps + 2,
            max_actions=steps + 2,
            max_consecutive_parse_failures=3,
            max_prompt_chars=10_000_000,
        ),
        action_executor=registry.executor(),
        tools=registry,
        context=CONTEXT,
        injections={},
        model_binding=binding,
        model_replay_policy=ReplayPolicy.SAFE if index % 2 == 0 else ReplayPolicy.NEVER,
        observation_template="Observation: {observation}",
        tool_section_template="Tools: {tools}",
        cancel_grace_seconds=1.0,
    )
