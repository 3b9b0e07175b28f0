"""What a real chat-completions response can hold, read by GatewayModelClient over loopback HTTP:
native tool calls, content parts, finish reasons, usage, back-off headers (issue 16, items 1-4
and 6)."""

from __future__ import annotations

import json
from collections.abc import Mapping

import pytest

from polyloop.adapters.gateway import (
    GatewayFinishReasonError,
    GatewayModelClient,
    GatewayStatusError,
)
from polyloop.adapters.gateway._client import _retry_after_seconds
from polyloop.adapters.tool_calls import ReplyToolCall, ToolCallReplyParser, render_tool_calls
from polyloop.errors import ConfigurationError
from polyloop.ports import Action, ModelCall, ToolCall
from polyloop.session import AgentDefinition, RunRequest, run
from polyloop.stores.memory import MemoryRunStore
from polyloop.testing import NullEventSink
from polyloop.tools import Tool, ToolRegistry, ToolSpec
from polyloop.types import (
    ActionStatus,
    Budget,
    Context,
    Message,
    ModelReply,
    ReplayPolicy,
    Role,
    StopReason,
    SyntheticObservations,
    TextBlock,
)
from tests.adapters.gateway._server import Answer, FakeGateway

TEXTS = SyntheticObservations("Rejected.", "Environment failed.", "Model call failed.")
USAGE = {
    "prompt_tokens": 21,
    "completion_tokens": 5,
    "total_tokens": 26,
    "prompt_tokens_details": {"cached_tokens": 16, "audio_tokens": None},
    "cost": 0.0004,
}
FLAT_USAGE = {
    "prompt_tokens": 21,
    "completion_tokens": 5,
    "total_tokens": 26,
    "prompt_tokens_details.cached_tokens": 16,
}


def call_of(text: str = "hi", tools: tuple[Mapping[str, object], ...] = ()) -> ModelCall:
    return ModelCall(
        (Message(Role.USER, (TextBlock(text),)),), 0, "run-r", "run-r/model/0", {}, tools
    )


async def answer(
    gateway: FakeGateway, root: str, key: str, reply: Answer, **options: object
) -> ModelReply:
    gateway.answers[key] = reply
    async with GatewayModelClient(f"{root}/answer/{key}/v1", "m", **options) as client:  # type: ignore[arg-type]
        return await client.call(call_of())


async def test_native_tool_calls_with_null_content_are_rendered_into_content(
    fake_gateway: tuple[FakeGateway, str],
) -> None:
    """A reply holding only `tool_calls` becomes the canonical text form, which the shipped
    parser reads back into `Action(tool_call=...)`: the call is never dropped."""
    gateway, root = fake_gateway
    reply = await answer(
        gateway,
        root,
        "tools-null",
        Answer(
            content=None,
            tool_calls=(("lookup", '{"order": "A-1"}'), ("broken", "{not json")),
            finish_reason="tool_calls",
        ),
    )
    expected = render_tool_calls(
        "", [ReplyToolCall("lookup", {"order": "A-1"}), ReplyToolCall("broken", "{not json")]
    )
    assert expected == reply.content
    assert "tool_calls" == reply.finish_reason
    decision = ToolCallReplyParser().parse(reply).decision
    assert Action(
        '{"name": "lookup", "arguments": {"order": "A-1"}}', ToolCall("lookup", {"order": "A-1"})
    ) == (decision)


async def test_content_parts_are_joined_and_other_parts_named(
    fake_gateway: tuple[FakeGateway, str],
) -> None:
    """A list of content parts has its text parts joined; an image part is written as a
    placeholder naming its type, never dropped silently."""
    gateway, root = fake_gateway
    parts = [
        {"type": "text", "text": "The chart "},
        {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}},
        {"type": "text", "text": " shows growth."},
    ]
    reply = await answer(gateway, root, "parts", Answer(content=parts))
    assert "The chart [image_url part not shown] shows growth." == reply.content


async def test_a_refusal_without_text_is_the_content(
    fake_gateway: tuple[FakeGateway, str],
) -> None:
    """A reply whose content is null but which carries a `refusal` reads as that refusal."""
    gateway, root = fake_gateway
    reply = await answer(gateway, root, "refusal", Answer(content=None, refusal="I can't."))
    assert "I can't." == reply.content


async def test_a_truncated_reply_is_accepted_and_keeps_its_finish_reason_and_usage(
    fake_gateway: tuple[FakeGateway, str],
) -> None:
    """By default `finish_reason: length` is kept on the reply (not dropped, not a failure),
    with the integer usage counts flattened by name."""
    gateway, root = fake_gateway
    reply = await answer(
        gateway, root, "length", Answer(content="half a sent", finish_reason="length", usage=USAGE)
    )
    assert ("half a sent", "length") == (reply.content, reply.finish_reason)
    assert FLAT_USAGE == dict(reply.usage or {})


@pytest.mark.parametrize("reason", ["length", "content_filter"])
async def test_refused_finish_reasons_raise_a_typed_error(
    fake_gateway: tuple[FakeGateway, str], reason: str
) -> None:
    """With `fail_on_finish_reasons`, such a reply raises `GatewayFinishReasonError` carrying the
    reason and the reply, and the option is in `parameters()`."""
    gateway, root = fake_gateway
    options = {"fail_on_finish_reasons": ["length", "content_filter"]}
    with pytest.raises(GatewayFinishReasonError) as caught:
        await answer(gateway, root, f"refuse-{reason}", Answer(finish_reason=reason), **options)
    assert reason == caught.value.finish_reason
    assert reason == caught.value.reply.finish_reason
    assert f"finish_reason {reason!r}" in str(caught.value)
    client = GatewayModelClient(f"{root}/v1", "m", **options)  # type: ignore[arg-type]
    assert '["content_filter","length"]' == client.parameters()["fail_on_finish_reasons"]


async def test_a_refused_finish_reason_ends_a_governed_run_with_llm_error(
    fake_gateway: tuple[FakeGateway, str],
) -> None:
    """In a run, the refused reply is a model-call failure: stop reason `llm_error`, with the
    reason in the recorded failure."""
    gateway, root = fake_gateway
    gateway.answers["run-length"] = Answer(content="cut", finish_reason="length")
    store = MemoryRunStore()
    async with GatewayModelClient(
        f"{root}/answer/run-length/v1", "m", fail_on_finish_reasons=["length"]
    ) as client:
        result = await run(
            AgentDefinition(client, ToolCallReplyParser(), store, NullEventSink(), TEXTS),
            request("run-length", ToolRegistry()),
        )
    assert StopReason.LLM_ERROR is result.stop_reason
    (model_result,) = (await store.read_log("run-length")).model_results
    assert model_result.failure is not None
    assert model_result.failure.startswith("GatewayFinishReasonError: ")


async def test_rate_limit_headers_are_kept_on_the_status_error(
    fake_gateway: tuple[FakeGateway, str],
) -> None:
    """A 429 keeps `Retry-After` (also as seconds) and the rate-limit headers, nothing else."""
    _, root = fake_gateway
    async with GatewayModelClient(f"{root}/ratelimited/v1", "m") as client:
        with pytest.raises(GatewayStatusError) as caught:
            await client.call(call_of())
    error = caught.value
    assert 429 == error.status_code
    assert 7.0 == error.retry_after_seconds
    assert {
        "retry-after": "7",
        "x-ratelimit-remaining-requests": "0",
        "x-ratelimit-reset-tokens": "6m0s",
    } == dict(error.headers)
    assert "retry after 7 s" in str(error)


@pytest.mark.parametrize(
    ("headers", "seconds"),
    [
        ({"retry-after": "2.5"}, 2.5),
        ({"retry-after-ms": "1500", "retry-after": "9"}, 1.5),
        ({"retry-after": "Thu, 01 Jan 1970 00:00:00 GMT"}, 0.0),
        ({"retry-after": "soon"}, None),
        ({}, None),
    ],
)
def test_retry_after_reads_seconds_milliseconds_and_dates(
    headers: dict[str, str], seconds: float | None
) -> None:
    """`Retry-After` in seconds or as an HTTP date, and `retry-after-ms`, become seconds."""
    assert seconds == _retry_after_seconds(headers)


SEARCH = Tool(
    ToolSpec(
        "search",
        "Search the notes.",
        {"type": "object", "properties": {"q": {"type": "string"}}, "required": ["q"]},
        replay_policy=ReplayPolicy.SAFE,
    ),
    lambda arguments: f"found {arguments['q']}",
)
DELETE = Tool(ToolSpec("delete", "Delete a note.", {"type": "object"}), lambda _: "deleted")


def request(run_id: str, tools: ToolRegistry) -> RunRequest:
    return RunRequest(
        run_id=run_id,
        budget=Budget(
            max_steps=4, max_actions=4, max_consecutive_parse_failures=2, max_prompt_chars=50_000
        ),
        action_executor=tools.executor(),
        tools=tools,
        context=Context((), (Message(Role.USER, (TextBlock("Find the milk note."),)),)),
        injections={},
        model_binding={},
        model_replay_policy=ReplayPolicy.SAFE,
        observation_template="Result: {observation}",
        tool_section_template="Tools: {tools}",
        cancel_grace_seconds=1.0,
    )


async def test_a_governed_run_with_native_tools_sends_the_current_tools_and_runs_the_call(
    fake_gateway: tuple[FakeGateway, str],
) -> None:
    """With `native_tools=True` the request carries the run's current (restricted) tools in
    OpenAI form; the model's native call runs, and usage and finish reasons reach the log."""
    gateway, root = fake_gateway
    gateway.answers["native"] = [
        Answer(content=None, tool_calls=(("search", '{"q": "milk"}'),), usage=USAGE),
        Answer(content="The note says: buy milk.", usage=USAGE),
    ]
    phase = ToolRegistry([SEARCH, DELETE]).restrict_to(["search"])
    store = MemoryRunStore()
    async with GatewayModelClient(f"{root}/answer/native/v1", "m", native_tools=True) as client:
        assert "true" == client.parameters()["native_tools"]
        result = await run(
            AgentDefinition(client, ToolCallReplyParser(), store, NullEventSink(), TEXTS),
            request("native", phase),
        )
    assert StopReason.AGENT_FINISHED is result.stop_reason
    first, _ = result.steps
    assert ("search", '{"q":"milk"}', ActionStatus.EXECUTED) == (
        first.tool_name,
        first.tool_arguments,
        first.action_status,
    )
    assert "found milk" == first.observation
    sent = [received.body["tools"] for received in gateway.requests_for("answer/native")]
    function = {
        "name": "search",
        "description": "Search the notes.",
        "parameters": SEARCH.spec.parameters,
    }
    assert [[{"type": "function", "function": function}]] * 2 == sent
    log = await store.read_log("native")
    assert [("stop", FLAT_USAGE)] * 2 == [
        (r.reply.finish_reason, dict(r.reply.usage or {})) for r in log.model_results if r.reply
    ]


async def test_without_native_tools_no_tools_field_is_sent(
    fake_gateway: tuple[FakeGateway, str],
) -> None:
    """Tools are sent natively only on request: by default the body has no `tools`, and
    `parameters()` is what it was before the option existed."""
    gateway, root = fake_gateway
    gateway.answers["plain"] = Answer(content="ok")
    tool = {"name": "search", "description": "", "parameters": {"type": "object"}}
    async with GatewayModelClient(f"{root}/answer/plain/v1", "m") as client:
        await client.call(call_of(tools=(tool,)))
        assert "native_tools" not in client.parameters()
    (received,) = gateway.requests_for("answer/plain")
    assert "tools" not in received.body


def test_tools_and_stream_options_cannot_be_smuggled_in_extra_body() -> None:
    """`extra_body` may not set `tools` or `stream_options`: the client owns them."""
    for key in ("tools", "stream_options"):
        with pytest.raises(ConfigurationError, match="native_tools"):
            GatewayModelClient("http://gw.invalid/v1", "m", extra_body={key: []})


def test_json_of_native_tools_matches_the_openai_function_form() -> None:
    """The body's tools are `{"type": "function", "function": <schema_for_model entry>}`."""
    client = GatewayModelClient("http://gw.invalid/v1", "m", native_tools=True)
    entry = ToolRegistry([SEARCH]).schema_for_model()[0]
    body = client._body(call_of(tools=(entry,)))
    assert [{"type": "function", "function": dict(entry)}] == json.loads(json.dumps(body["tools"]))
