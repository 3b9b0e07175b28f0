"""Tool calls as text: the one form in which a reply's native tool calls reach the run.

A chat-completions reply may carry ``tool_calls`` beside (or instead of) its text. The seed's
:class:`~polyloop.types.ModelReply` has no field for them, so :mod:`polyloop.adapters.gateway`
writes them into ``ModelReply.content`` after the text, one block per call::

    <text, if any>
    <tool_call>
    {"name": "read_file", "arguments": {"path": "notes.txt"}}
    </tool_call>

The canonical form, exactly: the text; then for each call, a ``"\\n"`` if anything precedes it,
``<tool_call>\\n``, the JSON object ``{"name": ..., "arguments": ...}`` (``json.dumps`` with
``ensure_ascii=False`` and default separators, keys in that order, the arguments' own keys in
the order the model sent them, ``</tool_call>`` inside a string written ``<\\/tool_call>``),
and ``\\n</tool_call>``. Arguments that were not a JSON object (a model can send broken JSON)
are kept as the JSON string of their raw text, never dropped. It is the format Hermes- and Qwen-style models write themselves, so the same parser also reads
tool calls that such a model wrote as plain text.

:func:`parse_tool_calls` reads the form back (the round trip is exact whenever the text holds
no ``<tool_call>`` tag of its own), and :class:`ToolCallReplyParser` is a
:class:`~polyloop.ports.DecisionParser` that turns the first call into
``Action(tool_call=...)``. ``StepRecord.content_chars`` counts ``content`` as the run sees it:
the text and the rendered calls.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Final

from polyloop.ports import Action, FinalAnswer, InvalidDecision, ParsedReply, ToolCall
from polyloop.tools import canonical_arguments
from polyloop.types import CallNotExecuted, ModelReply

__all__ = [
    "TOOL_CALL_CLOSE",
    "TOOL_CALL_OPEN",
    "ReplyToolCall",
    "ToolCallReplyParser",
    "ToolCallsInText",
    "parse_tool_calls",
    "render_tool_call",
    "render_tool_calls",
]

#: Opens one tool-call block.
TOOL_CALL_OPEN: Final = "<tool_call>"
#: Closes one tool-call block.
TOOL_CALL_CLOSE: Final = "</tool_call>"
_ESCAPED_CLOSE: Final = "<\\/tool_call>"


@dataclass(frozen=True, slots=True)
class ReplyToolCall:
    """One tool call as the model made it.

    ``arguments`` is the JSON object the model sent, or, when what it sent was not a JSON
    object, that raw text unchanged (so a broken call is shown back to the model, not lost).
    """

    name: str
    arguments: Mapping[str, object] | str


@dataclass(frozen=True, slots=True)
class ToolCallsInText:
    """What :func:`parse_tool_calls` found: the text before the first block, the calls in order,
    and ``problem`` (``None``, or what is wrong with the first block that is not well formed;
    the calls before it are still listed)."""

    content: str
    calls: tuple[ReplyToolCall, ...]
    problem: str | None = None


def render_tool_call(call: ReplyToolCall) -> str:
    """The JSON line of one call: ``{"name": ..., "arguments": ...}``."""
    arguments = call.arguments if isinstance(call.arguments, str) else dict(call.arguments)
    line = json.dumps({"name": call.name, "arguments": arguments}, ensure_ascii=False)
    # The closing tag can only occur inside a JSON string here; "\/" is JSON for "/".
    return line.replace(TOOL_CALL_CLOSE, _ESCAPED_CLOSE)


def render_tool_calls(content: str, calls: Sequence[ReplyToolCall]) -> str:
    """``content`` followed by one canonical block per call (``content`` alone when none)."""
    parts = [content] if content else []
    parts += [f"{TOOL_CALL_OPEN}\n{render_tool_call(call)}\n{TOOL_CALL_CLOSE}" for call in calls]
    return "\n".join(parts)


def _read_block(inner: str) -> ReplyToolCall | str:
    try:
        payload = json.loads(inner)
    except (ValueError, RecursionError) as error:
        return f"its content is not JSON ({error})"
    if not isinstance(payload, dict):
        return f"its content is a JSON {type(payload).__name__}, not an object"
    name = payload.get("name")
    if not isinstance(name, str) or not name:
        return 'it has no "name" string'
    arguments = payload.get("arguments", {})
    if not isinstance(arguments, dict | str):
        return f'its "arguments" is a JSON {type(arguments).__name__}, not an object'
    return ReplyToolCall(name, arguments)


def parse_tool_calls(text: str) -> ToolCallsInText:
    """Find every ``<tool_call>`` block in ``text``. Never raises."""
    start = text.find(TOOL_CALL_OPEN)
    if start < 0:
        return ToolCallsInText(text, ())
    content = text[:start]
    if content.endswith("\n"):
        content = content[:-1]  # the separator the canonical form puts before a block
    calls: list[ReplyToolCall] = []
    while start >= 0:
        body = start + len(TOOL_CALL_OPEN)
        end = text.find(TOOL_CALL_CLOSE, body)
        if end < 0:
            return ToolCallsInText(
                content, tuple(calls), f"tool call {len(calls) + 1} has no {TOOL_CALL_CLOSE}"
            )
        found = _read_block(text[body:end].strip())
        if isinstance(found, str):
            return ToolCallsInText(
                content, tuple(calls), f"tool call {len(calls) + 1} is not well formed: {found}"
            )
        calls.append(found)
        start = text.find(TOOL_CALL_OPEN, end + len(TOOL_CALL_CLOSE))
    return ToolCallsInText(content, tuple(calls))


def _object_arguments(arguments: Mapping[str, object] | str) -> Mapping[str, object] | None:
    if not isinstance(arguments, str):
        return arguments
    try:
        # Some models encode the arguments object twice, as a JSON string.
        decoded = json.loads(arguments)
    except (ValueError, RecursionError):
        return None
    return decoded if isinstance(decoded, dict) else None


def _not_executed(call: ReplyToolCall) -> CallNotExecuted:
    arguments = _object_arguments(call.arguments)
    text = canonical_arguments(arguments) if arguments is not None else str(call.arguments)
    return CallNotExecuted(call.name, text)


class ToolCallReplyParser:
    """A :class:`~polyloop.ports.DecisionParser` for replies holding tool-call blocks.

    - The first well-formed call becomes ``Action(text=<its JSON line>, tool_call=...)``. One
      action runs per step, so ``history_text`` is the text and that one call in canonical form;
      the later calls of the same reply are not executed: they go into
      ``ParsedReply.calls_not_executed``, so the step records them and the model is told which
      they were (design 0045; the whole reply stays in the run log's ``ModelCallResult``).
    - A block that is not well formed, or arguments that are not a JSON object, become an
      :class:`~polyloop.ports.InvalidDecision` that says what to write instead.
    - A reply without any block is a :class:`~polyloop.ports.FinalAnswer` (its stripped text),
      or, with ``plain_text_is_final_answer=False``, an ``InvalidDecision`` asking for a call.

    Never raises.
    """

    def __init__(self, *, plain_text_is_final_answer: bool = True) -> None:
        self._plain_text_is_final_answer = plain_text_is_final_answer

    def parse(self, reply: ModelReply) -> ParsedReply:
        found = parse_tool_calls(reply.content)
        example = render_tool_calls("", [ReplyToolCall("tool_name", {"argument": "value"})])
        if not found.calls:
            if found.problem is not None:
                return ParsedReply(
                    reply.content,
                    InvalidDecision(f"Your {found.problem}. Write a tool call as:\n{example}"),
                )
            if self._plain_text_is_final_answer:
                return ParsedReply(reply.content, FinalAnswer(found.content.strip()))
            return ParsedReply(
                reply.content,
                InvalidDecision(f"Call one of the tools; write the call as:\n{example}"),
            )
        first = found.calls[0]
        history = render_tool_calls(found.content, [first])
        rest = tuple(_not_executed(call) for call in found.calls[1:])
        arguments = _object_arguments(first.arguments)
        if arguments is None:
            return ParsedReply(
                history,
                InvalidDecision(
                    f"The arguments of your call of {first.name!r} are not a JSON object: "
                    f"{str(first.arguments)[:200]!r}. Send them as one JSON object."
                ),
                rest,
            )
        call = ReplyToolCall(first.name, arguments)
        return ParsedReply(
            history,
            Action(text=render_tool_call(call), tool_call=ToolCall(first.name, arguments)),
            rest,
        )

    def parameters(self) -> Mapping[str, str]:
        return {
            "kind": "tool_call_text",
            "version": "1",
            "plain_text": "final_answer" if self._plain_text_is_final_answer else "invalid",
        }
