"""Replies as real servers shape them, replayed over loopback HTTP (issue 25, item 5): both
`function_call` and `tool_calls`, parallel calls, whole and streamed. Each fixture's `how` says
whether it was captured (`scripts/capture_gateway_replies.py`) or reconstructed."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from polyloop.adapters.gateway import GatewayModelClient
from polyloop.adapters.tool_calls import ToolCallReplyParser, parse_tool_calls
from polyloop.ports import ModelCall
from polyloop.session import AgentDefinition, RunRequest, run
from polyloop.stores.memory import MemoryRunStore
from polyloop.testing import NullEventSink
from polyloop.tools import Tool, ToolRegistry, ToolSpec
from polyloop.types import (
    ActionStatus,
    Budget,
    Context,
    Message,
    ReplayPolicy,
    Role,
    StopReason,
    TextBlock,
)
from tests.adapters.gateway._replay import ReplayGateway, fixture, fixture_names
from tests.adapters.gateway._server import serve_in_thread
from tests.adapters.gateway.test_gateway_replies import TEXTS

NAMES = fixture_names()


@pytest.fixture(scope="module")
def replay() -> Iterator[tuple[ReplayGateway, str]]:
    gateway = ReplayGateway()
    with serve_in_thread(gateway) as root:  # type: ignore[arg-type]
        yield gateway, root


def captured_calls(name: str) -> list[str]:
    """The names of the fixture's `tool_calls`, in order (the `function_call` copy aside)."""
    message = fixture(name)["whole"]["choices"][0]["message"]
    return [call["function"]["name"] for call in message["tool_calls"]]


def tools(written: list[dict[str, Any]]) -> ToolRegistry:
    return ToolRegistry(
        [
            Tool(
                ToolSpec("get_current_time", "The time.", {"type": "object"}),
                lambda _: "2026-12-02T14:00:00Z",
            ),
            Tool(
                ToolSpec("write_file", "Write a file.", {"type": "object"}),
                lambda arguments: written.append(dict(arguments)) or "written",
            ),
        ]
    )


def native_request(run_id: str, registry: ToolRegistry) -> RunRequest:
    return RunRequest(
        run_id=run_id,
        budget=Budget(
            max_steps=4, max_actions=4, max_consecutive_parse_failures=2, max_prompt_chars=50_000
        ),
        action_executor=registry.executor(),
        tools=registry,
        context=Context((), (Message(Role.USER, (TextBlock("Note the time, save it."),)),)),
        injections={},
        model_binding={},
        model_replay_policy=ReplayPolicy.SAFE,
        observation_template="{observation}",
        tool_section_template="",
        cancel_grace_seconds=1.0,
        native_tools=True,
    )


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "stream"])
@pytest.mark.parametrize("name", NAMES)
async def test_a_captured_reply_runs_one_call_and_names_the_others(
    replay: tuple[ReplayGateway, str], name: str, stream: bool
) -> None:
    """The first of the reply's `tool_calls` runs, the others are recorded as not executed and
    named in the next request's tool message; the legacy copy adds nothing."""
    gateway, root = replay
    written: list[dict[str, Any]] = []
    registry = tools(written)
    expected = captured_calls(name)
    async with GatewayModelClient(
        f"{root}/replay/{name}/v1", "m", native_tools=True, stream=stream
    ) as client:
        result = await run(
            AgentDefinition(
                client, ToolCallReplyParser(), MemoryRunStore(), NullEventSink(), TEXTS
            ),
            native_request(f"{name}-{stream}", registry),
        )
    assert StopReason.AGENT_FINISHED is result.stop_reason
    first = result.steps[0]
    assert (expected[0], ActionStatus.EXECUTED) == (first.tool_name, first.action_status)
    assert expected[1:] == [call.tool_name for call in first.calls_not_executed]
    assert [] == written or expected[0] == "write_file"
    bodies = gateway.bodies(name)[-2:]
    assert [False, False] == [body["parallel_tool_calls"] for body in bodies]
    tool_message = bodies[1]["messages"][-1]
    assert "tool" == tool_message["role"]
    for missing in expected[1:]:
        assert f"- {missing} " in tool_message["content"]


@pytest.mark.parametrize("name", NAMES)
async def test_whole_and_streamed_captures_read_to_the_same_calls(
    replay: tuple[ReplayGateway, str], name: str
) -> None:
    """The same answer, whole or streamed, reads to the same calls (never the legacy copy as
    an extra or a concatenated call)."""
    _, root = replay
    call = ModelCall((Message(Role.USER, (TextBlock("go"),)),), 0, "r", "r/model/0", {})
    read = []
    for stream in (False, True):
        async with GatewayModelClient(f"{root}/replay/{name}/v1", "m", stream=stream) as client:
            read.append(await client.call(call))
    whole, streamed = (parse_tool_calls(reply.content).calls for reply in read)
    assert whole == streamed
    assert captured_calls(name) == [found.name for found in whole]
    assert read[0].finish_reason == read[1].finish_reason


def test_every_fixture_says_where_it_comes_from() -> None:
    """A fixture names its server and whether it was captured or reconstructed by hand."""
    assert NAMES
    for name in NAMES:
        captured = fixture(name)
        assert captured["source"]
        assert captured["how"].startswith(("captured by scripts/", "reconstructed by hand"))
