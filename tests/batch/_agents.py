"""The episode factory of the batch tests: ``tests.batch._agents:factory`` (also on Ray workers).

Each episode's data says what its agent does (every key optional):

- ``steps`` (2): tool calls before the final answer, alternating ``look`` (replay SAFE) and
  ``pay`` (replay NEVER); each call appends one fsynced line to ``ledger``, when given.
- ``model_sleep`` (0): seconds each model call takes, so kills land mid-episode.
- ``opens``: a file where the factory's executor writes ``open``/``close`` lines (fsynced), to
  show that every executor it opened was closed, and how many were open at once.
- ``factory``: ``"raises"`` (the factory raises), ``"enter_raises"`` (the executor fails to
  open), ``"plain"`` (returns the agent itself), ``"awaitable"`` (an ``async def``),
  ``"wrong_run_id"``, ``"other_store"``, ``"not_an_agent"``.
- ``variant``: a string put into ``model_binding``, so changing it changes the snapshot.
- ``model_fails``: every model call raises (the run stops with ``llm_error``).
- ``calls``: a file where each model call appends a line (fsynced): what a pass called.
- ``gated``: ``pay`` requires a person's approval (issue 24), and its schema wants an integer
  ``n``; ``note``: a text every ``pay`` call carries as its ``note`` argument.
- ``question``: the first call asks the user this question (tool ``ask_user``, ``asks_user``).
- ``same_arguments``: every call has ``n`` 1, so two ``pay`` asks are alike but for their step.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
from collections.abc import AsyncIterator, Mapping
from typing import Any

from polyloop.batch import Episode, EpisodeAgent
from polyloop.ports import ModelCall, RunStore
from polyloop.session import AgentDefinition, RunRequest
from polyloop.stores.memory import MemoryRunStore
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

SYNTHETIC = SyntheticObservations("Rejected.", "Environment failed.", "Model call failed.")
CONTEXT = Context(
    run_level=(Message(Role.SYSTEM, (TextBlock("You are a batch test agent."),)),),
    goal_level=(Message(Role.USER, (TextBlock("Call the tools, then finish."),)),),
)


def append_line(path: str, document: Mapping[str, Any]) -> None:
    """Append one JSON line to ``path`` and fsync it before returning."""
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o644)
    try:
        os.write(fd, (json.dumps(dict(document)) + "\n").encode())
        os.fsync(fd)
    finally:
        os.close(fd)


class EpisodeModel:
    """Scripted by call index (a resumed run sees the same script), optionally slow."""

    def __init__(
        self,
        steps: int,
        sleep: float,
        fails: bool,
        calls: str | None,
        note: str | None = None,
        question: str | None = None,
        same_arguments: bool = False,
    ) -> None:
        self.steps, self.sleep, self.fails, self.calls = steps, sleep, fails, calls
        self.note, self.question, self.same_arguments = note, question, same_arguments

    async def call(self, call: ModelCall) -> ModelReply:
        if self.calls:
            append_line(self.calls, {"run_id": call.run_id, "k": call.call_index})
        if self.sleep:
            await asyncio.sleep(self.sleep)
        if self.fails:
            raise ConnectionError("the test model is down")
        k = call.call_index
        if self.question is not None and k == 0:
            asked = json.dumps({"question": self.question})
            return reply(f"CALL ask_user {asked}", call_id=f"c{k}")
        if k < self.steps:
            tool = "look" if k % 2 == 0 else "pay"
            arguments: dict[str, object] = {"n": 1 if self.same_arguments else k}
            if tool == "pay" and self.note is not None:
                arguments["note"] = self.note
            return reply(f"CALL {tool} {json.dumps(arguments)}", call_id=f"c{k}")
        return reply(f"FINAL: done after {self.steps} calls", call_id=f"c{k}")

    def parameters(self) -> Mapping[str, str]:
        return {"kind": "batch-test", "steps": str(self.steps)}


def _tools(episode: Episode) -> ToolRegistry:
    ledger = episode.data.get("ledger")
    run_id = episode.run_id

    def handler(tool: str) -> Any:
        async def record(arguments: Mapping[str, object]) -> str:
            if ledger:
                append_line(
                    str(ledger),
                    {"run_id": run_id, "tool": tool, "n": arguments["n"], "pid": os.getpid()},
                )
            return f"{tool} {arguments['n']} ok"

        return record

    gated = bool(episode.data.get("gated"))
    pay_schema: Mapping[str, object] = (
        {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]}
        if gated
        else {"type": "object"}
    )
    tools = [
        Tool(ToolSpec("look", "Looks.", {"type": "object"}, ReplayPolicy.SAFE), handler("look")),
        Tool(
            ToolSpec("pay", "Pays.", pay_schema, ReplayPolicy.NEVER, requires_approval=gated),
            handler("pay"),
        ),
    ]
    if episode.data.get("question") is not None:
        tools.append(
            Tool(
                ToolSpec(
                    "ask_user",
                    "Asks the user.",
                    {"type": "object", "properties": {"question": {"type": "string"}}},
                    asks_user=True,
                ),
                lambda arguments: "never called: a person answers",
            )
        )
    return ToolRegistry(tools)


def build(episode: Episode, store: RunStore) -> EpisodeAgent:
    """The agent of ``episode`` on ``store``."""
    data = episode.data
    steps = int(data.get("steps", 2))
    tools = _tools(episode)
    model = EpisodeModel(
        steps,
        float(data.get("model_sleep", 0)),
        bool(data.get("model_fails")),
        data.get("calls"),
        data.get("note"),
        data.get("question"),
        bool(data.get("same_arguments")),
    )
    definition = AgentDefinition(model, LineDecisionParser(), store, NullEventSink(), SYNTHETIC)
    binding = {"variant": str(data["variant"])} if "variant" in data else {}
    request = RunRequest(
        run_id=episode.run_id,
        budget=Budget(
            max_steps=steps + 2,
            max_actions=steps + 2,
            max_consecutive_parse_failures=2,
            max_prompt_chars=10_000_000,
        ),
        action_executor=tools.executor(),
        tools=tools,
        context=CONTEXT,
        injections={},
        model_binding=binding,
        model_replay_policy=ReplayPolicy.SAFE,
        observation_template="Observation: {observation}",
        tool_section_template="Tools: {tools}",
        cancel_grace_seconds=2.0,
    )
    return EpisodeAgent(definition, request)


@contextlib.asynccontextmanager
async def _session(episode: Episode, store: RunStore) -> AsyncIterator[EpisodeAgent]:
    """Stands for a per-episode executor (a container session): logs its open and close."""
    opens = episode.data.get("opens")
    note = (
        (lambda what: append_line(str(opens), {"run_id": episode.run_id, **what}))
        if opens
        else None
    )
    if episode.data.get("factory") == "enter_raises":
        raise OSError("the test sandbox cannot start")
    if note:
        note({"event": "open", "pid": os.getpid()})
    how = "returned"
    try:
        yield build(episode, store)
    except asyncio.CancelledError:
        how = "cancelled"
        raise
    except BaseException as error:
        how = f"raised {type(error).__name__}"
        raise
    finally:
        if note:
            note({"event": "close", "how": how, "pid": os.getpid()})


def factory(episode: Episode, store: RunStore) -> Any:
    """The factory the tests name as ``tests.batch._agents:factory``."""
    mode = episode.data.get("factory")
    if mode == "raises":
        raise RuntimeError(f"the factory cannot build {episode.run_id}")
    if mode == "plain":
        return build(episode, store)
    if mode == "awaitable":

        async def later() -> EpisodeAgent:
            await asyncio.sleep(0)
            return build(episode, store)

        return later()
    if mode == "wrong_run_id":
        agent = build(Episode(episode.run_id + "-other", episode.data), store)
        return agent
    if mode == "other_store":
        return build(episode, MemoryRunStore())
    if mode == "not_an_agent":
        return {"definition": None}
    return _session(episode, store)


#: Not callable: ``--agent tests.batch._agents:NOT_A_FACTORY`` is refused.
NOT_A_FACTORY = 42
