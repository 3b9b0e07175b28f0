"""The openai and LiteLLM clients against a real loopback server: the gateway's reply mapping
and request, its errors, its secret rules, one request per call, the streaming deadline."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from polyloop.adapters.gateway import (
    GatewayConnectionError,
    GatewayError,
    GatewayFinishReasonError,
    GatewayIncompleteStreamError,
    GatewayMalformedResponseError,
    GatewayStatusError,
    GatewayTimeoutError,
)
from polyloop.adapters.tool_calls import ToolCallReplyParser
from polyloop.ports import Action
from polyloop.types import ModelReply
from polyloop_contract import find_secret
from tests.adapters._chat_clients import API_KEY, SDK_KINDS, make_call, open_client
from tests.adapters.gateway._server import Answer, FakeGateway, closed_port

USAGE = {
    "prompt_tokens": 11,
    "completion_tokens": 7,
    "total_tokens": 18,
    "prompt_tokens_details": {"cached_tokens": 4},
}

#: Replies the three clients must read alike.
ANSWERS: dict[str, Answer] = {
    "text": Answer(content="The answer is 42.", usage=USAGE),
    "reasoning": Answer(content="42", reasoning_content="six times seven", usage=USAGE),
    "tool-call": Answer(
        content=None,
        tool_calls=(("add", '{"a": 2, "b": 3}'),),
        finish_reason="tool_calls",
        usage=USAGE,
    ),
    "text-and-two-calls": Answer(
        content="Let me look.",
        tool_calls=(("read_file", '{"path": "notes.txt"}'), ("ls", "{}")),
        finish_reason="tool_calls",
    ),
    "broken-arguments": Answer(
        content="", tool_calls=(("add", '{"a": 2,'),), finish_reason="tool_calls"
    ),
    "cut-off": Answer(content="and then", finish_reason="length", id="cmpl-cut"),
    "no-id": Answer(content="anonymous", id=None),
}

TOOLS = (
    {
        "name": "add",
        "description": "Add two integers.",
        "parameters": {"type": "object", "properties": {"a": {"type": "integer"}}},
    },
)


async def _reply(kind: str, root: str, key: str, **options: Any) -> ModelReply:
    async with open_client(kind, f"{root}/answer/{key}/v1", **options) as client:
        return await client.call(make_call())


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
@pytest.mark.parametrize("kind", SDK_KINDS)
@pytest.mark.parametrize("name", sorted(ANSWERS))
async def test_the_reply_is_read_as_the_gateway_reads_it(
    fake_gateway: tuple[FakeGateway, str], kind: str, stream: bool, name: str
) -> None:
    """Content, thinking, tool calls in the canonical form, call id, finish reason and the
    server's usage counts: the same as the gateway's reply to the same answer."""
    gateway, root = fake_gateway
    key = f"{name}-{kind}-{stream}"
    gateway.answers[key] = [ANSWERS[name], ANSWERS[name]]
    expected = await _reply("gateway", root, key, stream=stream)
    got = await _reply(kind, root, key, stream=stream)
    if kind == "litellm" and expected.call_id is None:
        # LiteLLM makes an id up when the server sent none.
        assert got.call_id is not None
        assert got.call_id.startswith("chatcmpl-")
        got = ModelReply(None, got.content, got.thinking, got.finish_reason, got.usage)
    assert (got.call_id, got.content, got.thinking, got.finish_reason) == (
        expected.call_id,
        expected.content,
        expected.thinking,
        expected.finish_reason,
    )
    # LiteLLM may add counts of its own (a reasoning-token estimate); the server's are kept.
    sent = dict(expected.usage or {})
    assert {k: v for k, v in (got.usage or {}).items() if k in sent} == sent


@pytest.mark.parametrize("kind", SDK_KINDS)
async def test_a_native_tool_call_becomes_the_parsers_action(
    fake_gateway: tuple[FakeGateway, str], kind: str
) -> None:
    gateway, root = fake_gateway
    gateway.answers[f"parse-{kind}"] = ANSWERS["tool-call"]
    reply = await _reply(kind, root, f"parse-{kind}")
    decision = ToolCallReplyParser().parse(reply).decision
    assert isinstance(decision, Action)
    assert decision.tool_call is not None
    assert (decision.tool_call.name, dict(decision.tool_call.arguments)) == (
        "add",
        {"a": 2, "b": 3},
    )


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
@pytest.mark.parametrize("kind", SDK_KINDS)
async def test_the_request_is_the_gateways(
    fake_gateway: tuple[FakeGateway, str], kind: str, stream: bool
) -> None:
    """Messages, tools, tool_choice, parallel_tool_calls, sampling, extra_body, the stream
    options and the X-PolyLoop-* headers go out as the gateway sends them."""
    gateway, root = fake_gateway
    options: dict[str, Any] = {
        "native_tools": True,
        "tool_choice": "required",
        "temperature": 0.25,
        "max_tokens": 64,
        "seed": 5,
        "extra_body": {"top_k": 20},
        "stream": stream,
    }
    bodies = []
    for client_kind in ("gateway", kind):
        key = f"request-{kind}-{stream}-{client_kind}"
        gateway.answers[key] = ANSWERS["text"]
        async with open_client(client_kind, f"{root}/answer/{key}/v1", **options) as client:
            await client.call(make_call("what is 2+3?", tools=TOOLS))
        (received,) = gateway.requests_for(f"answer/{key}")
        bodies.append(received)
    fields = (
        "model",
        "messages",
        "tools",
        "tool_choice",
        "parallel_tool_calls",
        "temperature",
        "max_tokens",
        "seed",
        "top_k",
        "stream",
        "stream_options",
    )
    first, second = ({f: r.body.get(f) for f in fields} for r in bodies)
    # LiteLLM leaves "stream": false out; it is the default.
    first["stream"], second["stream"] = bool(first["stream"]), bool(second["stream"])
    assert second == first
    assert first["parallel_tool_calls"] is False
    for name in ("x-polyloop-binding", "x-polyloop-run-id", "x-polyloop-call-index"):
        assert bodies[1].headers[name] == bodies[0].headers[name]
    assert bodies[1].headers["x-polyloop-result-id"] == "run-1/model/0"


@pytest.mark.parametrize("kind", SDK_KINDS)
async def test_one_call_is_one_request_the_sdks_own_retries_are_off(
    fake_gateway: tuple[FakeGateway, str], kind: str
) -> None:
    """The openai SDK retries a 429 twice by default and LiteLLM may too: each call here is
    exactly one request, and the 429's Retry-After and rate-limit headers are kept."""
    gateway, root = fake_gateway
    before = len(gateway.requests_for("ratelimited"))
    async with open_client(kind, f"{root}/ratelimited/v1") as client:
        with pytest.raises(GatewayStatusError) as caught:
            await client.call(make_call())
    assert len(gateway.requests_for("ratelimited")) == before + 1
    error = caught.value
    assert error.status_code == 429
    assert error.retry_after_seconds == 7
    assert error.headers["x-ratelimit-remaining-requests"] == "0"
    assert "x-unrelated" not in error.headers


async def test_sdk_retries_may_be_kept_on_the_openai_client(
    fake_gateway: tuple[FakeGateway, str],
) -> None:
    """``sdk_retries=True`` leaves the SDK's own ``max_retries`` on (invisible to PolyLoop)."""
    gateway, root = fake_gateway
    before = len(gateway.requests_for("status/502"))
    async with open_client(
        "openai", f"{root}/status/502/v1", sdk_retries=True, max_retries=1
    ) as client:
        with pytest.raises(GatewayStatusError):
            await client.call(make_call())
    assert len(gateway.requests_for("status/502")) == before + 2


def _failing_urls(root: str) -> dict[str, str]:
    return {
        "echoing 500": f"{root}/echo/v1",
        "400": f"{root}/status/400/v1",
        "429": f"{root}/ratelimited/v1",
        "closed port": f"http://127.0.0.1:{closed_port()}/v1",
        "not json": f"{root}/notjson/v1",
    }


@pytest.mark.parametrize("kind", SDK_KINDS)
async def test_no_error_holds_the_key(fake_gateway: tuple[FakeGateway, str], kind: str) -> None:
    """Against servers that fail (one echoes the request's headers, key included, into its
    500 body), every error is a GatewayError whose text, attributes, chain and traceback
    frames hold no trace of the key."""
    _, root = fake_gateway
    for label, url in _failing_urls(root).items():
        async with open_client(kind, url) as client:
            assert API_KEY not in repr(client)
            assert API_KEY not in repr(client.parameters())
            try:
                await client.call(make_call())
            except GatewayError as error:
                failure: GatewayError = error
            else:
                raise AssertionError(f"{label}: no error")
        assert failure.__cause__ is None, label
        assert failure.__context__ is None, label
        assert find_secret(failure, (API_KEY,)) is None, label
        assert API_KEY not in str(failure), label
    # The echo really carried the key: the redaction had something to remove.
    async with open_client(kind, f"{root}/echo/v1") as client:
        with pytest.raises(GatewayStatusError) as caught:
            await client.call(make_call())
    assert "[redacted]" in caught.value.body


@pytest.mark.parametrize("kind", SDK_KINDS)
async def test_failures_are_the_gateways_errors(
    fake_gateway: tuple[FakeGateway, str], kind: str
) -> None:
    gateway, root = fake_gateway
    for url, expected in (
        (f"{root}/status/503/v1", GatewayStatusError),
        (f"http://127.0.0.1:{closed_port()}/v1", GatewayConnectionError),
        (f"{root}/emptychoices/v1", GatewayMalformedResponseError),
    ):
        async with open_client(kind, url) as client:
            with pytest.raises(expected):
                await client.call(make_call())
    gateway.answers[f"length-{kind}"] = ANSWERS["cut-off"]
    async with open_client(
        kind, f"{root}/answer/length-{kind}/v1", fail_on_finish_reasons=["length"]
    ) as client:
        with pytest.raises(GatewayFinishReasonError) as caught:
            await client.call(make_call())
    assert caught.value.reply.content == "and then"


@pytest.mark.parametrize("kind", SDK_KINDS)
async def test_the_deadline_cuts_a_slow_stream(
    fake_gateway: tuple[FakeGateway, str], kind: str
) -> None:
    """A stream that keeps trickling is bounded by ``deadline``, and the server sees its
    client leave."""
    gateway, root = fake_gateway
    key = f"trickle-{kind}"
    gateway.answers[key] = Answer(content="x" * 200, chunk_chars=1, delay=0.05)
    async with open_client(kind, f"{root}/answer/{key}/v1", stream=True, deadline=0.5) as client:
        # Uncut, the 200 chunks 50 ms apart would end in a reply after 10 s.
        with pytest.raises(GatewayTimeoutError) as caught:
            await client.call(make_call())
    assert caught.value.phase == "deadline"
    for _ in range(500):
        if key in gateway.abandoned_streams:
            break
        await asyncio.sleep(0.01)
    assert key in gateway.abandoned_streams


async def test_a_stream_that_ends_without_a_finish_reason_is_cut(
    fake_gateway: tuple[FakeGateway, str],
) -> None:
    """The openai SDK ends a stream quietly without ``data: [DONE]``; with no finish reason
    either, the reply may be cut off, and the openai client says so."""
    gateway, root = fake_gateway
    gateway.answers["cut-stream"] = Answer(content="half a", finish_reason=None, done_marker=False)
    async with open_client("openai", f"{root}/answer/cut-stream/v1", stream=True) as client:
        with pytest.raises(GatewayIncompleteStreamError):
            await client.call(make_call())


@pytest.mark.parametrize("kind", SDK_KINDS)
async def test_cancelling_a_call_passes_through(
    fake_gateway: tuple[FakeGateway, str], kind: str
) -> None:
    gateway, root = fake_gateway
    before = len(gateway.requests_for("slow/30"))
    async with open_client(kind, f"{root}/slow/30/v1") as client:
        task = asyncio.create_task(client.call(make_call()))
        while len(gateway.requests_for("slow/30")) == before:  # noqa: ASYNC110 - another thread
            await asyncio.sleep(0.01)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
