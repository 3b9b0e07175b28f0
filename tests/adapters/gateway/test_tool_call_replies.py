"""Native tool calls in replies and requests: `tool_calls` wins over the legacy `function_call`,
one call is never read as two, and `tool_choice` / `parallel_tool_calls` reach the server
(issue 25, item 1)."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from polyloop.adapters.gateway import GatewayModelClient
from polyloop.adapters.gateway._reply import ReplyDraft
from polyloop.adapters.tool_calls import ReplyToolCall, parse_tool_calls
from polyloop.errors import ConfigurationError
from polyloop.ports import ModelCall
from polyloop.types import Message, Role, TextBlock
from tests.adapters.gateway._server import Answer, FakeGateway

TOOL = {"name": "search", "description": "Search.", "parameters": {"type": "object"}}

names = st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), min_size=1, max_size=12)
json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=8),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3)
    ),
    max_leaves=6,
)
arguments = st.dictionaries(st.text(max_size=6), json_values, max_size=4)
calls = st.tuples(names, arguments)


def function_of(name: str, args: Mapping[str, object]) -> dict[str, Any]:
    return {"name": name, "arguments": json.dumps(args)}


def completion(message: Mapping[str, Any]) -> dict[str, Any]:
    return {"id": "c", "choices": [{"index": 0, "message": dict(message), "finish_reason": "x"}]}


def read_whole(message: Mapping[str, Any]) -> list[ReplyToolCall]:
    draft = ReplyDraft()
    assert draft.add_completion(completion(message)) is None
    return list(parse_tool_calls(draft.reply().content).calls)


@given(st.lists(calls, max_size=4), st.none() | calls)
def test_tool_calls_win_and_a_reply_never_yields_more_calls_than_it_made(
    tool_calls: list[tuple[str, dict[str, object]]], legacy: tuple[str, dict[str, object]] | None
) -> None:
    """The reply's calls are its `tool_calls` entries in order; the `function_call` counts only
    when there is no `tool_calls` entry, so a server sending both never doubles a call."""
    message: dict[str, Any] = {"role": "assistant", "content": None}
    if tool_calls:
        message["tool_calls"] = [
            {"id": f"call_{i}", "type": "function", "function": function_of(n, a)}
            for i, (n, a) in enumerate(tool_calls)
        ]
    if legacy is not None:
        message["function_call"] = function_of(*legacy)
    expected = tool_calls or ([legacy] if legacy is not None else [])
    assert [ReplyToolCall(n, a) for n, a in expected] == read_whole(message)


@given(
    st.lists(calls, min_size=1, max_size=3),
    calls,
    st.integers(min_value=1, max_value=7),
    st.booleans(),
    st.booleans(),
)
def test_a_stream_gives_the_reply_the_whole_response_gives(
    tool_calls: list[tuple[str, dict[str, object]]],
    legacy: tuple[str, dict[str, object]],
    piece: int,
    legacy_first: bool,
    repeat_names: bool,
) -> None:
    """Streamed in pieces of any size, with the legacy copy before or after the calls, and the
    name sent once (OpenAI) or in every delta (llama-cpp-python), the same message reads to the
    same reply as when it comes whole."""
    whole = {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {"id": f"call_{i}", "type": "function", "function": function_of(n, a)}
            for i, (n, a) in enumerate(tool_calls)
        ],
        "function_call": function_of(*legacy),
    }
    deltas: list[dict[str, Any]] = []
    legacy_deltas = [{"function_call": function_of(*legacy)}]
    if legacy_first:
        deltas += legacy_deltas
    for index, (name, args) in enumerate(tool_calls):
        text = json.dumps(args)
        deltas.append(
            {"tool_calls": [{"index": index, "id": f"call_{index}", "function": {"name": name}}]}
        )
        named = {"name": name} if repeat_names else {}
        deltas += [
            {
                "tool_calls": [
                    {"index": index, "function": {**named, "arguments": text[i : i + piece]}}
                ]
            }
            for i in range(0, len(text), piece)
        ]
    if not legacy_first:
        deltas += legacy_deltas
    streamed = ReplyDraft()
    for delta in deltas:
        assert streamed.add_chunk({"id": "c", "choices": [{"index": 0, "delta": delta}]}) is None
    assert streamed.add_chunk({"id": "c", "choices": [{"index": 0, "finish_reason": "x"}]}) is None
    draft = ReplyDraft()
    assert draft.add_completion(completion(whole)) is None
    assert draft.reply() == streamed.reply()
    assert len(tool_calls) == len(parse_tool_calls(draft.reply().content).calls)


@given(st.dictionaries(st.text(max_size=12), json_values, max_size=5))
def test_reading_any_message_object_never_raises(message: dict[str, Any]) -> None:
    """Whatever a server puts into `choices[0].message`, reading it returns a reply or names
    the problem; it never raises."""
    for extra in ({}, {"tool_calls": message.get("x")}, {"function_call": message.get("y")}):
        draft = ReplyDraft()
        if draft.add_completion(completion({**message, **extra})) is None:
            draft.reply()


def test_a_malformed_legacy_copy_beside_the_real_call_is_ignored() -> None:
    """llama-cpp-python 0.3.x sends `function_call` beside `tool_calls`, sometimes malformed
    (`read_graph:`): the real call is the one read."""
    message = {
        "role": "assistant",
        "content": None,
        "tool_calls": [{"id": "a", "type": "function", "function": function_of("read_graph", {})}],
        "function_call": {"name": "read_graph:", "arguments": "{"},
    }
    assert [ReplyToolCall("read_graph", {})] == read_whole(message)


def call_with(tools: tuple[Mapping[str, object], ...] = (TOOL,)) -> ModelCall:
    return ModelCall((Message(Role.USER, (TextBlock("hi"),)),), 0, "r", "r/model/0", {}, tools)


async def sent_body(
    fake_gateway: tuple[FakeGateway, str], key: str, call: ModelCall, **options: Any
) -> dict[str, Any]:
    gateway, root = fake_gateway
    gateway.answers[key] = Answer(content="ok")
    async with GatewayModelClient(f"{root}/answer/{key}/v1", "m", **options) as client:
        await client.call(call)
    (received,) = gateway.requests_for(f"answer/{key}")
    return received.body


async def test_parallel_tool_calls_false_is_sent_beside_native_tools_by_default(
    fake_gateway: tuple[FakeGateway, str],
) -> None:
    """A step executes one action, so by default the server is asked for one call per reply;
    the default is not in `parameters()`, which stays what it was."""
    body = await sent_body(fake_gateway, "ptc-default", call_with(), native_tools=True)
    assert False is body["parallel_tool_calls"]
    assert "tool_choice" not in body
    params = GatewayModelClient("http://gw.invalid/v1", "m", native_tools=True).parameters()
    assert not {"parallel_tool_calls", "tool_choice"} & set(params)


async def test_parallel_tool_calls_none_sends_nothing_and_true_sends_true(
    fake_gateway: tuple[FakeGateway, str],
) -> None:
    """`parallel_tool_calls=None` is for servers that reject the field; both non-defaults are
    reported by `parameters()`."""
    none = await sent_body(
        fake_gateway, "ptc-none", call_with(), native_tools=True, parallel_tool_calls=None
    )
    true = await sent_body(
        fake_gateway, "ptc-true", call_with(), native_tools=True, parallel_tool_calls=True
    )
    assert ("parallel_tool_calls" not in none, True) == (True, true["parallel_tool_calls"])
    for value, reported in ((None, "unset"), (True, "true")):
        client = GatewayModelClient("http://gw.invalid/v1", "m", parallel_tool_calls=value)
        assert reported == client.parameters()["parallel_tool_calls"]


async def test_tool_choice_is_passed_through_beside_the_tools(
    fake_gateway: tuple[FakeGateway, str],
) -> None:
    """`tool_choice` goes to the server as given (llama.cpp ignores `tools` without it) and
    into the snapshot."""
    choice = {"type": "function", "function": {"name": "search"}}
    body = await sent_body(
        fake_gateway, "choice", call_with(), native_tools=True, tool_choice=choice
    )
    assert choice == body["tool_choice"]
    client = GatewayModelClient("http://gw.invalid/v1", "m", tool_choice="required")
    assert '"required"' == client.parameters()["tool_choice"]


async def test_no_tool_field_is_sent_without_tools(fake_gateway: tuple[FakeGateway, str]) -> None:
    """OpenAI refuses `tool_choice` and `parallel_tool_calls` in a request without tools."""
    tool_less = await sent_body(
        fake_gateway, "no-tools", call_with(()), native_tools=True, tool_choice="auto"
    )
    not_native = await sent_body(fake_gateway, "not-native", call_with(), tool_choice="auto")
    for body in (tool_less, not_native):
        assert not {"tools", "tool_choice", "parallel_tool_calls"} & set(body)


@pytest.mark.parametrize(
    ("options", "match"),
    [
        ({"tool_choice": ""}, "tool_choice must be a non-empty string"),
        ({"tool_choice": 3}, "tool_choice must be"),
        ({"tool_choice": {"x": object()}}, "JSON-serializable"),
        ({"tool_choice": "auto", "extra_body": {"tool_choice": "auto"}}, "pass it once"),
        ({"parallel_tool_calls": "no"}, "parallel_tool_calls must be False"),
        ({"extra_body": {"parallel_tool_calls": True}}, "parallel_tool_calls="),
    ],
)
def test_bad_tool_options_are_refused_saying_what_to_pass(
    options: dict[str, Any], match: str
) -> None:
    """Each bad tool option raises a ConfigurationError naming the option and its forms."""
    with pytest.raises(ConfigurationError, match=match):
        GatewayModelClient("http://gw.invalid/v1", "m", **options)
