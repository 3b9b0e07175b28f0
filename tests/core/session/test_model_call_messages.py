"""The ``ModelCall`` a client receives from the loop behaves as a plain frozen ``ModelCall``.

Its ``messages`` tuple is copied out of the run's history only when first read (design 0016);
these tests pin everything a client can observe about that.
"""

from __future__ import annotations

import copy
import dataclasses
import pickle
import threading

import pytest

from polyloop.ports import ModelCall
from polyloop.session import run
from polyloop.types import Message, ModelReply, Role, TextBlock
from tests.loop_kit import Effects, make_definition, make_request, replies, scenario_tools


async def _calls(*contents: str) -> list[ModelCall]:
    definition = make_definition(replies(*contents))
    await run(definition, make_request("m"))
    calls: list[ModelCall] = definition.model_client.calls  # type: ignore[attr-defined]
    return calls


def _plain(call: ModelCall) -> ModelCall:
    return ModelCall(
        call.messages, call.call_index, call.run_id, call.result_id, call.binding, call.tools
    )


async def test_messages_read_after_the_run_are_each_calls_own_prefix() -> None:
    calls = await _calls("RUN: a", "RUN: b", "FINAL: done")
    lengths = [len(call.messages) for call in calls]
    assert lengths == [2, 4, 6]
    assert all(type(call.messages) is tuple for call in calls)
    assert all(isinstance(m, Message) for call in calls for m in call.messages)
    assert calls[2].messages[:4] == calls[1].messages
    assert calls[1].messages[:2] == calls[0].messages
    assert calls[2].messages[2] == Message(Role.ASSISTANT, (TextBlock("RUN: a"),))
    assert calls[2].messages[4] == Message(Role.ASSISTANT, (TextBlock("RUN: b"),))
    assert calls[2].messages[3].role is Role.USER


async def test_messages_read_during_the_call_equal_messages_read_later() -> None:
    seen: list[tuple[Message, ...]] = []

    def answer(text: str):  # type: ignore[no-untyped-def]
        def entry(call: ModelCall) -> ModelReply:
            seen.append(call.messages)
            return ModelReply(call_id=None, content=text, thinking="")

        return entry

    definition = make_definition([answer("RUN: a"), answer("RUN: b"), answer("FINAL: x")])
    await run(definition, make_request("m"))
    calls: list[ModelCall] = definition.model_client.calls  # type: ignore[attr-defined]
    assert [call.messages for call in calls] == seen
    # read once, the same tuple object comes back every time
    assert all(call.messages is first for call, first in zip(calls, seen, strict=True))


async def test_equal_to_a_plain_model_call_both_ways_and_not_to_a_different_one() -> None:
    call = (await _calls("RUN: a", "FINAL: done"))[1]
    plain = _plain(call)
    assert call == plain
    assert plain == call
    assert hash(dataclasses.replace(call, binding=())) == hash(  # type: ignore[arg-type]
        dataclasses.replace(plain, binding=())  # type: ignore[arg-type]
    )
    other = dataclasses.replace(plain, call_index=7)
    assert call != other
    assert other != call
    shorter = dataclasses.replace(plain, messages=plain.messages[:-1])
    assert call != shorter
    assert call != "not a call"


async def test_pickle_and_copies_give_a_plain_model_call() -> None:
    call = (await _calls("RUN: a", "FINAL: done"))[1]
    for clone in (pickle.loads(pickle.dumps(call)), copy.deepcopy(call), copy.copy(call)):
        assert type(clone) is ModelCall
        assert clone == call


async def test_frozen_and_dataclass_helpers_work() -> None:
    call = (await _calls("RUN: a", "FINAL: done"))[1]
    with pytest.raises(dataclasses.FrozenInstanceError):
        call.messages = ()  # type: ignore[misc]
    with pytest.raises(dataclasses.FrozenInstanceError):
        call.call_index = 3  # type: ignore[misc]
    assert isinstance(call, ModelCall)
    assert dataclasses.is_dataclass(call)
    assert [f.name for f in dataclasses.fields(call)] == [
        "messages",
        "call_index",
        "run_id",
        "result_id",
        "binding",
        "tools",
    ]
    replaced = dataclasses.replace(call, call_index=9)
    assert replaced.messages == call.messages
    assert replaced.call_index == 9
    emptied = dataclasses.replace(call, messages=())
    assert emptied.messages == ()


async def test_each_call_carries_the_requests_tools_in_model_form() -> None:
    """Every model call of a run with tools carries `tools.schema_for_model()`; a tool-less run
    hands over an empty tuple."""
    tools = scenario_tools(Effects())
    definition = make_definition(replies("RUN: a", "FINAL: done"))
    await run(definition, make_request("t", tools=tools))
    calls: list[ModelCall] = definition.model_client.calls  # type: ignore[attr-defined]
    expected = tuple(tools.schema_for_model())
    assert [expected, expected] == [call.tools for call in calls]
    assert calls[0] == _plain(calls[0])
    assert dataclasses.replace(_plain(calls[0]), tools=()) != calls[0]
    assert ((), ()) == tuple(call.tools for call in await _calls("RUN: a", "FINAL: done"))


async def test_messages_read_from_many_threads_at_once_agree() -> None:
    calls = await _calls("RUN: a", "RUN: b", "RUN: c", "FINAL: done")
    results: list[tuple[Message, ...]] = []
    lock = threading.Lock()

    def read(call: ModelCall) -> None:
        value = call.messages
        with lock:
            results.append(value)

    threads = [threading.Thread(target=read, args=(calls[-1],)) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(results) == 8
    assert all(value == results[0] for value in results)
    assert len(results[0]) == 8
