"""Scripted seams for tests, examples and benchmarks (re-exported by :mod:`polyloop.testing`).

- :class:`ScriptedModelClient` returns (or raises) a prepared sequence of replies.
- :class:`LineDecisionParser` reads a tiny line protocol (``FINAL:``, ``CALL``, ``RUN:``).
- :class:`ScriptedExecutor` executes tool-less actions with a function you give it.
- :class:`RecordingEventSink` keeps every event; :class:`NullEventSink` drops them.

None of them does I/O; all report parameters as the seams require.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping

from polyloop.errors import PolyLoopError
from polyloop.ports import (
    Action,
    Event,
    FinalAnswer,
    InvalidDecision,
    ModelCall,
    ParsedReply,
    ToolCall,
)
from polyloop.types import ActionOutcome, ActionStatus, ModelReply

__all__ = [
    "LineDecisionParser",
    "NullEventSink",
    "RecordingEventSink",
    "ScriptExhaustedError",
    "ScriptedExecutor",
    "ScriptedModelClient",
    "reply",
]


class ScriptExhaustedError(PolyLoopError):
    """A scripted seam was called more often than its script allows."""


def reply(content: str, *, thinking: str = "", call_id: str | None = None) -> ModelReply:
    """A :class:`ModelReply` with sensible defaults, for scripts."""
    return ModelReply(call_id=call_id, content=content, thinking=thinking)


#: One entry of a model script: a reply, an exception to raise, or a function of the call.
ScriptEntry = ModelReply | BaseException | Callable[[ModelCall], ModelReply]


class ScriptedModelClient:
    """Answers model calls from a script, in order; records every call it receives.

    With ``by_call_index=True`` the entry is chosen by ``call.call_index`` instead of by call
    count, so that a resumed run with a fresh client sees the same script position.
    """

    def __init__(
        self,
        script: Iterable[ScriptEntry],
        *,
        by_call_index: bool = False,
        name: str = "scripted",
    ) -> None:
        self._script = list(script)
        self._by_call_index = by_call_index
        self._name = name
        self.calls: list[ModelCall] = []

    async def call(self, call: ModelCall) -> ModelReply:
        position = call.call_index if self._by_call_index else len(self.calls)
        self.calls.append(call)
        if position >= len(self._script):
            raise ScriptExhaustedError(
                f"ScriptedModelClient {self._name!r} has {len(self._script)} entries; call "
                f"{position} asked for one more. Lengthen the script or lower the budget."
            )
        entry = self._script[position]
        if isinstance(entry, BaseException):
            raise entry
        if isinstance(entry, ModelReply):
            return entry
        return entry(call)

    def parameters(self) -> Mapping[str, str]:
        return {"kind": "scripted", "name": self._name, "entries": str(len(self._script))}


class LineDecisionParser:
    """Reads replies of the form:

    - ``FINAL: <answer>`` → :class:`FinalAnswer`
    - ``CALL <tool> <json object>`` → :class:`Action` with a tool call (text = the whole line)
    - ``RUN: <code>`` → tool-less :class:`Action` whose text is the code
    - anything else → :class:`InvalidDecision` explaining the three forms.

    Never raises. ``history_text`` is the reply content, unchanged.
    """

    HELP = "Reply with one of: FINAL: <answer> | CALL <tool> <json object> | RUN: <code>."

    def parse(self, reply: ModelReply) -> ParsedReply:
        text = reply.content
        stripped = text.strip()
        if stripped.startswith("FINAL:"):
            return ParsedReply(text, FinalAnswer(stripped[len("FINAL:") :].strip()))
        if stripped.startswith("RUN:"):
            return ParsedReply(text, Action(text=stripped[len("RUN:") :].strip(), tool_call=None))
        if stripped.startswith("CALL "):
            name, _, raw = stripped[len("CALL ") :].strip().partition(" ")
            try:
                arguments = json.loads(raw) if raw.strip() else {}
            except (ValueError, RecursionError) as error:
                return ParsedReply(
                    text, InvalidDecision(f"Arguments of {name!r} are not valid JSON ({error}).")
                )
            if not isinstance(arguments, dict):
                return ParsedReply(
                    text, InvalidDecision(f"Arguments of {name!r} must be a JSON object.")
                )
            return ParsedReply(text, Action(text=stripped, tool_call=ToolCall(name, arguments)))
        return ParsedReply(text, InvalidDecision(self.HELP))

    def parameters(self) -> Mapping[str, str]:
        return {"kind": "line_protocol", "version": "1"}


class ScriptedExecutor:
    """Executes tool-less actions with ``handler(code) -> str | ActionOutcome``.

    Records the text of every action it executed in ``executed``. A handler that raises makes
    ``execute`` raise (an environment failure, as seen by the loop).
    """

    def __init__(
        self,
        handler: Callable[[str], str | ActionOutcome] = lambda text: f"ran: {text}",
        *,
        name: str = "scripted",
    ) -> None:
        self._handler = handler
        self._name = name
        self.executed: list[str] = []

    async def execute(self, action: Action) -> ActionOutcome:
        self.executed.append(action.text)
        result = self._handler(action.text)
        if isinstance(result, ActionOutcome):
            return result
        return ActionOutcome(
            status=ActionStatus.EXECUTED,
            observation=result,
            observation_is_synthetic=False,
            env_reported_completion=False,
            observation_truncated_chars=0,
        )

    def parameters(self) -> Mapping[str, str]:
        return {"kind": "scripted", "name": self._name, "stateful": "false"}


class RecordingEventSink:
    """Keeps every event it receives, in order, in ``events``."""

    def __init__(self) -> None:
        self.events: list[Event] = []

    async def emit(self, event: Event) -> None:
        self.events.append(event)

    def parameters(self) -> Mapping[str, str]:
        return {"kind": "recording"}


class NullEventSink:
    """Accepts and drops every event."""

    async def emit(self, event: Event) -> None:
        return None

    def parameters(self) -> Mapping[str, str]:
        return {"kind": "null"}
