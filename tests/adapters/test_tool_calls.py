"""The canonical text form of tool calls (``polyloop.adapters.tool_calls``): an exact round
trip, and a decision parser that turns the first call into an action and never raises."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from polyloop.adapters.tool_calls import (
    TOOL_CALL_OPEN,
    ReplyToolCall,
    ToolCallReplyParser,
    ToolCallsInText,
    parse_tool_calls,
    render_tool_calls,
)
from polyloop.ports import Action, FinalAnswer, InvalidDecision, ToolCall
from polyloop.types import ModelReply

#: Text that also holds the tags, quotes, backslashes and newlines the form must survive.
_pieces = st.sampled_from(
    ["</tool_call>", "<tool_call", "\n", '"', "\\", "{", "}", "\\/", "ü", "\u2028", " "]
)
texts = st.lists(_pieces | st.text(max_size=8), max_size=6).map("".join)
json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | texts,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(texts, inner, max_size=3),
    max_leaves=8,
)
calls = st.builds(
    ReplyToolCall,
    name=texts.filter(bool),
    arguments=st.dictionaries(texts, json_values, max_size=4) | texts,
)
contents = texts.filter(lambda text: TOOL_CALL_OPEN not in text)


@settings(max_examples=300, deadline=None)
@given(content=contents, tool_calls=st.lists(calls, max_size=3))
def test_parse_reads_back_exactly_what_render_wrote(
    content: str, tool_calls: list[ReplyToolCall]
) -> None:
    """For any text without a `<tool_call>` tag and any calls, parsing the rendered form gives
    back that text and those calls, in order."""
    rendered = render_tool_calls(content, tool_calls)
    assert ToolCallsInText(content, tuple(tool_calls)) == parse_tool_calls(rendered)


def test_the_canonical_form_is_the_documented_one() -> None:
    """Text, a newline, then one `<tool_call>` block per call with `name` before `arguments`."""
    rendered = render_tool_calls(
        "Let me look.",
        [ReplyToolCall("read_file", {"path": "a.txt"}), ReplyToolCall("ls", "{broken")],
    )
    expected = (
        "Let me look.\n"
        "<tool_call>\n"
        '{"name": "read_file", "arguments": {"path": "a.txt"}}\n'
        "</tool_call>\n"
        "<tool_call>\n"
        '{"name": "ls", "arguments": "{broken"}\n'
        "</tool_call>"
    )
    assert expected == rendered
    assert '<tool_call>\n{"name": "x", "arguments": {}}\n</tool_call>' == render_tool_calls(
        "", [ReplyToolCall("x", {})]
    )


def _parse(content: str, **options: Any) -> tuple[str, object]:
    parsed = ToolCallReplyParser(**options).parse(ModelReply(None, content, ""))
    return parsed.history_text, parsed.decision


def test_the_first_call_becomes_the_action_and_only_it_stays_in_history() -> None:
    """The first call is the action; later calls of the reply are dropped from `history_text`."""
    content = render_tool_calls(
        "Two things.", [ReplyToolCall("a", {"x": 1}), ReplyToolCall("b", {})]
    )
    history, decision = _parse(content)
    line = '{"name": "a", "arguments": {"x": 1}}'
    assert Action(text=line, tool_call=ToolCall("a", {"x": 1})) == decision
    assert f"Two things.\n<tool_call>\n{line}\n</tool_call>" == history


def test_a_hermes_style_call_written_as_plain_text_is_read_too() -> None:
    """A model that writes the block itself (compact JSON, other spacing) is understood."""
    content = 'Sure.\n<tool_call>{"arguments":{"q":"x"},"name":"search"}</tool_call>\n'
    _, decision = _parse(content)
    assert Action(
        '{"name": "search", "arguments": {"q": "x"}}', ToolCall("search", {"q": "x"})
    ) == (decision)


def test_arguments_encoded_twice_as_a_json_string_are_decoded() -> None:
    """`"arguments": "{\\"q\\": 1}"` is read as the object it encodes."""
    content = render_tool_calls("", [ReplyToolCall("f", json.dumps({"q": 1}))])
    _, decision = _parse(content)
    assert isinstance(decision, Action)
    assert ToolCall("f", {"q": 1}) == decision.tool_call


@pytest.mark.parametrize(
    ("content", "detail"),
    [
        (render_tool_calls("", [ReplyToolCall("f", "{not json")]), "are not a JSON object"),
        ("<tool_call>\n{oops}\n</tool_call>", "is not well formed: its content is not JSON"),
        ('<tool_call>\n{"name": "f"', "has no </tool_call>"),
        ('<tool_call>\n{"arguments": {}}\n</tool_call>', 'no "name" string'),
        ('<tool_call>\n{"name": "f", "arguments": 3}\n</tool_call>', "not an object"),
        ("<tool_call>\n[1]\n</tool_call>", "JSON list, not an object"),
    ],
)
def test_a_malformed_call_is_an_invalid_decision_saying_what_is_wrong(
    content: str, detail: str
) -> None:
    """Broken JSON, a missing close tag or name, non-object arguments: an explanation, no raise."""
    _, decision = _parse(content)
    assert isinstance(decision, InvalidDecision)
    assert detail in decision.explanation


def test_plain_text_is_a_final_answer_unless_a_call_is_required() -> None:
    """Without a block the stripped text is the final answer, or an invalid decision if asked."""
    assert ("  done  ", FinalAnswer("done")) == _parse("  done  ")
    _, decision = _parse("done", plain_text_is_final_answer=False)
    assert isinstance(decision, InvalidDecision)
    assert "<tool_call>" in decision.explanation


@settings(max_examples=200, deadline=None)
@given(content=st.text() | texts.map(lambda t: "<tool_call>" + t))
def test_the_parser_never_raises(content: str) -> None:
    """Any reply text gives a `ParsedReply`, whatever it holds."""
    parsed = ToolCallReplyParser().parse(ModelReply(None, content, ""))
    assert isinstance(parsed.decision, Action | FinalAnswer | InvalidDecision)


def test_parameters_say_how_plain_text_is_read() -> None:
    """The parser's parameters name its form and its plain-text rule."""
    assert {"kind": "tool_call_text", "version": "1", "plain_text": "invalid"} == dict(
        ToolCallReplyParser(plain_text_is_final_answer=False).parameters()
    )
