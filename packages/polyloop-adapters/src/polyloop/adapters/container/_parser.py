"""``FirstCodeBlockParser``: the dissect-style decision parser for code-acting agents."""

from __future__ import annotations

import re
from collections.abc import Mapping

from polyloop.ports import Action, FinalAnswer, InvalidDecision, ParsedReply
from polyloop.types import ModelReply

__all__ = ["FirstCodeBlockParser"]

_FENCE = re.compile(r"```[ \t]*(?:python|py|python3)?[ \t]*\n(.*?)(?:\n)?```", re.DOTALL)


class FirstCodeBlockParser:
    """Reads one action per reply: the first fenced code block.

    - A reply with a fenced block (```` ```python ```` or a bare ```` ``` ````) is an
      :class:`~polyloop.ports.Action` whose text is the block's code. Everything after that
      block is dropped from ``history_text``: models often go on to invent the block's output,
      and the invented output must not sit in the history next to the real one.
    - A reply without a block whose text contains ``final_marker`` is a
      :class:`~polyloop.ports.FinalAnswer` with the text after the marker.
    - Anything else is an :class:`~polyloop.ports.InvalidDecision` that says what to write.

    Never raises.
    """

    def __init__(self, final_marker: str = "FINAL ANSWER:") -> None:
        self.final_marker = final_marker

    def parse(self, reply: ModelReply) -> ParsedReply:
        text = reply.content
        match = _FENCE.search(text)
        if match is not None:
            code = match.group(1)
            if code.strip():
                return ParsedReply(text[: match.end()], Action(text=code, tool_call=None))
            return ParsedReply(
                text[: match.end()],
                InvalidDecision("The code block is empty. Put the Python code to run inside it."),
            )
        at = text.find(self.final_marker)
        if at >= 0:
            return ParsedReply(text, FinalAnswer(text[at + len(self.final_marker) :].strip()))
        return ParsedReply(
            text,
            InvalidDecision(
                "No action found. Reply with one Python code block (```python ... ```) to run "
                f"code, or with '{self.final_marker} <answer>' when you are done."
            ),
        )

    def parameters(self) -> Mapping[str, str]:
        return {
            "kind": "first_code_block",
            "version": "1",
            "final_marker": self.final_marker,
        }
