"""Reading a chat completion, whole or streamed, into one :class:`~polyloop.types.ModelReply`.

Both forms go through one :class:`ReplyDraft`: a whole response adds its ``choices[0].message``
once, a stream adds each chunk's ``choices[0].delta``. The same answer therefore gives the same
reply either way. The rules (also in the package docstring):

- ``content``: a string as is; a list of parts has its ``text`` (and ``refusal``) parts joined
  without separator, and any other part written as ``[<type> part not shown]``; ``null`` is
  ``""``. When there is no text but a ``refusal``, the refusal is the content. Native tool
  calls follow in the canonical text form of :mod:`polyloop.adapters.tool_calls`: the
  ``tool_calls`` list, or, only when the reply carries no ``tool_calls`` entry at all, the
  older single ``function_call``. A server that sends both (llama-cpp-python 0.3.x, some
  proxies) sends the same call twice, and its ``function_call`` copy may be malformed: the
  ``tool_calls`` list wins and the copy is dropped, so one call is never read as two. A
  streamed call's name is read once: a delta repeating the name read so far (llama-cpp-python
  repeats it in every delta) adds nothing.
- ``thinking``: ``reasoning_content``, else ``reasoning``.
- ``call_id``: the response ``id`` (``None`` when missing or empty).
- ``model``: the response ``model``, the model that answered (``None`` when missing or empty).
- ``finish_reason``: ``choices[0].finish_reason`` (``None`` when missing or empty).
- ``usage``: the integer counts of ``usage``, nested objects flattened with ``.``
  (``prompt_tokens_details.cached_tokens``); anything not an integer is left out.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from polyloop.adapters.tool_calls import ReplyToolCall, render_tool_calls
from polyloop.types import ModelReply

__all__ = ["ReplyDraft", "flat_usage"]


def flat_usage(value: object, prefix: str = "") -> dict[str, int]:
    """The integer counts of a ``usage`` object, nested objects joined with ``.``."""
    counts: dict[str, int] = {}
    if not isinstance(value, Mapping):
        return counts
    for key, item in value.items():
        name = f"{prefix}{key}"
        if isinstance(item, bool):
            continue
        if isinstance(item, int) and item >= 0:
            counts[name] = item
        elif isinstance(item, Mapping):
            counts.update(flat_usage(item, name + "."))
    return counts


@dataclass
class _ToolCallDraft:
    name: list[str] = field(default_factory=list)
    arguments: list[str] = field(default_factory=list)
    #: Set when a server sent the arguments as an object rather than as JSON text.
    arguments_object: Mapping[str, object] | None = None

    def call(self) -> ReplyToolCall:
        name = "".join(self.name)
        if self.arguments_object is not None:
            return ReplyToolCall(name, dict(self.arguments_object))
        raw = "".join(self.arguments)
        if not raw.strip():
            return ReplyToolCall(name, {})
        try:
            decoded = json.loads(raw)
        except (ValueError, RecursionError):
            return ReplyToolCall(name, raw)
        return ReplyToolCall(name, decoded if isinstance(decoded, dict) else raw)


def _text_of_parts(parts: list[Any], where: str) -> tuple[str, str | None]:
    texts: list[str] = []
    for index, part in enumerate(parts):
        if not isinstance(part, Mapping):
            return "", f"'{where}[{index}]' is {type(part).__name__}, not an object"
        kind = part.get("type")
        if kind in ("text", "output_text") and isinstance(part.get("text"), str):
            texts.append(part["text"])
        elif kind == "refusal" and isinstance(part.get("refusal"), str):
            texts.append(part["refusal"])
        else:
            texts.append(f"[{kind if isinstance(kind, str) else 'unknown'} part not shown]")
    return "".join(texts), None


@dataclass
class ReplyDraft:
    """Everything read so far of one reply."""

    call_id: str | None = None
    text: list[str] = field(default_factory=list)
    reasoning_content: list[str] = field(default_factory=list)
    reasoning: list[str] = field(default_factory=list)
    refusal: list[str] = field(default_factory=list)
    tool_calls: dict[int, _ToolCallDraft] = field(default_factory=dict)
    #: The older single ``function_call``, read only when no ``tool_calls`` entry came.
    function_call: _ToolCallDraft | None = None
    finish_reason: str | None = None
    usage: dict[str, int] | None = None
    model: str | None = None

    # -- whole responses and stream chunks ----------------------------------------------

    def add_completion(self, payload: Mapping[str, Any]) -> str | None:
        """Add a whole ``chat.completion`` object; return what is wrong with it, if anything."""
        self._add_envelope(payload)
        choices = payload.get("choices")
        if not isinstance(choices, list):
            return "no 'choices' list"
        first = choices[0]
        if not isinstance(first, Mapping) or not isinstance(first.get("message"), Mapping):
            return "no 'choices[0].message' object"
        self._add_finish_reason(first)
        return self._add_message(first["message"], "choices[0].message")

    def add_chunk(self, payload: object) -> str | None:
        """Add one ``chat.completion.chunk`` of a stream; return what is wrong, if anything."""
        if not isinstance(payload, Mapping):
            return f"a stream event is a JSON {type(payload).__name__}, not an object"
        if "error" in payload:
            return f"the stream reported an error: {json.dumps(payload['error'])[:300]}"
        self._add_envelope(payload)
        choices = payload.get("choices", [])
        if not isinstance(choices, list):
            return "a stream chunk has no 'choices' list"
        for choice in choices:
            if not isinstance(choice, Mapping):
                return "a stream chunk's choice is not an object"
            if choice.get("index", 0) != 0:
                continue  # only the first choice is read (n > 1 is not supported)
            self._add_finish_reason(choice)
            delta = choice.get("delta")
            if delta is None:
                continue
            if not isinstance(delta, Mapping):
                return "a stream chunk's 'delta' is not an object"
            problem = self._add_message(delta, "choices[0].delta")
            if problem is not None:
                return problem
        return None

    def _add_envelope(self, payload: Mapping[str, Any]) -> None:
        raw_id = payload.get("id")
        if self.call_id is None and isinstance(raw_id, str) and raw_id:
            self.call_id = raw_id
        model = payload.get("model")
        if self.model is None and isinstance(model, str) and model:
            self.model = model
        usage = flat_usage(payload.get("usage"))
        if usage:
            self.usage = usage

    def _add_finish_reason(self, choice: Mapping[str, Any]) -> None:
        reason = choice.get("finish_reason")
        if isinstance(reason, str) and reason:
            self.finish_reason = reason

    # -- one message or delta -----------------------------------------------------------

    def _add_message(self, message: Mapping[str, Any], where: str) -> str | None:
        content = message.get("content")
        if isinstance(content, str):
            self.text.append(content)
        elif isinstance(content, list):
            text, problem = _text_of_parts(content, f"{where}.content")
            if problem is not None:
                return problem
            self.text.append(text)
        elif content is not None:
            return f"'{where}.content' is {type(content).__name__}, not a string or a list of parts"
        for name, parts in (
            ("reasoning_content", self.reasoning_content),
            ("reasoning", self.reasoning),
            ("refusal", self.refusal),
        ):
            value = message.get(name)
            if isinstance(value, str):
                parts.append(value)
        calls = message.get("tool_calls")
        if isinstance(calls, list):
            for position, call in enumerate(calls):
                if not isinstance(call, Mapping):
                    return f"'{where}.tool_calls[{position}]' is not an object"
                index = call.get("index")
                key = index if isinstance(index, int) and not isinstance(index, bool) else position
                _add_function(
                    self.tool_calls.setdefault(key, _ToolCallDraft()), call.get("function")
                )
        elif calls is not None:
            return f"'{where}.tool_calls' is {type(calls).__name__}, not a list"
        if isinstance(message.get("function_call"), Mapping):
            if self.function_call is None:
                self.function_call = _ToolCallDraft()
            _add_function(self.function_call, message["function_call"])
        return None

    # -- the result ---------------------------------------------------------------------

    def calls(self) -> list[ReplyToolCall]:
        """The tool calls in order: the ``tool_calls`` entries, else the ``function_call``."""
        if self.tool_calls:
            return [self.tool_calls[index].call() for index in sorted(self.tool_calls)]
        return [] if self.function_call is None else [self.function_call.call()]

    def reply(self) -> ModelReply:
        text = "".join(self.text) or "".join(self.refusal)
        calls = self.calls()
        return ModelReply(
            call_id=self.call_id,
            content=render_tool_calls(text, calls),
            thinking="".join(self.reasoning_content) or "".join(self.reasoning),
            finish_reason=self.finish_reason,
            usage=self.usage,
            model=self.model,
        )


def _add_function(draft: _ToolCallDraft, function: object) -> None:
    if not isinstance(function, Mapping):
        return
    name = function.get("name")
    # OpenAI sends a streamed call's name once; llama-cpp-python repeats it in every delta.
    if isinstance(name, str) and name != "".join(draft.name):
        draft.name.append(name)
    arguments = function.get("arguments")
    if isinstance(arguments, str):
        draft.arguments.append(arguments)
    elif isinstance(arguments, Mapping):
        draft.arguments_object = arguments
