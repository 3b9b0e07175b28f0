"""Decision parsers the CLI tests name as ``tests.cli._parsers:FACTORY`` (``polyloop replay``)."""

from __future__ import annotations

from polyloop.ports import InvalidDecision, ParsedReply
from polyloop.testing import LineDecisionParser
from polyloop.types import ModelReply


class _PayIsInvalid(LineDecisionParser):
    def parse(self, reply: ModelReply) -> ParsedReply:
        if reply.content.startswith("CALL pay"):
            return ParsedReply(reply.content, InvalidDecision("pay is no longer allowed"))
        return super().parse(reply)


def pay_is_invalid() -> LineDecisionParser:
    """The line parser, except that every ``pay`` call is now an invalid decision."""
    return _PayIsInvalid()


def same() -> LineDecisionParser:
    return LineDecisionParser()


def not_a_parser() -> object:
    return 42
