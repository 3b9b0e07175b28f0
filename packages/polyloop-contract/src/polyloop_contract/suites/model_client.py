"""ModelClient contract: parameters rules, replies are ModelReply, failures are exceptions."""

from __future__ import annotations

import inspect

import pytest

from polyloop.ports import ModelCall, ModelClient
from polyloop.types import Message, ModelReply, Role, TextBlock
from polyloop_contract._checks import (
    Rule,
    check_parameters_no_io,
    check_parameters_shape,
    check_parameters_stable_no_secrets,
)
from polyloop_contract.suites._cancel import check_cancellation_passes_through

SEAM = "ModelClient"
aio = pytest.mark.asyncio


def sample_call(index: int = 0) -> ModelCall:
    """A short, ordinary call: a system message and a question."""
    return ModelCall(
        messages=(
            Message(Role.SYSTEM, (TextBlock("You are checked by polyloop-contract."),)),
            Message(Role.USER, (TextBlock("Reply with one short sentence."),)),
        ),
        call_index=index,
        run_id="polyloop-contract",
        result_id=f"model-{index}",
        binding={"project": "polyloop-contract"},
    )


@aio
async def test_call_returns_a_model_reply(polyloop_model_client: ModelClient) -> None:
    """call is a coroutine method and answers a short call with a ModelReply."""
    rule = Rule(SEAM, "call returns a ModelReply")
    rule.check(
        inspect.iscoroutinefunction(polyloop_model_client.call),
        "call is not declared `async def`; the loop awaits it",
    )
    reply = await rule.call("call(a short ModelCall)", polyloop_model_client.call(sample_call()))
    rule.check(
        isinstance(reply, ModelReply),
        f"call returned {type(reply).__name__}, not ModelReply",
    )
    rule.check(
        isinstance(reply.content, str) and isinstance(reply.thinking, str),
        f"content and thinking must be str; got {type(reply.content).__name__} and "
        f"{type(reply.thinking).__name__}",
    )
    rule.check(
        reply.call_id is None or (isinstance(reply.call_id, str) and reply.call_id != ""),
        f"call_id is {reply.call_id!r}; use None when the provider gave no id",
    )


@aio
async def test_failure_is_an_exception(polyloop_model_client_failing: ModelClient) -> None:
    """A client whose backend fails raises; it never returns an (empty) reply instead."""
    rule = Rule(SEAM, "failure is an exception, not an empty reply")
    try:
        reply = await polyloop_model_client_failing.call(sample_call())
    except Exception:
        return
    rule.fail(
        f"the failing client returned {reply!r} instead of raising; the loop records a returned "
        "reply as what the model said, so an outage would look like a model that said nothing"
    )


@aio
async def test_cancellation_passes_through(polyloop_model_client: ModelClient) -> None:
    """Cancelling a call in flight ends it with CancelledError."""
    await check_cancellation_passes_through(
        SEAM, "call(a short ModelCall)", polyloop_model_client.call(sample_call())
    )


def test_parameters_are_synchronous_and_str_valued(polyloop_model_client: ModelClient) -> None:
    """parameters() is a plain method returning a mapping of str to str."""
    check_parameters_shape(SEAM, polyloop_model_client)


def test_parameters_do_no_io_and_are_cheap(polyloop_model_client: ModelClient) -> None:
    """parameters() opens no file, socket or process, does not sleep, and returns at once."""
    check_parameters_no_io(SEAM, polyloop_model_client)


def test_parameters_are_stable_and_hold_no_secrets(polyloop_model_client: ModelClient) -> None:
    """parameters() answers the same twice and names no credential (no API key)."""
    check_parameters_stable_no_secrets(SEAM, polyloop_model_client)
