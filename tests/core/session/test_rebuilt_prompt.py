"""``rebuilt_prompt``: the messages a recorded run sent to its model, rebuilt from its request and
its log, are the messages the model client received, call by call (design 0061)."""

from __future__ import annotations

import dataclasses

from hypothesis import given, settings
from hypothesis import strategies as st

from polyloop.ports import ModelCall
from polyloop.session import follow_up, rebuilt_prompt, run
from polyloop.stores.memory import MemoryRunStore
from tests.loop_kit import (
    SCENARIO,
    Effects,
    make_definition,
    make_request,
    replies,
    scenario_tools,
)


def _calls(definition: object) -> list[ModelCall]:
    calls: list[ModelCall] = definition.model_client.calls  # type: ignore[attr-defined]
    return calls


@settings(max_examples=25, deadline=None)
@given(
    script=st.lists(st.sampled_from(SCENARIO[:-1]), max_size=5),
    native=st.booleans(),
)
async def test_every_call_is_rebuilt_as_the_model_received_it(
    script: list[str], native: bool
) -> None:
    """Any run of tool calls, code, rejected calls and unreadable replies, native tools or not:
    call k's rebuilt messages are the ones the client got, and their size is the step's
    recorded prompt_chars."""
    store = MemoryRunStore()
    definition = make_definition(replies(*script, "FINAL: done"), store)
    request = make_request("r", tools=scenario_tools(Effects()))
    if native:
        request = dataclasses.replace(request, native_tools=True)
    await run(definition, request)
    log = await store.read_log("r")
    rebuilt = await rebuilt_prompt(store, request, log)
    calls = _calls(definition)
    assert len(log.steps) == len(calls)
    for k, call in enumerate(calls):
        assert call.messages == rebuilt.messages_of_call(k)
        assert log.steps[k].step.prompt_chars == rebuilt.chars_before[k]
    assert request.context.goal_level == rebuilt.prefix[-rebuilt.goal_messages :]


async def test_a_follow_up_run_is_rebuilt_with_its_conversation() -> None:
    """A follow-up's first call holds the earlier turn and the new input: rebuilt the same,
    the conversation read from the store, the input the goal's last message."""
    store = MemoryRunStore()
    tools = scenario_tools(Effects())
    first = make_definition(replies("CALL read {}", "FINAL: it says hi"), store)
    await run(first, make_request("t1", tools=tools))
    second = make_definition(replies("FINAL: hi, again"), store)
    request = make_request("t2", tools=tools)
    await follow_up(second, "t1", request, "What did it say?")
    log = await store.read_log("t2")
    rebuilt = await rebuilt_prompt(store, request, log)
    assert _calls(second)[0].messages == rebuilt.messages_of_call(0)
    assert "What did it say?" == rebuilt.prefix[-1].content[0].text  # type: ignore[union-attr]
    assert rebuilt.goal_messages > len(request.context.goal_level)
