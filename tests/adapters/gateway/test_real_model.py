"""The gateway against a real model (issue 37; design 0066): Gemma 3 270M on llama-cpp-python's
OpenAI-compatible server, started by ``scripts/model-test-server.sh`` (``scripts/test.sh`` names
it in ``POLYLOOP_TEST_MODEL_URL``). Nothing here is scripted: the replies are the model's.

What a replay of captured replies cannot show: the server refusing a request the gateway
builds (the earlier call's ``"content": null``), a real stream cut by the call's deadline, and
a driver killed while the model is answering.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from polyloop.adapters.gateway import GatewayTimeoutError
from polyloop.adapters.mcp import McpBinding, McpToolBinder
from polyloop.adapters.tool_calls import ToolCallReplyParser
from polyloop.ports import ModelCall
from polyloop.recovery import validate_log
from polyloop.session import AgentDefinition, resume, run
from polyloop.stores.memory import MemoryRunStore
from polyloop.stores.sqlite import SqliteRunStore
from polyloop.testing import RecordingEventSink
from polyloop.types import ActionStatus, IntentKind, Message, Role, StopReason, TextBlock
from tests.adapters.gateway import _real_model_child
from tests.adapters.gateway._real_model import (
    ENDLESS,
    TEXTS,
    FirstCallForced,
    model_client,
    native_request,
)
from tests.adapters.mcp._real_servers import time_server

ROOT = Path(__file__).resolve().parents[3]

#: Kills the driving process (SIGKILL) in one test.
pytestmark = pytest.mark.crash


def _start_child(*arguments: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "tests.adapters.gateway._real_model_child", *arguments],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        text=True,
    )


def one_call(question: str, run_id: str = "real-model") -> ModelCall:
    return ModelCall(
        messages=(Message(Role.USER, (TextBlock(question),)),),
        call_index=0,
        run_id=run_id,
        result_id="model-0",
        binding={},
    )


async def test_a_governed_run_calls_a_real_mcp_tool_natively_and_finishes(
    model_server_url: str,
) -> None:
    """The model calls the reference time server's ``get_current_time`` as a native tool call
    (forced on its first call), the MCP server answers, and the model's next reply, with its
    call and the result in the history (``"content": ""``: a null one is refused with HTTP
    500), is the final answer."""
    client = FirstCallForced(model_server_url, "get_current_time")
    sink = RecordingEventSink()
    try:
        async with McpToolBinder([time_server()], startup_timeout=60) as binder:
            tools = await binder.bind_all(
                [McpBinding("time", ["get_current_time"], trust_annotations=True)]
            )
            result = await run(
                AgentDefinition(client, ToolCallReplyParser(), MemoryRunStore(), sink, TEXTS),
                native_request(
                    "real-mcp", tools.registry, "What time is it now in UTC? Use the tool."
                ),
            )
    finally:
        await client.aclose()
    assert StopReason.AGENT_FINISHED is result.stop_reason, result.steps
    called, answered = result.steps
    assert ("get_current_time", ActionStatus.EXECUTED) == (
        called.tool_name,
        called.action_status,
    )
    # The MCP server's answer: a JSON object naming the timezone and the current datetime.
    assert '"datetime"' in called.observation
    assert answered.tool_name is None
    # Both replies are the server's own completions.
    assert [True, True] == [
        step.call_id is not None and step.call_id.startswith("chatcmpl-") for step in result.steps
    ]


async def test_a_streamed_call_is_cut_by_its_deadline_and_the_server_serves_on(
    model_server_url: str,
) -> None:
    """A streamed call whose answer would take minutes (4096 tokens, end of turn suppressed)
    ends with ``GatewayTimeoutError(phase="deadline")``; closing the stream frees the server,
    which answers the next call."""
    async with model_client(
        model_server_url, stream=True, deadline=2.0, max_tokens=4096, extra_body=ENDLESS
    ) as endless:
        with pytest.raises(GatewayTimeoutError) as raised:
            await endless.call(one_call("Count from one to one thousand in words."))
    assert "deadline" == raised.value.phase
    assert "within its deadline of 2 s" in str(raised.value)
    async with model_client(
        model_server_url, stream=True, max_tokens=8, extra_body=ENDLESS
    ) as short:
        reply = await short.call(one_call("Say hello."))
    assert "length" == reply.finish_reason
    assert reply.content


async def test_a_driver_killed_during_a_model_call_is_resumed_and_finishes(
    model_server_url: str, tmp_path: Path
) -> None:
    """SIGKILL of the driving process while the model is answering leaves the call's intent
    without a result; ``resume`` makes the call again (replay policy ``safe``) and the run
    finishes with that reply."""
    database, run_id = tmp_path / "runs.sqlite", f"killed-{os.getpid()}-{time.time_ns()}"
    child = _start_child(model_server_url, str(database), run_id)
    try:
        assert child.stdout is not None
        line = await asyncio.to_thread(child.stdout.readline)
        assert "in-call 0" == line.strip()
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait(timeout=30)
        assert child.stdout is not None
        left = child.stdout.read()
        child.stdout.close()
    assert -signal.SIGKILL == child.returncode
    assert "finished" not in left

    async with SqliteRunStore(database) as store:
        crashed = await store.read_log(run_id)
        assert [IntentKind.MODEL_CALL] == [intent.kind for intent in crashed.intents]
        assert () == tuple(crashed.model_results)
        agent, client = _real_model_child.definition(model_server_url, store)
        async with client:
            result = await resume(agent, _real_model_child.request(run_id))
        log = await store.read_log(run_id)
    validate_log(log, run_id)
    assert StopReason.AGENT_FINISHED is result.stop_reason
    (step,) = result.steps
    (recorded,) = log.model_results
    assert recorded.failure is None
    assert recorded.reply is not None
    assert "length" == recorded.reply.finish_reason  # the whole long answer, not a cut one
    assert recorded.reply.call_id == step.call_id
    assert recorded.reply.content
    assert IntentKind.MODEL_CALL is log.steps[0].replayed_on_resume
