"""Property: whatever the seams do and wherever the process dies (even repeatedly, also during
resume), the log validates, no `never` action runs twice, and steps stay contiguous."""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from polyloop.ports import Action
from polyloop.recovery import validate_log
from polyloop.session import resume, run
from polyloop.stores.memory import MemoryRunStore
from polyloop.testing import reply
from polyloop.tools import Tool, ToolRegistry, ToolSpec
from polyloop.types import (
    ActionOutcome,
    ActionStatus,
    Budget,
    ReplayPolicy,
    StopReason,
)
from tests.loop_kit import Crash, CrashingStore, make_definition, make_request

pytestmark = pytest.mark.crash

KINDS = (
    "never",
    "safe",
    "code",
    "rejected",
    "garbage",
    "model_fails",
    "final",
    "env_fails",
    "done",
)


def _script_entry(kind: str, k: int) -> object:
    return {
        "never": reply(f'CALL never {{"id": {k}}}'),
        "safe": reply(f'CALL safe {{"id": {k}}}'),
        "code": reply(f"RUN: code-{k}"),
        "rejected": reply(f'CALL missing {{"id": {k}}}'),
        "garbage": reply(f"?? {k}"),
        "model_fails": TimeoutError(f"model timed out at {k}"),
        "final": reply(f"FINAL: answer {k}"),
        "env_fails": reply(f"RUN: explode-{k}"),
        "done": reply(f'CALL done {{"id": {k}}}'),
    }[kind]


class World:
    """Side effects that really happened, keyed by (what, step)."""

    def __init__(self) -> None:
        self.effects: Counter[tuple[str, int]] = Counter()

    def tools(self) -> ToolRegistry:
        schema = {"type": "object", "properties": {"id": {"type": "integer"}}, "required": ["id"]}

        def handler(name: str):  # type: ignore[no-untyped-def]
            def run_tool(args: Mapping[str, object]) -> str:
                self.effects[(name, int(args["id"]))] += 1  # type: ignore[call-overload]
                return f"{name} ok"

            return run_tool

        return ToolRegistry(
            [
                Tool(ToolSpec("never", "side effect", schema), handler("never")),
                Tool(
                    ToolSpec("safe", "idempotent", schema, replay_policy=ReplayPolicy.SAFE),
                    handler("safe"),
                ),
                Tool(ToolSpec("done", "completes", schema, completes_run=True), handler("done")),
            ]
        )


class WorldExecutor:
    def __init__(self, world: World, tools: ToolRegistry) -> None:
        self._world = world
        self._tools = tools.executor()

    async def execute(self, action: Action) -> ActionOutcome:
        if action.tool_call is not None:
            return await self._tools.execute(action)
        kind, _, k = action.text.partition("-")
        self._world.effects[(kind, int(k))] += 1
        if kind == "explode":
            raise RuntimeError("sandbox died")
        return ActionOutcome(ActionStatus.EXECUTED, "ran", False, False, 0)

    def parameters(self) -> Mapping[str, str]:
        return {"kind": "world"}


@settings(max_examples=60, deadline=None)
@given(
    kinds=st.lists(st.sampled_from(KINDS), min_size=1, max_size=8),
    crash_points=st.lists(st.integers(min_value=1, max_value=12), max_size=4),
    model_policy=st.sampled_from(list(ReplayPolicy)),
    max_steps=st.integers(min_value=1, max_value=8),
    max_parse=st.integers(min_value=1, max_value=3),
)
async def test_random_runs_with_random_crashes_keep_the_invariants(
    kinds: list[str],
    crash_points: list[int],
    model_policy: ReplayPolicy,
    max_steps: int,
    max_parse: int,
) -> None:
    """Log validates after every crash; never-actions and code run at most once per step;
    step indexes are 0..n-1; a completed run stops with a reason from the vocabulary."""
    world = World()
    tools = world.tools()
    script = [_script_entry(kind, k) for k, kind in enumerate(kinds)]
    script.append(reply("FINAL: fallback"))
    memory = MemoryRunStore()
    request = make_request(
        "p",
        tools=tools,
        executor=WorldExecutor(world, tools),
        budget=Budget(max_steps, max_steps, max_parse, 1_000_000),
        model_replay_policy=model_policy,
    )

    result = None
    started = False
    for attempt, crash_after in enumerate([*crash_points, None]):
        store = memory if crash_after is None else CrashingStore(memory, crash_after)
        definition = make_definition(script, store)
        try:
            if not started:
                started = True
                result = await run(definition, request)
            else:
                result = await resume(definition, request)
        except Crash:
            pass
        log = await memory.read_log("p")
        validate_log(log, "p")
        assert list(range(len(log.steps))) == [c.step.step_idx for c in log.steps], attempt
        for (what, step), count in world.effects.items():
            if what in ("never", "code", "done", "explode"):
                assert count <= 1, f"{what} of step {step} ran {count} times"
        if result is not None:
            break

    assert result is not None
    assert result.stop_reason in set(StopReason)
    assert [s.step_idx for s in result.steps] == list(range(len(result.steps)))
    assert len(result.steps) <= max_steps
    log = await memory.read_log("p")
    assert log.finished is not None
    assert result == log.finished.result
