"""A factory for ``polyloop batch``: one small arithmetic agent per episode, offline.

    .venv/bin/polyloop batch examples/batch_episodes.jsonl --agent examples.batch_agent:factory --store sqlite:.polyloop/batch.sqlite --results .polyloop/batch-results.jsonl

Each line of ``examples/batch_episodes.jsonl`` names a run (``run_id``) and two numbers; the
scripted model adds them with the ``add`` tool, then answers. ``factory`` is an async context
manager, the shape that owns a per-episode executor: a dissect-style agent would write
``async with ContainerExecutor(...) as executor:`` around its ``yield``, and the runner leaves
the block — closing the sandbox — whatever becomes of the episode.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import AsyncIterator

from polyloop.batch import Episode, EpisodeAgent
from polyloop.ports import ModelCall, RunStore
from polyloop.session import AgentDefinition, RunRequest
from polyloop.testing import LineDecisionParser, NullEventSink, reply
from polyloop.tools import Tool, ToolRegistry, ToolSpec
from polyloop.types import (
    Budget,
    Context,
    Message,
    ModelReply,
    ReplayPolicy,
    Role,
    SyntheticObservations,
    TextBlock,
)

ADD = ToolSpec("add", "Add two integers a and b.", {"type": "object", "required": ["a", "b"]})
TOOLS = ToolRegistry(
    [
        Tool(
            ADD,
            lambda arguments: str(arguments["a"] + arguments["b"]),
        )
    ]
)
TEXTS = SyntheticObservations("Call rejected.", "Environment failed.", "Model call failed.")


class AddingModel:
    """Calls ``add`` with the episode's numbers, then answers with the tool's result."""

    def __init__(self, a: int, b: int) -> None:
        self.a, self.b = a, b

    async def call(self, call: ModelCall) -> ModelReply:
        if call.call_index == 0:
            return reply(f"CALL add {json.dumps({'a': self.a, 'b': self.b})}")
        return reply(f"FINAL: {self.a} + {self.b} = {self.a + self.b}")

    def parameters(self) -> dict[str, str]:
        return {"kind": "adding-example", "a": str(self.a), "b": str(self.b)}


@contextlib.asynccontextmanager
async def factory(episode: Episode, store: RunStore) -> AsyncIterator[EpisodeAgent]:
    """The agent of one episode, on the batch's store."""
    a, b = int(episode.data["a"]), int(episode.data["b"])
    definition = AgentDefinition(
        AddingModel(a, b), LineDecisionParser(), store, NullEventSink(), TEXTS
    )
    request = RunRequest(
        run_id=episode.run_id,
        tools=TOOLS,
        action_executor=TOOLS.executor(),
        injections={},
        model_binding={},
        budget=Budget(
            max_steps=4, max_actions=2, max_consecutive_parse_failures=2, max_prompt_chars=9999
        ),
        context=Context(
            (Message(Role.SYSTEM, (TextBlock("Use the tools."),)),),
            (Message(Role.USER, (TextBlock(f"What is {a} + {b}?"),)),),
        ),
        model_replay_policy=ReplayPolicy.SAFE,
        observation_template="Result: {observation}",
        tool_section_template="Tools: {tools}",
        cancel_grace_seconds=1.0,
    )
    yield EpisodeAgent(definition, request)
