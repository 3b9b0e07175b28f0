"""GatewayModelClient against a real HTTP server on loopback (uvicorn + Starlette in a thread,
and a raw asyncio socket server for a response cut off mid-body)."""

from __future__ import annotations

import asyncio
import json
import logging
import traceback

import pytest

from polyloop.adapters.gateway import (
    BINDING_HEADER,
    GatewayConnectionError,
    GatewayEmptyChoicesError,
    GatewayError,
    GatewayMalformedResponseError,
    GatewayModelClient,
    GatewayStatusError,
    GatewayTimeoutError,
)
from polyloop.errors import ConfigurationError, PolyLoopError
from polyloop.ports import ModelCall, ModelClient
from polyloop.types import Message, ModelReply, Role, TextBlock
from tests.adapters.gateway._server import (
    LONG_BODY,
    FakeGateway,
    RawServer,
    closed_port,
    unaccepting_listener,
)

API_KEY = "sk-test-4f9b1c0e-SECRET-must-never-leak"


def make_call(
    text: str = "hi", *, index: int = 0, binding: dict[str, str] | None = None
) -> ModelCall:
    return ModelCall(
        messages=(
            Message(Role.SYSTEM, (TextBlock("You are terse."),)),
            Message(Role.USER, (TextBlock("part one, "), TextBlock(text))),
        ),
        call_index=index,
        run_id="run-1",
        result_id=f"run-1/model/{index}",
        binding=binding if binding is not None else {"episode": "7"},
    )


def client_for(root: str, scenario: str, **kwargs: object) -> GatewayModelClient:
    return GatewayModelClient(f"{root}/{scenario}/v1", "test-model", **kwargs)  # type: ignore[arg-type]


# ---------------------------------------------------------------------------
# Success
# ---------------------------------------------------------------------------


async def test_success_maps_content_id_and_sends_the_openai_body(
    fake_gateway: tuple[FakeGateway, str],
) -> None:
    """A successful call sends the OpenAI chat body with the sampling parameters and maps id,
    content and finish reason into the reply."""
    gateway, root = fake_gateway
    async with client_for(
        root, "ok", api_key=API_KEY, temperature=0.2, seed=11, max_tokens=64, stop=["\n\n"]
    ) as client:
        assert isinstance(client, ModelClient)
        reply = await client.call(make_call("hello"))
    assert reply == ModelReply(
        call_id="cmpl-run-1/model/0",
        content="echo:part one, hello",
        thinking="",
        finish_reason="stop",
    )
    (received,) = gateway.requests_for("ok")
    assert received.body == {
        "model": "test-model",
        "messages": [
            {"role": "system", "content": "You are terse."},
            {"role": "user", "content": "part one, hello"},
        ],
        "stream": False,
        "temperature": 0.2,
        "seed": 11,
        "max_tokens": 64,
        "stop": ["\n\n"],
    }
    assert received.headers["authorization"] == f"Bearer {API_KEY}"


@pytest.mark.parametrize(
    ("scenario", "thinking"),
    [
        ("reasoning_content", "thought via reasoning_content"),
        ("reasoning", "thought via reasoning"),
    ],
)
async def test_reasoning_fields_become_thinking(
    fake_gateway: tuple[FakeGateway, str], scenario: str, thinking: str
) -> None:
    """reasoning_content or reasoning in the response becomes the reply's thinking."""
    _, root = fake_gateway
    async with client_for(root, scenario) as client:
        reply = await client.call(make_call("x"))
    assert reply.thinking == thinking
    assert reply.content == "echo:part one, x"


@pytest.mark.parametrize("scenario", ["empty", "null"])
async def test_empty_content_is_a_valid_reply_and_missing_id_is_none(
    fake_gateway: tuple[FakeGateway, str], scenario: str
) -> None:
    """Empty or null content is a valid empty reply, and a missing id is call_id None."""
    _, root = fake_gateway
    async with client_for(root, scenario) as client:
        reply = await client.call(make_call())
    assert reply == ModelReply(call_id=None, content="", thinking="", finish_reason="stop")


async def test_binding_is_forwarded_as_header_and_optionally_as_metadata(
    fake_gateway: tuple[FakeGateway, str],
) -> None:
    """The binding travels as an ASCII JSON header with the run headers, and in the body's metadata
    only when asked."""
    gateway, root = fake_gateway
    binding = {"Task": "t-ü 1", "episode": "3", "note": "line\nbreak"}
    async with client_for(root, "ok/plain") as plain:
        await plain.call(make_call(index=4, binding=binding))
    async with client_for(root, "ok/meta", binding_metadata=True) as meta:
        await meta.call(make_call(index=5, binding=binding))
    (without,) = gateway.requests_for("ok/plain")
    (with_meta,) = gateway.requests_for("ok/meta")
    for received in (without, with_meta):
        assert json.loads(received.headers[BINDING_HEADER.lower()]) == binding
        assert received.headers[BINDING_HEADER.lower()].isascii()
        assert received.headers["x-polyloop-run-id"] == "run-1"
    assert without.headers["x-polyloop-call-index"] == "4"
    assert without.headers["x-polyloop-result-id"] == "run-1/model/4"
    assert "metadata" not in without.body
    assert with_meta.body["metadata"] == binding


# ---------------------------------------------------------------------------
# Failures: one typed error each, all under GatewayError < PolyLoopError
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("status", [302, 400, 401, 404, 429, 500, 503])
async def test_http_error_status_keeps_status_and_first_500_chars(
    fake_gateway: tuple[FakeGateway, str], status: int
) -> None:
    """A non-2xx answer raises GatewayStatusError keeping the status and the first 500 characters of
    the body."""
    _, root = fake_gateway
    async with client_for(root, f"status/{status}") as client:
        with pytest.raises(GatewayStatusError) as caught:
            await client.call(make_call())
    error = caught.value
    assert isinstance(error, PolyLoopError)
    assert error.status_code == status
    assert error.body == LONG_BODY[:500]
    assert f"HTTP {status}" in str(error)
    assert "PAST-THE-LIMIT" not in str(error)


async def test_each_http_call_is_made_once_no_retries(
    fake_gateway: tuple[FakeGateway, str],
) -> None:
    """A failing call is sent once: the client never retries."""
    gateway, root = fake_gateway
    async with client_for(root, "status/503/once") as client:
        with pytest.raises(GatewayStatusError) as caught:
            await client.call(make_call())
    assert caught.value.status_code == 503
    assert len(gateway.requests_for("status/503/once")) == 1


@pytest.mark.parametrize(
    ("scenario", "error_type", "detail"),
    [
        ("notjson", GatewayMalformedResponseError, "not JSON"),
        ("nomessage", GatewayMalformedResponseError, "choices[0].message"),
        ("nochoices", GatewayMalformedResponseError, "no 'choices' list"),
        ("emptychoices", GatewayEmptyChoicesError, "empty 'choices' list"),
    ],
)
async def test_malformed_bodies_raise(
    fake_gateway: tuple[FakeGateway, str],
    scenario: str,
    error_type: type[GatewayError],
    detail: str,
) -> None:
    """A body that is not JSON, or lacks choices or a message, raises the matching malformed-
    response error."""
    _, root = fake_gateway
    async with client_for(root, scenario) as client:
        with pytest.raises(error_type, match=None) as caught:
            await client.call(make_call())
    assert detail in str(caught.value)
    assert type(caught.value) is error_type


async def test_connection_refused() -> None:
    """A refused connection raises GatewayConnectionError."""
    port = closed_port()
    async with GatewayModelClient(f"http://127.0.0.1:{port}/v1", "m") as client:
        with pytest.raises(GatewayConnectionError, match="Could not connect"):
            await client.call(make_call())


async def test_slow_server_within_the_timeout_answers(
    fake_gateway: tuple[FakeGateway, str],
) -> None:
    """A server slower than usual but within the timeout answers normally."""
    _, root = fake_gateway
    async with client_for(root, "slow/0.3", timeout=5.0) as client:
        reply = await client.call(make_call("late"))
    assert reply.content == "echo:part one, late"


async def test_slow_server_past_the_read_timeout_raises_timeout(
    fake_gateway: tuple[FakeGateway, str],
) -> None:
    """A server slower than the read timeout raises GatewayTimeoutError in phase read."""
    _, root = fake_gateway
    async with client_for(root, "slow/3", timeout=0.3) as client:
        with pytest.raises(GatewayTimeoutError) as caught:
            await client.call(make_call())
    assert caught.value.phase == "read"


async def test_unanswered_connect_raises_connect_timeout() -> None:
    """A listener that never accepts raises GatewayTimeoutError in phase connect."""
    with unaccepting_listener() as port:
        async with GatewayModelClient(
            f"http://127.0.0.1:{port}/v1", "m", connect_timeout=0.3, timeout=5.0
        ) as client:
            with pytest.raises(GatewayTimeoutError) as caught:
                await client.call(make_call())
    assert caught.value.phase == "connect"


async def test_server_closing_mid_body_is_a_connection_error() -> None:
    """A server closing the connection mid-body raises GatewayConnectionError."""
    cut = (
        b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n"
        b'{"id": "x", "choices": [{"message": {"content": "trunc'
    )
    async with RawServer(cut).running() as root, GatewayModelClient(root + "/v1", "m") as client:
        with pytest.raises(GatewayConnectionError, match="before a complete response"):
            await client.call(make_call())


async def test_cancelling_a_call_passes_through_and_the_client_stays_usable(
    fake_gateway: tuple[FakeGateway, str],
) -> None:
    """Cancelling a call in flight raises CancelledError, and the client serves the next call."""
    gateway, root = fake_gateway
    async with client_for(root, "slow/1/cancel") as client:
        task = asyncio.ensure_future(client.call(make_call()))
        for _ in range(200):  # until the server has the request in hand
            if gateway.requests_for("slow/1/cancel"):
                break
            await asyncio.sleep(0.01)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        # The pool survives the cancelled request.
        assert (await client.call(make_call("x"))).content == "echo:part one, x"


async def test_closed_client_refuses_calls(fake_gateway: tuple[FakeGateway, str]) -> None:
    """A closed client refuses calls with GatewayConnectionError."""
    _, root = fake_gateway
    client = client_for(root, "ok")
    await client.call(make_call())
    await client.aclose()
    with pytest.raises(GatewayConnectionError, match="is closed"):
        await client.call(make_call())


# ---------------------------------------------------------------------------
# Concurrency
# ---------------------------------------------------------------------------


async def test_200_concurrent_calls_share_one_client(
    fake_gateway: tuple[FakeGateway, str],
) -> None:
    """200 concurrent calls on one client each get their own reply through one connection pool,
    closed afterwards."""
    gateway, root = fake_gateway
    async with client_for(root, "slow/0.05") as client:
        replies = await asyncio.gather(
            *(client.call(make_call(f"n{i}", index=i)) for i in range(200))
        )
        pool = client._client
    assert [r.content for r in replies] == [f"echo:part one, n{i}" for i in range(200)]
    assert [r.call_id for r in replies] == [f"cmpl-run-1/model/{i}" for i in range(200)]
    assert len(gateway.requests_for("slow/0.05")) == 200
    assert pool is not None
    assert pool.is_closed


# ---------------------------------------------------------------------------
# parameters() and the secret
# ---------------------------------------------------------------------------


def test_parameters_are_strings_and_report_every_sampling_parameter() -> None:
    """parameters() report every sampling parameter as a string, header names but never header
    values."""
    client = GatewayModelClient(
        "http://gw.invalid/v1/",
        "m-1",
        api_key=API_KEY,
        temperature=0.5,
        top_p=0.9,
        seed=3,
        extra_body={"top_k": 20},
        extra_headers={"X-Route": "a-secret-route-token"},
    )
    params = client.parameters()
    assert params == {
        "kind": "openai_chat_completions",
        "base_url": "http://gw.invalid/v1",
        "model": "m-1",
        "temperature": "0.5",
        "top_p": "0.9",
        "max_tokens": "unset",
        "seed": "3",
        "stop": "unset",
        "presence_penalty": "unset",
        "frequency_penalty": "unset",
        "extra_body.top_k": "20",
        "extra_header_names": "X-Route",
        "binding_forwarding": "header",
    }
    assert "a-secret-route-token" not in repr(params)


def test_a_changed_sampling_parameter_changes_parameters() -> None:
    """A different or unset temperature gives different parameters."""
    one = GatewayModelClient("http://gw.invalid/v1", "m", temperature=0.5).parameters()
    other = GatewayModelClient("http://gw.invalid/v1", "m", temperature=0.7).parameters()
    unset = GatewayModelClient("http://gw.invalid/v1", "m").parameters()
    assert one["temperature"] != other["temperature"] != unset["temperature"]


@pytest.mark.parametrize(
    "kwargs",
    [
        {"base_url": "gw:8000/v1"},
        {"model": ""},
        {"timeout": 0},
        {"temperature": float("nan")},
        {"stop": "END"},
        {"extra_body": {"messages": []}},
        {"seed": 1.5},
    ],
)
def test_bad_configuration_is_refused(kwargs: dict[str, object]) -> None:
    """A base URL without scheme, an empty model, a zero timeout, NaN, a bare stop string, a
    reserved extra_body key or a fractional seed is refused."""
    arguments: dict[str, object] = {"base_url": "http://gw.invalid/v1", "model": "m"}
    arguments.update(kwargs)
    with pytest.raises(ConfigurationError):
        GatewayModelClient(**arguments)  # type: ignore[arg-type]


def _every_string(error: BaseException) -> list[str]:
    strings = ["".join(traceback.format_exception(error)), repr(error), str(error)]
    seen: set[int] = set()
    current: BaseException | None = error
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        strings += [repr(current), str(current), repr(vars(current))]
        strings += [repr(arg) for arg in current.args]
        current = current.__cause__ or current.__context__
    return strings


async def test_the_api_key_never_appears_in_anything_the_client_produces(
    fake_gateway: tuple[FakeGateway, str], caplog: pytest.LogCaptureFixture
) -> None:
    """The API key appears in no repr, parameter, reply, error or log line, whatever the server
    answers."""
    gateway, root = fake_gateway
    caplog.set_level(logging.DEBUG)
    produced: list[str] = []
    errors: list[BaseException] = []
    scenarios = ["ok/key", "status/401", "status/500", "notjson", "emptychoices", "slow/3"]
    for scenario in scenarios:
        client = client_for(root, scenario, api_key=API_KEY, timeout=0.3)
        produced += [repr(client), str(client), repr(client.parameters())]
        try:
            produced.append(repr(await client.call(make_call())))
        except GatewayError as error:
            errors.append(error)
        finally:
            await client.aclose()
    for url in (f"http://127.0.0.1:{closed_port()}/v1",):
        async with GatewayModelClient(url, "m", api_key=API_KEY) as client:
            with pytest.raises(GatewayConnectionError) as caught:
                await client.call(make_call())
            errors.append(caught.value)
    cut = b"HTTP/1.1 200 OK\r\nContent-Length: 50\r\n\r\n{"
    async with (
        RawServer(cut).running() as raw_root,
        GatewayModelClient(raw_root + "/v1", "m", api_key=API_KEY) as client,
    ):
        with pytest.raises(GatewayConnectionError) as caught:
            await client.call(make_call())
        errors.append(caught.value)

    # The key was really sent (so its absence below is meaningful) ...
    assert gateway.requests_for("ok/key")[0].headers["authorization"] == f"Bearer {API_KEY}"
    # ... and every failure class was produced.
    assert {type(e) for e in errors} == {
        GatewayStatusError,
        GatewayMalformedResponseError,
        GatewayEmptyChoicesError,
        GatewayTimeoutError,
        GatewayConnectionError,
    }
    for error in errors:
        assert error.__cause__ is None
        assert error.__context__ is None
        produced += _every_string(error)
    produced += [record.getMessage() for record in caplog.records]
    produced += [caplog.text]
    assert caplog.records, "the client logs failures; the check below must see them"
    leaks = [text for text in produced if API_KEY in text or "SECRET" in text]
    assert leaks == []


async def test_secrets_echoed_by_the_gateway_are_redacted_from_every_text(
    fake_gateway: tuple[FakeGateway, str], caplog: pytest.LogCaptureFixture
) -> None:
    """A gateway that echoes the request's headers into a 500 body: the key, a secret extra
    header and the userinfo of `base_url` (sent as Basic credentials) appear nowhere in the
    error, its body, the failure a run would record, the parameters or the logs."""
    gateway, root = fake_gateway
    caplog.set_level(logging.DEBUG)
    route_token = "route-SECRET-7f3a"
    keyed = GatewayModelClient(
        f"{root}/echo/key/v1", "m", api_key=API_KEY, extra_headers={"X-Route-Token": route_token}
    )
    userinfo_url = root.replace("http://", "http://alice-SECRET:pa%24s-SECRET@") + "/echo/user/v1"
    with_userinfo = GatewayModelClient(userinfo_url, "m")
    produced: list[str] = []
    bodies: list[str] = []
    for client in (keyed, with_userinfo):
        with pytest.raises(GatewayStatusError) as caught:
            await client.call(make_call())
        await client.aclose()
        bodies.append(caught.value.body)
        produced += _every_string(caught.value)
        produced += [repr(client), repr(client.parameters()), caught.value.base_url]
        produced += [f"{type(caught.value).__name__}: {caught.value}"]  # a run log's failure
    (by_key,) = gateway.requests_for("echo/key")
    (by_userinfo,) = gateway.requests_for("echo/user")
    # The secrets really went out, so each echo holds them ...
    assert f"Bearer {API_KEY}" == by_key.headers["authorization"]
    assert route_token == by_key.headers["x-route-token"]
    assert by_userinfo.headers["authorization"].startswith("Basic ")
    assert all("[redacted]" in body for body in bodies)
    # ... and none of them comes back in anything the client produced.
    produced += [record.getMessage() for record in caplog.records]
    basic = by_userinfo.headers["authorization"].removeprefix("Basic ")
    assert [] == [text for text in produced if "SECRET" in text or "pa$s" in text or basic in text]
    assert f"{root}/echo/user/v1" == with_userinfo.parameters()["base_url"]


async def test_a_connection_error_never_shows_the_url_userinfo() -> None:
    """Connecting to a closed port through a URL with userinfo: the error names the endpoint
    without the credentials."""
    url = f"http://bob:hunter2-SECRET@127.0.0.1:{closed_port()}/v1"
    async with GatewayModelClient(url, "m") as client:
        with pytest.raises(GatewayConnectionError) as caught:
            await client.call(make_call())
    assert [] == [text for text in _every_string(caught.value) if "SECRET" in text]
    assert f"http://127.0.0.1:{url.rsplit(':', 1)[1]}" in str(caught.value)
