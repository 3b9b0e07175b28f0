"""RetryingModelClient over each real client (gateway, openai, LiteLLM) against a loopback
server scripted to fail: 429 with Retry-After and 503 retried, other 4xx not, attempts and
time capped, cancellation while waiting, warnings without the key, counts on the reply."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterator
from typing import Any

import pytest

from polyloop.adapters.gateway import GatewayStatusError
from polyloop.adapters.retry import (
    ModelCallRetriesError,
    RateLimiter,
    RetryingModelClient,
    RetryPolicy,
)
from polyloop.errors import ConfigurationError
from polyloop.types import REQUESTS_USAGE_KEY, RETRIES_USAGE_KEY
from polyloop_contract import find_secret
from tests.adapters._chat_clients import API_KEY, KINDS, make_call, open_client
from tests.adapters.gateway._server import serve_in_thread
from tests.adapters.retry._flaky import USAGE, Fail, FlakyServer

FAST = RetryPolicy(max_attempts=4, initial_delay=0.02, max_delay=0.1, max_total_seconds=30)


@pytest.fixture(scope="module")
def flaky() -> Iterator[tuple[FlakyServer, str]]:
    server = FlakyServer()
    with serve_in_thread(server) as root:  # type: ignore[arg-type]
        yield server, root


async def _call(kind: str, root: str, key: str, policy: RetryPolicy = FAST, **kw: Any) -> Any:
    async with open_client(kind, f"{root}/{key}/v1") as client:
        return await RetryingModelClient(client, policy, **kw).call(make_call())


@pytest.mark.parametrize("kind", KINDS)
async def test_429s_with_retry_after_are_waited_out_then_the_reply_counts_them(
    flaky: tuple[FlakyServer, str], kind: str
) -> None:
    server, root = flaky
    key = f"429-{kind}"
    server.failures[key] = [Fail(429, retry_after=0.3), Fail(429, retry_after=0.3)]
    reply = await _call(kind, root, key)
    assert reply.content == "FINAL: done"
    assert reply.usage[REQUESTS_USAGE_KEY] == 3
    assert reply.usage[RETRIES_USAGE_KEY] == 2
    assert {k: reply.usage[k] for k in USAGE} == USAGE
    arrivals = server.arrivals[key]
    assert len(arrivals) == 3
    # Retry-After honoured: never earlier than the server asked (the policy alone waits 0.02 s).
    assert arrivals[1] - arrivals[0] >= 0.3
    assert arrivals[2] - arrivals[1] >= 0.3


@pytest.mark.parametrize("kind", KINDS)
async def test_503s_are_retried_with_back_off(flaky: tuple[FlakyServer, str], kind: str) -> None:
    server, root = flaky
    key = f"503-{kind}"
    server.failures[key] = [Fail(503), Fail(500), Fail(502)]
    reply = await _call(kind, root, key)
    assert reply.usage[REQUESTS_USAGE_KEY] == 4
    assert server.count(key) == 4


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("status", [400, 401, 404, 422])
async def test_other_4xx_are_never_retried(
    flaky: tuple[FlakyServer, str], kind: str, status: int
) -> None:
    """The client's own error comes out unchanged after one request."""
    server, root = flaky
    key = f"{status}-{kind}"
    server.always[key] = Fail(status)
    with pytest.raises(GatewayStatusError) as caught:
        await _call(kind, root, key)
    assert caught.value.status_code == status
    assert server.count(key) == 1


@pytest.mark.parametrize("kind", KINDS)
async def test_exhausted_attempts_name_the_last_failure_and_warn_without_the_key(
    flaky: tuple[FlakyServer, str], kind: str, caplog: pytest.LogCaptureFixture
) -> None:
    server, root = flaky
    key = f"down-{kind}"
    server.always[key] = Fail(503)
    with (
        caplog.at_level(logging.WARNING, logger="polyloop"),
        pytest.raises(ModelCallRetriesError) as caught,
    ):
        await _call(kind, root, key, RetryPolicy(max_attempts=3, initial_delay=0.01))
    error = caught.value
    assert server.count(key) == 3
    assert error.reason == "attempts"
    assert dict(error.usage) == {REQUESTS_USAGE_KEY: 3, RETRIES_USAGE_KEY: 2}
    assert isinstance(error.last_failure, GatewayStatusError)
    assert "after 3 request(s)" in str(error)
    assert "last failure: GatewayStatusError" in str(error)
    assert "HTTP 503" in str(error)
    assert find_secret(error, (API_KEY,)) is None
    warnings = [r for r in caplog.records if r.name.startswith("polyloop")]
    assert [r.levelno for r in warnings] == [logging.WARNING] * 3  # two retries, then giving up
    assert all("HTTP 503" in r.getMessage() for r in warnings)
    assert not any(API_KEY in r.getMessage() for r in warnings)


async def test_a_retry_after_past_the_time_cap_gives_up_at_once(
    flaky: tuple[FlakyServer, str],
) -> None:
    server, root = flaky
    server.failures["late"] = [Fail(429, retry_after=60)]
    policy = RetryPolicy(max_attempts=5, initial_delay=0.01, max_total_seconds=5)
    with pytest.raises(ModelCallRetriesError) as caught:
        await _call("gateway", root, "late", policy)
    assert caught.value.reason == "time"
    assert server.count("late") == 1


async def test_a_failure_after_a_retry_that_is_not_transient_ends_the_call(
    flaky: tuple[FlakyServer, str],
) -> None:
    server, root = flaky
    server.failures["then-400"] = [Fail(503), Fail(400)]
    with pytest.raises(ModelCallRetriesError) as caught:
        await _call("gateway", root, "then-400")
    assert caught.value.reason == "not transient"
    assert dict(caught.value.usage) == {REQUESTS_USAGE_KEY: 2, RETRIES_USAGE_KEY: 1}


@pytest.mark.parametrize("kind", KINDS)
async def test_cancellation_while_waiting_passes_at_once(
    flaky: tuple[FlakyServer, str], kind: str, caplog: pytest.LogCaptureFixture
) -> None:
    server, root = flaky
    key = f"cancel-{kind}"
    server.failures[key] = [Fail(429, retry_after=30)]
    async with open_client(kind, f"{root}/{key}/v1") as client:
        retrying = RetryingModelClient(client, RetryPolicy(max_total_seconds=120))
        with caplog.at_level(logging.WARNING, logger="polyloop"):
            task = asyncio.create_task(retrying.call(make_call()))
            # The warning is written just before the 30 s wait starts.
            while not any("retrying in 30" in r.getMessage() for r in caplog.records):  # noqa: ASYNC110
                await asyncio.sleep(0.01)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await asyncio.wait_for(task, timeout=10)
    assert server.count(key) == 1


async def test_a_429_pauses_every_request_of_the_limiter(flaky: tuple[FlakyServer, str]) -> None:
    """A 429's Retry-After holds the other episodes' requests through the same limiter."""
    server, root = flaky
    server.failures["shared-a"] = [Fail(429, retry_after=0.5)]
    limiter = RateLimiter(max_in_flight=4)
    async with (
        open_client("gateway", f"{root}/shared-a/v1") as first,
        open_client("gateway", f"{root}/shared-b/v1") as second,
    ):
        a = RetryingModelClient(first, FAST, limiter=limiter)
        b = RetryingModelClient(second, FAST, limiter=limiter)
        task = asyncio.create_task(a.call(make_call()))
        while server.count("shared-a") == 0:  # noqa: ASYNC110 - the server runs in another thread
            await asyncio.sleep(0.01)
        while limiter.in_flight:  # noqa: ASYNC110 - until the 429 is read and the pause set
            await asyncio.sleep(0.01)
        await b.call(make_call())
        await task
    assert server.arrivals["shared-b"][0] - server.arrivals["shared-a"][0] >= 0.5


class NotAReply:
    def parameters(self) -> dict[str, str]:
        return {"kind": "odd", "model": "m"}

    async def call(self, call: object) -> object:
        return "not a reply"


async def test_the_wrapper_changes_no_parameter_and_passes_a_non_reply_on() -> None:
    """Retrying is transport: the snapshot is the wrapped client's, and a client that returns
    something else than a reply is the loop's to record (as a TypeError failure)."""
    odd = NotAReply()
    retrying = RetryingModelClient(odd)  # type: ignore[arg-type]
    assert retrying.parameters() == odd.parameters()
    assert await retrying.call(make_call()) == "not a reply"
    with pytest.raises(ConfigurationError, match="wraps a ModelClient"):
        RetryingModelClient(object())  # type: ignore[arg-type]
