"""``follow_up``: a conversation's next turn is a new run linked to the one it continues
(design 0052). What the model sees, what the log records, what is refused, and resume."""

from __future__ import annotations

import pytest

from polyloop.asking import RunParked
from polyloop.errors import (
    ConfigurationError,
    CorruptLogError,
    RunAlreadyStartedError,
    RunNotFinishedError,
    RunNotFoundError,
)
from polyloop.ports import ModelCall, RunStore
from polyloop.session import approve, follow_up, resume, resume_or_park, run
from polyloop.stores.memory import MemoryRunStore
from polyloop.testing import run_finished, run_started, write_records
from polyloop.tools import Tool, ToolRegistry, ToolSpec
from polyloop.types import Message, Role, RunResult, RunStarted, StopReason, TextBlock
from tests.loop_kit import (
    GOAL,
    Crash,
    CrashingStore,
    Effects,
    make_definition,
    make_request,
    replies,
    scenario_tools,
)


def _text(role: Role, text: str) -> Message:
    return Message(role, (TextBlock(text),))


def _calls(definition: object) -> list[ModelCall]:
    calls: list[ModelCall] = definition.model_client.calls  # type: ignore[attr-defined]
    return calls


async def _first_turn(store: RunStore) -> None:
    """Run ``t1``: it reads a file, then answers."""
    effects = Effects()
    tools = scenario_tools(effects)
    definition = make_definition(replies("CALL read {}", "FINAL: the file says hi"), store)
    result = await run(definition, make_request("t1", tools=tools))
    assert StopReason.AGENT_FINISHED == result.stop_reason


#: What the model of a follow-up of ``t1`` sees after the goal: t1's steps, then the input.
T1_HISTORY = (
    _text(Role.ASSISTANT, "CALL read {}"),
    _text(Role.USER, "Observation: read done"),
    _text(Role.ASSISTANT, "FINAL: the file says hi"),
)


async def test_a_follow_up_records_its_link_and_sees_the_conversation() -> None:
    """The new run's RunStarted names t1 and the input; its first call holds t1's history."""
    store = MemoryRunStore()
    await _first_turn(store)
    tools = scenario_tools(Effects())
    definition = make_definition(replies("FINAL: it said hi"), store)
    result = await follow_up(
        definition, "t1", make_request("t2", tools=tools), "What did it say again?"
    )
    assert StopReason.AGENT_FINISHED == result.stop_reason
    log = await store.read_log("t2")
    assert log.started is not None
    assert ("t1", "What did it say again?") == (
        log.started.follows_run_id,
        log.started.queued_input,
    )
    goal_end = len(GOAL.run_level) + 1 + len(GOAL.goal_level)  # + the tool section
    messages = _calls(definition)[0].messages
    assert (*T1_HISTORY, _text(Role.USER, "What did it say again?")) == messages[goal_end:]
    assert GOAL.goal_level == messages[goal_end - len(GOAL.goal_level) : goal_end]


async def test_a_chain_of_three_turns_sees_every_input_in_order() -> None:
    """The third run's prompt holds t1's steps, t2's input and steps, then its own input."""
    store = MemoryRunStore()
    await _first_turn(store)
    second = make_definition(replies("FINAL: yes"), store)
    await follow_up(second, "t1", make_request("t2", tools=scenario_tools(Effects())), "Sure?")
    third = make_definition(replies("FINAL: bye"), store)
    await follow_up(third, "t2", make_request("t3", tools=scenario_tools(Effects())), "Thanks")
    messages = _calls(third)[0].messages
    assert (
        *T1_HISTORY,
        _text(Role.USER, "Sure?"),
        _text(Role.ASSISTANT, "FINAL: yes"),
        _text(Role.USER, "Thanks"),
    ) == messages[-6:]


async def test_an_unfinished_previous_run_is_refused_and_nothing_is_written() -> None:
    """Following a run that has not stopped raises RunNotFinishedError; no log for the new run."""
    store = MemoryRunStore()
    await store.write_run_started(run_started("half"))
    definition = make_definition(replies("FINAL: x"), store)
    with pytest.raises(RunNotFinishedError, match="'half' has not finished"):
        await follow_up(definition, "half", make_request("next"), "hello")
    assert (await store.read_log("next")).started is None
    assert [] == _calls(definition)


async def test_a_missing_previous_run_is_refused() -> None:
    """Following an unknown run raises RunNotFoundError naming it."""
    definition = make_definition(replies("FINAL: x"))
    with pytest.raises(RunNotFoundError, match="'nobody' has no RunStarted"):
        await follow_up(definition, "nobody", make_request("next"), "hello")


async def test_following_oneself_is_refused() -> None:
    """The new run needs its own run_id."""
    definition = make_definition(replies("FINAL: x"))
    with pytest.raises(ConfigurationError, match="give the request a new run_id"):
        await follow_up(definition, "same", make_request("same"), "hello")


async def test_a_follow_up_run_id_already_used_is_refused() -> None:
    """follow_up starts a run once, like run(): an existing log is never written to."""
    store = MemoryRunStore()
    await _first_turn(store)
    await follow_up(make_definition(replies("FINAL: x"), store), "t1", make_request("t2"), "a")
    before = await store.read_log("t2")
    again = make_definition(replies("FINAL: y"), store)
    with pytest.raises(RunAlreadyStartedError, match="'t2' already has a log"):
        await follow_up(again, "t1", make_request("t2"), "b")
    assert before == await store.read_log("t2")


async def test_a_chain_that_loops_is_refused_as_corrupt() -> None:
    """Hand-edited links that form a loop are refused instead of followed for ever."""
    store = MemoryRunStore()
    for run_id, follows in (("a", "b"), ("b", "a")):
        started = RunStarted(run_id, {}, follows_run_id=follows, queued_input="x")
        await write_records(store, [started, run_finished(run_id, [], StopReason.STEP_BUDGET)])
    definition = make_definition(replies("FINAL: x"), store)
    with pytest.raises(CorruptLogError, match="loops back to run 'a'"):
        await follow_up(definition, "a", make_request("c"), "hello")


async def test_resume_of_a_crashed_follow_up_rebuilds_the_same_conversation() -> None:
    """A follow-up killed after its first step resumes with the same prompt, from the store."""
    store = MemoryRunStore()
    await _first_turn(store)
    script = replies("CALL read {}", "FINAL: done")
    # RunStarted, step 0's four writes: then the process "dies".
    crashing = make_definition(script, CrashingStore(store, crash_after=5))
    with pytest.raises(Crash):
        await follow_up(
            crashing, "t1", make_request("t2", tools=scenario_tools(Effects())), "Again?"
        )
    resumed = make_definition(script, store)
    result = await resume(resumed, make_request("t2", tools=scenario_tools(Effects())))
    assert StopReason.AGENT_FINISHED == result.stop_reason
    prefix = (*T1_HISTORY, _text(Role.USER, "Again?"))
    after_step_0 = (
        _text(Role.ASSISTANT, "CALL read {}"),
        _text(Role.USER, "Observation: read done"),
    )
    assert (*prefix, *after_step_0) == _calls(resumed)[0].messages[-len(prefix) - 2 :]
    assert prefix == _calls(crashing)[0].messages[-len(prefix) :]


async def test_a_gated_follow_up_parks_and_resumes_with_its_conversation() -> None:
    """A follow-up whose tool waits for approval returns RunParked; once approved,
    resume_or_park continues it with the same conversation in its prompt."""
    store = MemoryRunStore()
    await _first_turn(store)
    effects = Effects()
    gated = ToolRegistry(
        [
            Tool(
                ToolSpec("refund", "Refund.", {"type": "object"}, requires_approval=True),
                lambda arguments: effects.hit("refund"),
            )
        ]
    )
    script = replies("CALL refund {}", "FINAL: refunded")
    first = make_definition(script, store)
    parked = await follow_up(first, "t1", make_request("t2", tools=gated), "Refund it, please")
    assert isinstance(parked, RunParked)
    assert 0 == effects.counts["refund"]
    await approve(store, "t2", step=parked.ask.step, arguments_sha256=parked.ask.arguments_sha256)
    later = make_definition(script, store)
    result = await resume_or_park(later, make_request("t2", tools=gated))
    assert isinstance(result, RunResult)
    assert (StopReason.AGENT_FINISHED, 1) == (result.stop_reason, effects.counts["refund"])
    prefix = (*T1_HISTORY, _text(Role.USER, "Refund it, please"))
    assert prefix == _calls(later)[0].messages[-len(prefix) - 2 : -2]
