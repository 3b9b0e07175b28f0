"""Native tool history and prompts without duplicate schema text (issue 25, items 3 and 4;
design 0046): a native-tools run sends the assistant's call and a `TOOL` result with the same
id, may leave the schema text out, and every other run is built exactly as before."""

from __future__ import annotations

from dataclasses import replace

import pytest

from polyloop.errors import ConfigurationError
from polyloop.session import run
from polyloop.session._loop import run_snapshot
from polyloop.session._prompt import tool_call_id
from polyloop.testing import ScriptedModelClient, reply
from polyloop.types import Message, Role, TextBlock
from tests.loop_kit import Effects, make_definition, make_request, scenario_tools

CALL = "CALL read {}"


async def prompts_of(native: bool, template: str = "Tools: {tools}") -> list[tuple[Message, ...]]:
    """The messages of each model call of a run: a tool call, a code action, an unreadable
    reply, then a final answer."""
    client = ScriptedModelClient(
        [reply(CALL), reply("RUN: print(1)"), reply("hmm"), reply("FINAL: done")]
    )
    definition = replace(make_definition([]), model_client=client)
    request = replace(
        make_request("native" if native else "text", tools=scenario_tools(Effects())),
        tool_section_template=template,
        native_tools=native,
    )
    await run(definition, request)
    return [call.messages for call in client.calls]


async def test_a_tool_step_goes_back_as_a_call_and_a_tool_result_with_one_id() -> None:
    """The step that called a tool is an assistant message carrying the step's id and a `TOOL`
    message answering it; the steps that called no tool stay assistant/`USER` pairs."""
    last = (await prompts_of(native=True))[-1]
    history = last[-6:]
    assert [
        (Role.ASSISTANT, tool_call_id(0)),
        (Role.TOOL, tool_call_id(0)),
        (Role.ASSISTANT, None),
        (Role.USER, None),
        (Role.ASSISTANT, None),
        (Role.USER, None),
    ] == [(message.role, message.tool_call_id) for message in history]
    assert (CALL, "Observation: read done") == (
        history[0].content[0].text,
        history[1].content[0].text,
    )


async def test_without_native_tools_the_prompt_is_built_exactly_as_before() -> None:
    """A run that does not declare native tools sends the same texts, roles and no ids."""
    native, text = await prompts_of(native=True), await prompts_of(native=False)
    assert all(m.tool_call_id is None and m.role is not Role.TOOL for m in text[-1])
    assert [[m.content for m in call] for call in native] == [
        [m.content for m in call] for call in text
    ]


async def test_a_native_run_may_leave_the_schema_out_of_the_prompt() -> None:
    """With native tools an empty template adds no message and one without `{tools}` is sent
    as written; a template asking for `{tools}` still gets the schema."""
    empty, plain, asked = [
        (await prompts_of(native=True, template=template))[0]
        for template in ("", "Use the tools you are given.", "Tools: {tools}")
    ]
    system = [
        [m.content[0].text for m in call if m.role is Role.SYSTEM] for call in (empty, plain, asked)
    ]
    assert ["You are a careful agent."] == system[0]
    assert ["You are a careful agent.", "Use the tools you are given."] == system[1]
    assert '"name": "read"' in system[2][1]


def test_the_tool_section_template_needs_its_token_unless_tools_go_natively() -> None:
    """Without native tools a template lacking `{tools}` is refused, saying what to pass."""
    with pytest.raises(ConfigurationError, match="native_tools=True"):
        replace(make_request("r", tools=scenario_tools(Effects())), tool_section_template="")
    request = replace(
        make_request("r", tools=scenario_tools(Effects())),
        tool_section_template="",
        native_tools=True,
    )
    assert request.native_tools is True
    with pytest.raises(ConfigurationError, match="native_tools must be True or False"):
        replace(request, native_tools="yes")


def test_the_snapshot_records_native_tools_only_when_set_and_keeps_the_digests() -> None:
    """Old snapshots stay valid (no new key by default); a native run still records what the
    model was offered: the tools' schema and description digests."""
    request = make_request("r", tools=scenario_tools(Effects()))
    definition = make_definition([])
    before = run_snapshot(definition, request)
    native = run_snapshot(definition, replace(request, native_tools=True, tool_section_template=""))
    assert "request.native_tools" not in before
    assert {"request.native_tools": "true", "request.tool_section_template": ""} == {
        key: value for key, value in native.items() if before.get(key) != value
    }
    assert before["request.tools.read.schema_sha256"] == native["request.tools.read.schema_sha256"]


@pytest.mark.parametrize(
    ("role", "call_id", "match"),
    [
        (Role.TOOL, None, "must be a non-empty string"),
        (Role.ASSISTANT, "", "must be a non-empty string or None"),
        (Role.USER, "call00000", "only an assistant's tool call and a tool's result"),
        (Role.SYSTEM, "call00000", "only an assistant's tool call and a tool's result"),
    ],
)
def test_a_message_refuses_an_impossible_tool_call_id(
    role: Role, call_id: str | None, match: str
) -> None:
    """A tool result names its call; only assistant and tool messages carry an id."""
    with pytest.raises(ConfigurationError, match=match):
        Message(role, (TextBlock("x"),), call_id)


def test_the_ids_are_derived_from_the_step() -> None:
    """Nine letters and digits (the strictest servers' form), distinct per step."""
    assert ["call00000", "call00007", "call99999"] == [tool_call_id(k) for k in (0, 7, 99999)]
