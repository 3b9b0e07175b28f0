"""Every caller of `polyloop.recovery.action_terms` ends where the function says, for every
combination of terms: the loop's action intent, resume of that intent in doubt, the validation
of a recorded step, and the record builders (issue 28, item 3).

Each case is a tool-less action or a call of tool ``t`` with each replay policy and each
``completes_run``; the expected terms come from the function, and the function's own table is
pinned in ``tests/core/recovery/test_action_terms.py``.
"""

from __future__ import annotations

import itertools
from dataclasses import replace

import pytest

from polyloop.errors import CorruptLogError
from polyloop.recovery import ActionTerms, action_terms, validate_log
from polyloop.session import resume, run
from polyloop.stores.memory import MemoryRunStore
from polyloop.testing import code_step, run_log_from, run_started, tool_step, write_records
from polyloop.tools import Tool, ToolRegistry, ToolSpec
from polyloop.types import IntentKind, ReplayPolicy, StopReason
from tests.loop_kit import (
    Crash,
    CrashingStore,
    Effects,
    MixedExecutor,
    make_definition,
    make_request,
    replies,
)

#: (tool name or None for a tool-less action, the tool's policy, its completes_run).
CASES = [(None, ReplayPolicy.SAFE, False)] + [
    ("t", policy, completes) for policy, completes in itertools.product(ReplayPolicy, (False, True))
]
IDS = ["tool-less"] + [f"t-{p.value}-completes={c}" for _, p, c in CASES[1:]]
#: Writes before the action executes: RunStarted, model intent, model result, action intent.
ACTION_ANNOUNCED = 4


def _setup(
    tool: str | None, policy: ReplayPolicy, completes_run: bool
) -> tuple[ToolRegistry, Effects, str, ActionTerms]:
    effects = Effects()
    spec = ToolSpec("t", "A tool.", {"type": "object"}, policy, completes_run)
    tools = ToolRegistry([Tool(spec, lambda arguments: effects.hit("t"))])
    terms = action_terms(tool, tools.spec_for)
    assert terms is not None
    return tools, effects, "RUN: x" if tool is None else "CALL t {}", terms


@pytest.mark.parametrize(("tool", "policy", "completes_run"), CASES, ids=IDS)
async def test_the_loop_announces_and_ends_by_the_terms(
    tool: str | None, policy: ReplayPolicy, completes_run: bool
) -> None:
    tools, effects, line, terms = _setup(tool, policy, completes_run)
    memory = MemoryRunStore()
    request = make_request("r", tools=tools, executor=MixedExecutor(tools, effects))
    result = await run(make_definition(replies(line, "FINAL: done"), memory), request)
    log = await memory.read_log("r")
    (intent,) = [i for i in log.intents if i.kind is IntentKind.ACTION]
    assert terms.replay_policy is intent.replay_policy
    ended = StopReason.TASK_COMPLETED if terms.completes_run else StopReason.AGENT_FINISHED
    assert ended is result.stop_reason
    validate_log(log, "r")


@pytest.mark.parametrize(("tool", "policy", "completes_run"), CASES, ids=IDS)
async def test_resume_settles_the_action_in_doubt_by_the_terms(
    tool: str | None, policy: ReplayPolicy, completes_run: bool
) -> None:
    tools, effects, line, terms = _setup(tool, policy, completes_run)
    memory = MemoryRunStore()
    request = make_request("r", tools=tools, executor=MixedExecutor(tools, effects))
    script = replies(line, "FINAL: done")
    with pytest.raises(Crash):
        await run(make_definition(script, CrashingStore(memory, ACTION_ANNOUNCED)), request)
    result = await resume(make_definition(script, memory), request)
    if terms.replay_policy is ReplayPolicy.NEVER:
        assert StopReason.RESUME_STATE_UNKNOWN is result.stop_reason
        assert 0 == sum(effects.counts.values())
        return
    ended = StopReason.TASK_COMPLETED if terms.completes_run else StopReason.AGENT_FINISHED
    assert ended is result.stop_reason
    assert 1 == sum(effects.counts.values())


@pytest.mark.parametrize(("tool", "policy", "completes_run"), CASES, ids=IDS)
async def test_resume_refuses_an_intent_in_doubt_off_the_terms(
    tool: str | None, policy: ReplayPolicy, completes_run: bool
) -> None:
    """An action intent in doubt that says `safe` against `never` terms is a corrupt log;
    one that says `never` against `safe` terms is never replayed either."""
    tools, effects, line, terms = _setup(tool, policy, completes_run)
    other = ReplayPolicy.SAFE if terms.replay_policy is ReplayPolicy.NEVER else ReplayPolicy.NEVER
    memory = MemoryRunStore()
    request = make_request("r", tools=tools, executor=MixedExecutor(tools, effects))
    script = replies(line, "FINAL: done")
    with pytest.raises(Crash):
        await run(make_definition(script, CrashingStore(memory, ACTION_ANNOUNCED)), request)
    log = await memory.read_log("r")
    assert log.started is not None
    model_intent, action_intent = log.intents
    edited = MemoryRunStore()
    flipped = replace(action_intent, replay_policy=other)
    await write_records(edited, [log.started, model_intent, *log.model_results, flipped])
    if other is ReplayPolicy.SAFE:
        with pytest.raises(CorruptLogError, match="replay policy"):
            await resume(make_definition(script, edited), request)
    else:  # the intent's own `never` already stops the run before the action is read again
        result = await resume(make_definition(script, edited), request)
        assert StopReason.RESUME_STATE_UNKNOWN is result.stop_reason
    assert 0 == sum(effects.counts.values())


@pytest.mark.parametrize(("tool", "policy", "completes_run"), CASES, ids=IDS)
def test_validation_holds_a_recorded_step_to_the_terms(
    tool: str | None, policy: ReplayPolicy, completes_run: bool
) -> None:
    """The builders write the terms' policy, validation accepts it and refuses the other."""
    snapshot = {
        "request.tools": "t",
        "request.tools.t.replay_policy": policy.value,
        "request.tools.t.completes_run": "true" if completes_run else "false",
    }
    terms = action_terms(tool, lambda name: ToolSpec(name, "", {}, policy, completes_run))
    assert terms is not None
    for intent_policy in ReplayPolicy:
        if tool is None:
            writes = code_step("r", 0)
            # the builder writes the tool-less terms; the test then forces each policy
            assert writes.action_intent is not None
            assert terms.replay_policy is writes.action_intent.replay_policy
            writes = replace(
                writes, action_intent=replace(writes.action_intent, replay_policy=intent_policy)
            )
        else:
            writes = tool_step("r", 0, tool_name="t", replay_policy=intent_policy)
        log = run_log_from([run_started("r", snapshot), *writes.records])
        if intent_policy is terms.replay_policy:
            validate_log(log, "r")
        else:
            with pytest.raises(CorruptLogError, match="replay_policy"):
                validate_log(log, "r")
