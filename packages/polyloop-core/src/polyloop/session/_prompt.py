"""Prompt assembly: a fixed prefix, then one assistant/user pair per finished step.

The prefix is built once per run, so the messages of call k+1 always begin with the messages of
call k and provider prefix caches stay warm. Character counts are kept incrementally.
"""

from __future__ import annotations

import json

from polyloop.session._definition import OBSERVATION_TOKEN, TOOLS_TOKEN, RunRequest
from polyloop.types import Message, Role, TextBlock

__all__ = ["Prompt"]


def _chars(message: Message) -> int:
    return sum(len(block.text) for block in message.content)


def _text(role: Role, text: str) -> Message:
    return Message(role=role, content=(TextBlock(text),))


class Prompt:
    """The growing prompt of one run."""

    __slots__ = ("_chars", "_messages", "_observation_template")

    def __init__(self, request: RunRequest) -> None:
        prefix: list[Message] = list(request.context.run_level)
        if request.tools:
            schema = json.dumps(list(request.tools.schema_for_model()), ensure_ascii=False)
            # Literal replacement: a template may contain other braces (JSON examples).
            prefix.append(
                _text(Role.SYSTEM, request.tool_section_template.replace(TOOLS_TOKEN, schema))
            )
        for entries in request.injections.values():
            prefix.extend(_text(Role.SYSTEM, entry.content) for entry in entries)
        prefix.extend(request.context.goal_level)
        # Prefix and history in one list, so a call's tuple is a single copy.
        self._messages: list[Message] = prefix
        self._chars = sum(_chars(m) for m in prefix)
        self._observation_template = request.observation_template

    def messages(self) -> tuple[tuple[Message, ...], int]:
        """The messages of the next model call and their total character count."""
        return tuple(self._messages), self._chars

    def add_step(self, history_text: str, observation: str) -> None:
        """Append a finished step: the assistant's text, then the wrapped observation."""
        wrapped = self._observation_template.replace(OBSERVATION_TOKEN, observation)
        self._messages.append(_text(Role.ASSISTANT, history_text))
        self._messages.append(_text(Role.USER, wrapped))
        self._chars += len(history_text) + len(wrapped)
