"""Native tool history on the wire (issue 25, items 2-4; design 0046): over loopback HTTP a
native-tools run sends the assistant's `tool_calls` and a `tool` message with the same id, no
schema text, and the calls a step did not execute named in the tool result."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from polyloop.adapters.gateway import GatewayModelClient
from polyloop.adapters.gateway._client import _messages_to_wire
from polyloop.adapters.tool_calls import ToolCallReplyParser
from polyloop.session import AgentDefinition, run
from polyloop.stores.memory import MemoryRunStore
from polyloop.testing import NullEventSink
from polyloop.tools import ToolRegistry
from polyloop.types import Message, Role, StopReason, TextBlock
from tests.adapters.gateway._server import Answer, FakeGateway
from tests.adapters.gateway.test_gateway_replies import SEARCH, TEXTS, request


async def native_run(
    fake_gateway: tuple[FakeGateway, str], key: str, first: Answer
) -> list[dict[str, Any]]:
    """Run a native-tools agent whose model answers ``first``, then a final text; return the
    bodies the server received."""
    gateway, root = fake_gateway
    gateway.answers[key] = [first, Answer(content="The note says: buy milk.")]
    tools = ToolRegistry([SEARCH])
    native = replace(request(key, tools), tool_section_template="", native_tools=True)
    async with GatewayModelClient(f"{root}/answer/{key}/v1", "m", native_tools=True) as client:
        result = await run(
            AgentDefinition(
                client, ToolCallReplyParser(), MemoryRunStore(), NullEventSink(), TEXTS
            ),
            native,
        )
    assert StopReason.AGENT_FINISHED is result.stop_reason
    return [received.body for received in gateway.requests_for(f"answer/{key}")]


async def test_the_call_and_its_result_go_back_natively_with_one_id(
    fake_gateway: tuple[FakeGateway, str],
) -> None:
    """The second request carries the assistant's call as `tool_calls` and the observation as
    a `tool` message answering its id; no message holds the schema text."""
    first, second = await native_run(
        fake_gateway,
        "native-history",
        Answer(content=None, tool_calls=(("search", '{"q": "milk"}'),)),
    )
    assert [{"role": "user", "content": "Find the milk note."}] == first["messages"]
    assert [
        {"role": "user", "content": "Find the milk note."},
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [
                {
                    "id": "call00000",
                    "type": "function",
                    "function": {"name": "search", "arguments": '{"q": "milk"}'},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "call00000", "content": "Result: found milk"},
    ] == second["messages"]
    assert (False, False) == (first["parallel_tool_calls"], second["parallel_tool_calls"])


async def test_calls_not_executed_are_named_in_the_tool_result(
    fake_gateway: tuple[FakeGateway, str],
) -> None:
    """Of two parallel calls the first runs; the tool message says the second did not, and the
    assistant's message shows only the call that ran."""
    _, second = await native_run(
        fake_gateway,
        "native-parallel",
        Answer(
            content="Searching twice.",
            tool_calls=(("search", '{"q": "milk"}'), ("search", '{"q": "eggs"}')),
        ),
    )
    assistant, tool = second["messages"][1:]
    assert ("Searching twice.", 1) == (assistant["content"], len(assistant["tool_calls"]))
    assert tool["content"].startswith("Result: found milk\n\nOnly the first tool call")
    assert '- search {"q":"eggs"}\n' in tool["content"]


def test_a_call_without_text_goes_with_empty_content_never_null() -> None:
    """The assistant's call is sent with `"content": ""` when no text precedes it: OpenAI allows
    null beside `tool_calls`, but llama-cpp-python's server answers it with HTTP 500 ("Input
    should be a valid string"), and "" is accepted everywhere (design 0066). Text before the
    call is kept as the content."""
    call = '<tool_call>\n{"name": "search", "arguments": {"q": "milk"}}\n</tool_call>'
    messages = (
        Message(Role.ASSISTANT, (TextBlock(call),), "call00000"),
        Message(Role.TOOL, (TextBlock("found"),), "call00000"),
        Message(Role.ASSISTANT, (TextBlock("Looking.\n" + call),), "call00001"),
    )
    bare, _, with_text = _messages_to_wire(messages)
    assert ("", "Looking.") == (bare["content"], with_text["content"])


def test_a_tool_result_whose_call_cannot_go_natively_is_sent_as_a_user_message() -> None:
    """An assistant message marked as a call whose text holds no single canonical call is sent
    as text, and the result answering it as `user`: a server never sees an orphan result."""
    messages = (
        Message(Role.ASSISTANT, (TextBlock("CALL search {}"),), "call00000"),
        Message(Role.TOOL, (TextBlock("found"),), "call00000"),
        Message(Role.TOOL, (TextBlock("orphan"),), "call00009"),
    )
    assert [
        {"role": "assistant", "content": "CALL search {}"},
        {"role": "user", "content": "found"},
        {"role": "user", "content": "orphan"},
    ] == _messages_to_wire(messages)
