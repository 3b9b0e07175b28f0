"""A reply carrying several tool calls: the first is executed, the others are never silently
dropped — they are in the step's record, the next prompt, an event, a log line and ``show``
(issue 25, item 2; design 0045)."""

from __future__ import annotations

import logging
from dataclasses import replace

import pytest
from hypothesis import given
from hypothesis import strategies as st

from polyloop.adapters.tool_calls import (
    ReplyToolCall,
    ToolCallReplyParser,
    parse_tool_calls,
    render_tool_calls,
)
from polyloop.ports import EventKind, ModelCall
from polyloop.serialization import to_dict
from polyloop.session import resume, run
from polyloop.session._calls_not_executed import calls_not_executed_notice
from polyloop.stores.memory import MemoryRunStore
from polyloop.testing import RecordingEventSink, ScriptedModelClient, reply
from polyloop.tools import Tool, ToolRegistry, ToolSpec, canonical_arguments
from polyloop.types import (
    ActionStatus,
    CallNotExecuted,
    ModelReply,
    ReplayPolicy,
    Role,
    StepRecord,
    StopReason,
)
from polyloop_cli.rendering.inspection import step_row
from tests.loop_kit import Crash, Effects, make_definition, make_request, scenario_tools

PARALLEL = render_tool_calls(
    "I will note the time and save it.",
    [
        ReplyToolCall("read", {}),
        ReplyToolCall("write", {"path": "t.txt"}),
        ReplyToolCall("noop", "{broken"),
    ],
)
NOT_EXECUTED = (CallNotExecuted("write", '{"path":"t.txt"}'), CallNotExecuted("noop", "{broken"))


def script() -> list[object]:
    return [reply(PARALLEL, call_id="c0"), reply("Done.", call_id="c1")]


async def test_the_first_call_runs_and_the_others_are_recorded_not_executed() -> None:
    """Of a reply's three calls only the first is executed; the record lists the other two in
    the model's order, with canonical (or, when broken, raw) arguments."""
    effects = Effects()
    sink = RecordingEventSink()
    definition = make_definition(script(), sink=sink, parser=ToolCallReplyParser())
    result = await run(definition, make_request("p", tools=scenario_tools(effects)))
    first, _ = result.steps
    assert {"read": 1} == dict(effects.counts)
    assert ("read", ActionStatus.EXECUTED, NOT_EXECUTED) == (
        first.tool_name,
        first.action_status,
        first.calls_not_executed,
    )
    assert StopReason.AGENT_FINISHED is result.stop_reason


async def test_the_next_prompt_names_the_calls_not_executed() -> None:
    """The model's next prompt carries, after the observation, which calls were not executed
    and that calls must be requested one at a time."""
    client = ScriptedModelClient(script(), by_call_index=True)
    definition = replace(make_definition([], parser=ToolCallReplyParser()), model_client=client)
    await run(definition, make_request("p", tools=scenario_tools(Effects())))
    assistant, observation = client.calls[1].messages[-2:]
    assert Role.ASSISTANT is assistant.role
    assert "write" not in assistant.content[0].text  # history shows only the executed call
    expected = "Observation: read done\n\n" + calls_not_executed_notice(NOT_EXECUTED)
    assert (Role.USER, expected) == (observation.role, observation.content[0].text)
    assert '- write {"path":"t.txt"}\n- noop {broken\n' in expected
    assert "one at a time" in expected


async def test_an_event_and_a_log_line_name_them(caplog: pytest.LogCaptureFixture) -> None:
    """`CALLS_NOT_EXECUTED` comes just before the step's `STEP_COMPLETED`, carrying the
    record; a warning names the calls."""
    sink = RecordingEventSink()
    definition = make_definition(script(), sink=sink, parser=ToolCallReplyParser())
    with caplog.at_level(logging.WARNING, logger="polyloop"):
        await run(definition, make_request("p", tools=scenario_tools(Effects())))
    kinds = [(event.kind, event.step_idx) for event in sink.events]
    at = kinds.index((EventKind.CALLS_NOT_EXECUTED, 0))
    assert (EventKind.STEP_COMPLETED, 0) == kinds[at + 1]
    event = sink.events[at]
    assert event.step is not None
    assert NOT_EXECUTED == event.step.calls_not_executed
    assert 1 == sum(kind is EventKind.CALLS_NOT_EXECUTED for kind, _ in kinds)
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert 1 == len(warnings)
    assert "run 'p' step 0" in warnings[0]
    assert "not executed: write, noop" in warnings[0]


async def test_a_reply_with_one_call_is_recorded_as_before() -> None:
    """With one call there is nothing to name: no field in the encoding, no event, no notice."""
    sink = RecordingEventSink()
    one = render_tool_calls("", [ReplyToolCall("read", {})])
    definition = make_definition(
        [reply(one), reply("Done.")], sink=sink, parser=ToolCallReplyParser()
    )
    result = await run(definition, make_request("one", tools=scenario_tools(Effects())))
    assert "calls_not_executed" not in to_dict(result.steps[0])
    assert EventKind.CALLS_NOT_EXECUTED not in [event.kind for event in sink.events]
    assert "read done" == result.steps[0].observation


async def test_a_rejected_first_call_still_names_the_others() -> None:
    """When the first call names an unknown tool, nothing runs; the record still lists the
    calls after it, so the model is not left to believe they ran."""
    calls = [ReplyToolCall("delete_everything", {}), ReplyToolCall("write", {"path": "x"})]
    definition = make_definition(
        [reply(render_tool_calls("", calls)), reply("Done.")], parser=ToolCallReplyParser()
    )
    effects = Effects()
    result = await run(definition, make_request("rej", tools=scenario_tools(effects)))
    first = result.steps[0]
    assert (ActionStatus.NOT_EXECUTED, (CallNotExecuted("write", '{"path":"x"}'),)) == (
        first.action_status,
        first.calls_not_executed,
    )
    assert {} == dict(effects.counts)


async def test_a_resumed_run_rebuilds_the_same_history() -> None:
    """A run interrupted after the step resumes with exactly the prompt the first invocation
    would have sent: the notice is rebuilt from the record alone."""
    store = MemoryRunStore()
    seen: list[ModelCall] = []

    def crash(call: ModelCall) -> ModelReply:
        seen.append(call)
        raise Crash

    def done(call: ModelCall) -> ModelReply:
        seen.append(call)
        return reply("Done.")

    request = make_request("res", tools=scenario_tools(Effects()))
    first = make_definition([reply(PARALLEL), crash], store, parser=ToolCallReplyParser())
    with pytest.raises(Crash):
        await run(first, request)
    again = make_definition([reply(PARALLEL), done], store, parser=ToolCallReplyParser())
    result = await resume(again, request)
    assert StopReason.AGENT_FINISHED is result.stop_reason
    assert seen[0].messages == seen[1].messages
    assert NOT_EXECUTED == result.steps[0].calls_not_executed


def test_show_marks_the_step() -> None:
    """`polyloop show` marks the step in its status and action columns, and its JSON row lists
    the names; a step without such calls shows as before."""
    step = StepRecord(
        0, PARALLEL, len(PARALLEL), 0, '{"name": "read", "arguments": {}}', True, None,
        "read done", False, 0, 10, None, 1, "read", "{}", ActionStatus.EXECUTED,
        calls_not_executed=NOT_EXECUTED,
    )  # fmt: skip
    row = step_row(step)
    assert "executed +2 not executed" == row["status"]
    assert row["action"].endswith("[not executed: write, noop]")
    assert ["write", "noop"] == row["calls_not_executed"]
    plain = step_row(replace(step, calls_not_executed=()))
    assert ("executed", "read {}") == (plain["status"], plain["action"])
    assert "calls_not_executed" not in plain


names = st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), min_size=1, max_size=10)
arguments = st.dictionaries(st.text(max_size=5), st.integers() | st.text(max_size=5), max_size=3)


@given(
    st.text(st.characters(exclude_characters="<"), max_size=30),
    st.lists(st.tuples(names, arguments), min_size=1, max_size=5),
)
def test_the_parser_names_every_call_after_the_first_in_order(
    text: str, calls: list[tuple[str, dict[str, object]]]
) -> None:
    """For N rendered calls the parser's decision is about the first and `calls_not_executed`
    holds the other N−1, in order, with canonical arguments; history shows only the first."""
    rendered = render_tool_calls(
        text.replace("<tool_call>", ""), [ReplyToolCall(*c) for c in calls]
    )
    parsed = ToolCallReplyParser().parse(reply(rendered))
    assert [CallNotExecuted(n, canonical_arguments(a)) for n, a in calls[1:]] == list(
        parsed.calls_not_executed
    )
    assert 1 == len(parse_tool_calls(parsed.history_text).calls)


async def test_an_action_interrupted_by_a_crash_resumes_with_the_calls_recorded() -> None:
    """A crash after the first call's intent, before its step is recorded: resume executes the
    (safe) call again and records the calls not executed, as an uninterrupted run would."""
    store = MemoryRunStore()
    crashes = [Crash()]

    def read(_: object) -> str:
        if crashes:
            raise crashes.pop()
        return "read done"

    registry = ToolRegistry(
        [
            Tool(
                ToolSpec("read", "Read.", {"type": "object"}, replay_policy=ReplayPolicy.SAFE), read
            ),
            Tool(ToolSpec("write", "Write.", {"type": "object"}), lambda _: "written"),
            Tool(ToolSpec("noop", "Nothing.", {"type": "object"}), lambda _: "ok"),
        ]
    )
    request = make_request("crash-in-action", tools=registry)
    with pytest.raises(Crash):
        await run(make_definition(script(), store, parser=ToolCallReplyParser()), request)
    result = await resume(make_definition(script(), store, parser=ToolCallReplyParser()), request)
    first = result.steps[0]
    assert ("read done", NOT_EXECUTED) == (first.observation, first.calls_not_executed)
    assert StopReason.AGENT_FINISHED is result.stop_reason
