"""Streaming (server-sent events) through GatewayModelClient against a real loopback server:
the same reply as without streaming, a total deadline, cancellation, cut-off streams (issue 16,
item 5)."""

from __future__ import annotations

import asyncio
import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from polyloop.adapters.gateway import (
    GatewayIncompleteStreamError,
    GatewayMalformedResponseError,
    GatewayModelClient,
    GatewayStatusError,
    GatewayTimeoutError,
)
from polyloop.ports import ModelCall
from polyloop.types import Message, ModelReply, Role, TextBlock
from tests.adapters.gateway._server import Answer, FakeGateway, RawServer

CALL = ModelCall((Message(Role.USER, (TextBlock("go"),)),), 0, "run-s", "run-s/model/0", {})

texts = st.text(st.characters(codec="utf-8"), max_size=40)
answers = st.builds(
    Answer,
    content=texts | st.none(),
    reasoning_content=texts | st.none(),
    tool_calls=st.lists(
        st.tuples(
            st.from_regex(r"[a-z_]{1,12}", fullmatch=True),
            st.dictionaries(texts, st.integers() | texts, max_size=3).map(json.dumps) | texts,
        ),
        max_size=2,
    ).map(tuple),
    finish_reason=st.sampled_from(["stop", "length", "tool_calls", None]),
    usage=st.none()
    | st.fixed_dictionaries(
        {"prompt_tokens": st.integers(0, 10**6), "completion_tokens": st.integers(0, 10**6)}
    ),
    id=st.none() | st.just("cmpl-7"),
    chunk_chars=st.integers(1, 7),
    model=st.none() | st.just("") | st.sampled_from(["m", "m-2026-12-01"]),
)


async def _both(root: str, key: str) -> tuple[ModelReply, ModelReply]:
    url = f"{root}/answer/{key}/v1"
    async with (
        GatewayModelClient(url, "m") as whole,
        GatewayModelClient(url, "m", stream=True) as streamed,
    ):
        return await whole.call(CALL), await streamed.call(CALL)


@pytest.mark.slow
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(answer=answers)
def test_a_streamed_reply_equals_the_whole_reply_for_the_same_answer(
    fake_gateway: tuple[FakeGateway, str], answer: Answer
) -> None:
    """For any answer (text, reasoning, tool calls, finish reason, usage, id, model) and any chunking,
    the streamed reply equals the reply read from the whole response."""
    gateway, root = fake_gateway
    key = f"prop-{id(answer)}"
    gateway.answers[key] = answer
    whole, streamed = asyncio.run(_both(root, key))
    assert whole == streamed
    assert (answer.id, answer.reasoning_content or "") == (whole.call_id, whole.thinking)
    assert (answer.model or None) == whole.model  # the model that answered; "" is none


async def test_streaming_asks_for_events_and_usage(fake_gateway: tuple[FakeGateway, str]) -> None:
    """A streaming call sends `stream: true` with `stream_options.include_usage`, and reads the
    usage chunk; `stream_usage=False` leaves the option out."""
    gateway, root = fake_gateway
    gateway.answers["usage"] = Answer(content="hello", usage={"prompt_tokens": 3})
    async with GatewayModelClient(f"{root}/answer/usage/v1", "m", stream=True) as client:
        reply = await client.call(CALL)
    async with GatewayModelClient(
        f"{root}/answer/usage/v1", "m", stream=True, stream_usage=False
    ) as quiet:
        without = await quiet.call(CALL)
    first, second = gateway.requests_for("answer/usage")
    assert (True, {"include_usage": True}) == (first.body["stream"], first.body["stream_options"])
    assert "stream_options" not in second.body
    assert ({"prompt_tokens": 3}, None) == (dict(reply.usage or {}), without.usage)


async def test_a_long_generation_streams_past_the_read_timeout(
    fake_gateway: tuple[FakeGateway, str],
) -> None:
    """A reply taking longer than `timeout` in total arrives, since each chunk comes in time."""
    gateway, root = fake_gateway
    gateway.answers["long"] = Answer(content="abcdefgh", chunk_chars=1, delay=0.1)
    async with GatewayModelClient(f"{root}/answer/long/v1", "m", stream=True, timeout=0.5) as c:
        reply = await c.call(CALL)
    assert "abcdefgh" == reply.content


async def test_the_deadline_bounds_the_whole_streamed_call(
    fake_gateway: tuple[FakeGateway, str],
) -> None:
    """A stream still running at `deadline` raises `GatewayTimeoutError(phase="deadline")`."""
    gateway, root = fake_gateway
    gateway.answers["deadline"] = Answer(content="x" * 40, chunk_chars=1, delay=0.05)
    async with GatewayModelClient(
        f"{root}/answer/deadline/v1", "m", stream=True, timeout=5.0, deadline=0.5
    ) as client:
        with pytest.raises(GatewayTimeoutError) as caught:
            await client.call(CALL)
    assert "deadline" == caught.value.phase
    assert "within its deadline of 0.5 s" in str(caught.value)


async def test_cancelling_mid_stream_closes_the_response(
    fake_gateway: tuple[FakeGateway, str],
) -> None:
    """Cancelling the call while chunks arrive closes the connection: the server sees its client
    leave before the last chunk, and the cancellation passes through."""
    gateway, root = fake_gateway
    gateway.answers["cancel"] = Answer(content="y" * 200, chunk_chars=1, delay=0.02)
    async with GatewayModelClient(f"{root}/answer/cancel/v1", "m", stream=True) as client:
        task = asyncio.ensure_future(client.call(CALL))
        await asyncio.sleep(0.4)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        for _ in range(300):
            if "cancel" in gateway.abandoned_streams:
                break
            await asyncio.sleep(0.01)
    assert ["cancel"] == [key for key in gateway.abandoned_streams if key == "cancel"]


async def test_a_stream_without_its_done_marker_is_a_typed_failure(
    fake_gateway: tuple[FakeGateway, str],
) -> None:
    """A stream that ends cleanly but without `data: [DONE]` raises
    `GatewayIncompleteStreamError` instead of returning what arrived."""
    gateway, root = fake_gateway
    gateway.answers["nodone"] = Answer(content="partial", done_marker=False)
    async with GatewayModelClient(f"{root}/answer/nodone/v1", "m", stream=True) as client:
        with pytest.raises(
            GatewayIncompleteStreamError, match=r"ended without its 'data: \[DONE\]'"
        ):
            await client.call(CALL)


async def test_an_unreadable_stream_event_is_a_malformed_response() -> None:
    """A stream event that is not JSON raises `GatewayMalformedResponseError` quoting it."""
    event = b"data: {broken\n\n"
    head = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nContent-Length: %d\r\n\r\n"
    raw = head % len(event) + event
    async with (
        RawServer(raw).running() as root,
        GatewayModelClient(root + "/v1", "m", stream=True) as client,
    ):
        with pytest.raises(GatewayMalformedResponseError, match="a stream event is not JSON"):
            await client.call(CALL)


async def test_an_error_status_while_streaming_is_a_status_error(
    fake_gateway: tuple[FakeGateway, str],
) -> None:
    """A non-2xx answer to a streaming request raises `GatewayStatusError` with its body."""
    _, root = fake_gateway
    async with GatewayModelClient(f"{root}/status/502/v1", "m", stream=True) as client:
        with pytest.raises(GatewayStatusError) as caught:
            await client.call(CALL)
    assert 502 == caught.value.status_code


async def test_a_server_ignoring_stream_is_read_as_a_whole_response(
    fake_gateway: tuple[FakeGateway, str],
) -> None:
    """A server that answers a streaming request with one JSON completion is still understood."""
    _, root = fake_gateway
    async with GatewayModelClient(f"{root}/ok/v1", "m", stream=True) as client:
        reply = await client.call(CALL)
    assert "echo:go" == reply.content
