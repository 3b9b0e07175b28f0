"""Prompt assembly: a fixed prefix, then one assistant/user pair per finished step.

The prefix is built once per run, so the messages of call k+1 always begin with the messages of
call k and provider prefix caches stay warm. Character counts are kept incrementally.

The model call's ``messages`` tuple is copied from the history only when a client first reads
it (design 0016): the copy is O(history) per call, so building it eagerly made the loop's own
cost per step grow with run length even for a client that never looks (a scripted client, a
provider with server-side conversation state).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from polyloop.ports import ModelCall
from polyloop.session._calls_not_executed import observation_in_history
from polyloop.session._definition import OBSERVATION_TOKEN, TOOLS_TOKEN, RunRequest
from polyloop.types import Message, Role, StepRecord, TextBlock

__all__ = ["Prompt", "tool_call_id"]

# The slot descriptors of the frozen dataclass; writing through them is how a frozen instance
# gets its fields set without running the generated ``__init__``.
_SLOT: dict[str, Any] = {
    name: ModelCall.__dict__[name]
    for name in ("messages", "call_index", "run_id", "result_id", "binding", "tools")
}
_MESSAGES_SLOT = _SLOT["messages"]


class _DeferredModelCall(ModelCall):
    """A :class:`ModelCall` whose ``messages`` is copied out of the prompt on first read.

    It holds the run's history list and the length it had at call time; the history only
    ever grows by appending, so that prefix is exactly the call's messages, whenever it is read.
    Reading returns a real ``tuple`` and caches it. Equality, hashing, pickling and
    ``dataclasses`` helpers behave as for a plain ``ModelCall`` (pickling and copying produce
    one); only ``type(call) is ModelCall`` tells them apart.
    """

    __slots__ = ("_history", "_length")

    _history: list[Message] | None
    _length: int

    @property
    def messages(self) -> tuple[Message, ...]:
        try:
            return _MESSAGES_SLOT.__get__(self)  # type: ignore[no-any-return]
        except AttributeError:
            pass
        history, length = self._history, self._length
        assert history is not None
        value = tuple(history) if len(history) == length else tuple(history[:length])
        _MESSAGES_SLOT.__set__(self, value)
        object.__setattr__(self, "_history", None)
        return value

    @messages.setter
    def messages(self, value: tuple[Message, ...]) -> None:
        # Only the generated ``__init__`` gets here (``dataclasses.replace``); assignment on an
        # instance is refused by the frozen ``__setattr__`` before it reaches this property.
        _MESSAGES_SLOT.__set__(self, value)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, ModelCall):
            return NotImplemented
        return (
            self.messages == other.messages
            and self.call_index == other.call_index
            and self.run_id == other.run_id
            and self.result_id == other.result_id
            and self.binding == other.binding
            and self.tools == other.tools
        )

    __hash__ = ModelCall.__hash__


def _deferred_call(
    history: list[Message],
    call_index: int,
    run_id: str,
    result_id: str,
    binding: Mapping[str, str],
    tools: tuple[Mapping[str, object], ...],
) -> ModelCall:
    call = object.__new__(_DeferredModelCall)
    object.__setattr__(call, "_history", history)
    object.__setattr__(call, "_length", len(history))
    _SLOT["call_index"].__set__(call, call_index)
    _SLOT["run_id"].__set__(call, run_id)
    _SLOT["result_id"].__set__(call, result_id)
    _SLOT["binding"].__set__(call, binding)
    _SLOT["tools"].__set__(call, tools)
    return call


def tool_call_id(step_idx: int) -> str:
    """The id pairing step ``step_idx``'s tool call with its result in native history.

    Derived from the step alone, so a resumed run rebuilds the same history from its log
    without storing ids. ``call`` and five digits: nine letters and digits, the form the
    strictest servers (Mistral's) require, for the first 100 000 steps.
    """
    return f"call{step_idx:05d}"


def _chars(message: Message) -> int:
    return sum(len(block.text) for block in message.content)


def _text(role: Role, text: str) -> Message:
    return Message(role=role, content=(TextBlock(text),))


class Prompt:
    """The growing prompt of one run."""

    __slots__ = ("_chars", "_messages", "_native_tools", "_observation_template", "_tools")

    def __init__(self, request: RunRequest) -> None:
        prefix: list[Message] = list(request.context.run_level)
        # Built once: the tools of a request do not change during its run.
        self._tools: tuple[Mapping[str, object], ...] = tuple(request.tools.schema_for_model())
        template = request.tool_section_template
        # Tools sent natively need no schema text: a template without the token is shown as
        # written, an empty one not at all (design 0046).
        if request.tools and (template or not request.native_tools):
            schema = json.dumps(list(self._tools), ensure_ascii=False)
            # Literal replacement: a template may contain other braces (JSON examples).
            prefix.append(_text(Role.SYSTEM, template.replace(TOOLS_TOKEN, schema)))
        for entries in request.injections.values():
            prefix.extend(_text(Role.SYSTEM, entry.content) for entry in entries)
        prefix.extend(request.context.goal_level)
        # Prefix and history in one list, so a call's tuple is a single copy.
        self._messages: list[Message] = prefix
        self._chars = sum(_chars(m) for m in prefix)
        self._observation_template = request.observation_template
        self._native_tools = request.native_tools

    @property
    def chars(self) -> int:
        """Total characters of the next model call's messages."""
        return self._chars

    def model_call(
        self, call_index: int, run_id: str, result_id: str, binding: Mapping[str, str]
    ) -> ModelCall:
        """The next model call: the current messages (copied when the client reads them) and
        the request's tools in model form."""
        return _deferred_call(self._messages, call_index, run_id, result_id, binding, self._tools)

    def add_step(self, step: StepRecord) -> None:
        """Append a finished step: the assistant's text (``raw_output``), then the wrapped
        observation, followed by the notice of the calls not executed when there are any.

        In a native-tools run a step that made a tool call (``tool_name`` set) goes back as the
        assistant's tool call and a ``TOOL`` message answering it, both carrying
        :func:`tool_call_id` of the step; every other step, and every step of any other run,
        as an assistant and a ``USER`` message, exactly as before (design 0046).
        """
        history_text = step.raw_output
        observation = observation_in_history(step.observation, step.calls_not_executed)
        wrapped = self._observation_template.replace(OBSERVATION_TOKEN, observation)
        if self._native_tools and step.tool_name is not None:
            call_id = tool_call_id(step.step_idx)
            self._messages.append(Message(Role.ASSISTANT, (TextBlock(history_text),), call_id))
            self._messages.append(Message(Role.TOOL, (TextBlock(wrapped),), call_id))
        else:
            self._messages.append(_text(Role.ASSISTANT, history_text))
            self._messages.append(_text(Role.USER, wrapped))
        self._chars += len(history_text) + len(wrapped)
