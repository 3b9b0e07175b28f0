"""Steps of real models' tool calls through every store: the calls a step did not execute are
stored, read back after a reopen, and a resumed run rebuilds from them the history the first
invocation had (issue 25; design 0045)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from polyloop.adapters.tool_calls import ReplyToolCall, ToolCallReplyParser, render_tool_calls
from polyloop.ports import ModelCall
from polyloop.serialization import dumps_log_record, loads_log_record
from polyloop.session import resume, run
from polyloop.testing import reply
from polyloop.types import CallNotExecuted, ModelReply, Role, StopReason
from tests.loop_kit import Crash, Effects, make_definition, make_request, scenario_tools
from tests.stores._helpers import Opened

PARALLEL = render_tool_calls(
    "Two at once.", [ReplyToolCall("read", {}), ReplyToolCall("write", {"path": "é.txt"})]
)


async def test_calls_not_executed_round_trip_and_resume_on_every_store(opened: Opened) -> None:
    """Written by a run that then dies, read back by a reopened store, and resumed: the record
    keeps the calls not executed and the resumed prompt is the one the first run would send."""
    seen: list[ModelCall] = []

    def crash(call: ModelCall) -> ModelReply:
        seen.append(call)
        raise Crash

    def done(call: ModelCall) -> ModelReply:
        seen.append(call)
        return reply("Done.")

    request = make_request("tools-" + opened.kind, tools=scenario_tools(Effects()))
    first = make_definition([reply(PARALLEL), crash], opened.store, parser=ToolCallReplyParser())
    with pytest.raises(Crash):
        await run(first, request)
    store = opened.reopen()
    log = await store.read_log(request.run_id)
    (completed,) = log.steps
    assert (CallNotExecuted("write", '{"path":"é.txt"}'),) == completed.step.calls_not_executed
    again = make_definition([reply(PARALLEL), done], store, parser=ToolCallReplyParser())
    result = await resume(again, request)
    assert StopReason.AGENT_FINISHED is result.stop_reason
    assert seen[0].messages == seen[1].messages
    assert (await store.read_log(request.run_id)).steps[0] == completed


async def test_native_history_round_trips_and_resumes_on_every_store(opened: Opened) -> None:
    """A native-tools run dies after its tool step; resumed from the reopened store, it sends
    the same native history (assistant call and `TOOL` result, one id) as the first run."""
    seen: list[ModelCall] = []

    def crash(call: ModelCall) -> ModelReply:
        seen.append(call)
        raise Crash

    def done(call: ModelCall) -> ModelReply:
        seen.append(call)
        return reply("Done.")

    request = replace(
        make_request("native-" + opened.kind, tools=scenario_tools(Effects())),
        tool_section_template="",
        native_tools=True,
    )
    one = render_tool_calls("", [ReplyToolCall("read", {})])
    first = make_definition([reply(one), crash], opened.store, parser=ToolCallReplyParser())
    with pytest.raises(Crash):
        await run(first, request)
    store = opened.reopen()
    again = make_definition([reply(one), done], store, parser=ToolCallReplyParser())
    result = await resume(again, request)
    assert StopReason.AGENT_FINISHED is result.stop_reason
    assert seen[0].messages == seen[1].messages
    assert [(Role.ASSISTANT, "call00000"), (Role.TOOL, "call00000")] == [
        (message.role, message.tool_call_id) for message in seen[1].messages[-2:]
    ]


def test_a_log_written_before_the_additions_reencodes_byte_for_byte() -> None:
    """Every record of a log an older library wrote (``fixtures/before-0040``) reads and is
    written again exactly as it was: no `calls_not_executed` appears, so its snapshot and the
    file itself are unchanged."""
    (path,) = (Path(__file__).parent / "fixtures" / "before-0040" / "runs").glob("*.jsonl")
    lines = path.read_text(encoding="utf-8").splitlines()
    assert lines
    assert lines == [dumps_log_record(loads_log_record(line)) for line in lines]
