"""PolyLoop quick-start: one tool, a scripted model, an in-memory store.

Needs ``pip install polyloop-core polyloop-stores`` (core holds no store; the workspace has both).
Run it with ``uv run python examples/quickstart.py``. Swap ``ScriptedModelClient`` for
``polyloop.adapters.gateway.GatewayModelClient`` to drive a real model, and ``MemoryRunStore``
for ``polyloop.stores.sqlite.SqliteRunStore`` to make the run survive a crash.
"""

import asyncio

from polyloop.session import AgentDefinition, RunRequest, run
from polyloop.stores.memory import MemoryRunStore
from polyloop.testing import LineDecisionParser, NullEventSink, ScriptedModelClient, reply
from polyloop.tools import Tool, ToolRegistry, ToolSpec
from polyloop.types import Budget, Context, Message, ReplayPolicy, Role, SyntheticObservations
from polyloop.types import TextBlock as Text

add = ToolSpec("add", "Add two integers a and b.", {"type": "object", "required": ["a", "b"]})
tools = ToolRegistry([Tool(add, lambda args: str(args["a"] + args["b"]))])
model = ScriptedModelClient([reply('CALL add {"a": 2, "b": 3}'), reply("FINAL: 2 + 3 = 5")])
texts = SyntheticObservations("Call rejected.", "Environment failed.", "Model call failed.")
definition = AgentDefinition(model, LineDecisionParser(), MemoryRunStore(), NullEventSink(), texts)
request = RunRequest(
    run_id="quickstart-1", tools=tools, action_executor=tools.executor(), injections={}, model_binding={},
    budget=Budget(max_steps=5, max_actions=5, max_consecutive_parse_failures=2, max_prompt_chars=9999),
    context=Context((Message(Role.SYSTEM, (Text("Use the tools."),)),), (Message(Role.USER, (Text("2 + 3?"),)),)),
    model_replay_policy=ReplayPolicy.SAFE, observation_template="Result: {observation}",
    tool_section_template="Tools: {tools}", cancel_grace_seconds=1.0,
)  # fmt: skip
result = asyncio.run(run(definition, request))
for step in result.steps:
    print(step.step_idx, step.action, "->", step.observation)
print(result.stop_reason.value, result.final_answer)  # agent_finished 2 + 3 = 5
