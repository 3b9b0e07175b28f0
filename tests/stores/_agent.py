"""A small real agent for store tests that drive runs through ``polyloop.session``.

Every run follows one script: ``steps - 1`` tool calls, alternating ``noop`` (replay SAFE) and
``poke`` (replay NEVER), then a final answer. Even-numbered runs may replay their model call
(SAFE), odd-numbered ones may not (NEVER), so crashes land in every row of the recovery table.
"""

from __future__ import annotations

import asyncio
import functools
import json
import os
import subprocess
import sys
import time
from collections.abc import Mapping

from polyloop.ports import EventKind, RunStore
from polyloop.session import AgentDefinition, RunRequest
from polyloop.testing import (
    LineDecisionParser,
    NullEventSink,
    RecordingEventSink,
    ScriptedModelClient,
    reply,
)
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


# ---------------------------------------------------------------------------
# The ledger agent: lease races and kills, with every NEVER side effect on an fsynced ledger
# ---------------------------------------------------------------------------

#: Steps of a race run: three ``pay`` calls (replay NEVER), then a final answer.
RACE_SCRIPT = ('CALL pay {"n": 0}', 'CALL pay {"n": 1}', 'CALL pay {"n": 2}', "FINAL: paid")


def hold_script(policy: str) -> tuple[str, ...]:
    """Steps of a kill run: one ``pay``, then a tool of replay ``policy`` that hangs."""
    return ('CALL pay {"n": 0}', f'CALL hang_{policy} {{"n": 1}}', "FINAL: done")


def record_effect(ledger: str, run_id: str, n: int, who: str) -> None:
    """Append one side effect to the ledger and fsync it before returning."""
    line = json.dumps({"run_id": run_id, "n": n, "who": who}) + "\n"
    fd = os.open(ledger, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o644)
    try:
        os.write(fd, line.encode())
        os.fsync(fd)
    finally:
        os.close(fd)


def ledger_effects(ledger: str) -> list[dict[str, object]]:
    """Every side effect recorded so far, in order."""
    if not os.path.exists(ledger):
        return []
    with open(ledger, encoding="utf-8") as handle:
        return [json.loads(line) for line in handle if line.endswith("\n")]


def _spec(name: str, policy: ReplayPolicy) -> ToolSpec:
    return ToolSpec(name, f"The {name} tool.", {"type": "object"}, policy)


def ledger_tools(
    ledger: str, run_id: str, who: str, *, hang: bool = False, leave_child: str = "none"
) -> ToolRegistry:
    """``pay`` (NEVER) and ``hang_never``/``hang_safe`` each record their call on the ledger.

    With ``hang``, the two hang tools then print ``in-action`` and never return (the process is
    killed there); with ``leave_child`` (``fork`` or ``subprocess``) they first start a child
    process that outlives them and print ``child <pid>``. Handlers are not in the snapshot, so
    every variant resumes the others' runs.
    """

    async def pay(arguments: Mapping[str, object]) -> str:
        record_effect(ledger, run_id, int(str(arguments["n"])), who)
        await asyncio.sleep(0.002)  # widens the window in which two drivers would overlap
        return f"paid {arguments['n']}"

    async def hang_tool(arguments: Mapping[str, object]) -> str:
        record_effect(ledger, run_id, int(str(arguments["n"])), who)
        if not hang:
            return "done"
        if leave_child != "none":
            _say(f"child {_leave_a_child(leave_child)}")
        _say("in-action")
        await asyncio.sleep(3600)
        return "unreachable"

    return ToolRegistry(
        [
            Tool(_spec("pay", ReplayPolicy.NEVER), pay),
            Tool(_spec("hang_never", ReplayPolicy.NEVER), hang_tool),
            Tool(_spec("hang_safe", ReplayPolicy.SAFE), hang_tool),
        ]
    )


def _leave_a_child(how: str) -> int:
    """Start a process that outlives its parent; return its pid."""
    if how == "fork":
        pid = os.fork()
        if pid == 0:  # a plain fork: the child inherits every descriptor, lease file too
            time.sleep(60)
            os._exit(0)
        return pid
    return subprocess.Popen(["sleep", "60"], close_fds=False).pid


def _say(line: str) -> None:
    os.write(sys.stdout.fileno(), (line + "\n").encode())


def ledger_definition(store: RunStore, script: tuple[str, ...]) -> AgentDefinition:
    """The ledger agent's definition, with a :class:`RecordingEventSink` (it shows who drove)."""
    return AgentDefinition(
        model_client=ScriptedModelClient(
            [reply(text, call_id=f"c{k}") for k, text in enumerate(script)], by_call_index=True
        ),
        decision_parser=LineDecisionParser(),
        store=store,
        event_sink=RecordingEventSink(),
        synthetic_observations=SYNTHETIC,
    )


def ledger_request(run_id: str, tools: ToolRegistry) -> RunRequest:
    return RunRequest(
        run_id=run_id,
        budget=Budget(
            max_steps=8, max_actions=8, max_consecutive_parse_failures=3, max_prompt_chars=10**6
        ),
        action_executor=tools.executor(),
        tools=tools,
        context=CONTEXT,
        injections={},
        model_binding={},
        model_replay_policy=ReplayPolicy.SAFE,
        observation_template="Observation: {observation}",
        tool_section_template="Tools: {tools}",
        cancel_grace_seconds=1.0,
    )


def drove(definition: AgentDefinition) -> bool:
    """Whether the invocation made with ``definition`` drove the run (it announced a start)."""
    sink = definition.event_sink
    assert isinstance(sink, RecordingEventSink)
    return any(event.kind is EventKind.RUN_STARTED for event in sink.events)
