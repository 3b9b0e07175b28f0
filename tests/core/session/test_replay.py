"""``replay_parser``: recorded replies read again by another parser (design 0067). Nothing is
called or executed; every difference is reported by step and field."""

from __future__ import annotations

import pytest

from polyloop.errors import RunNotFoundError
from polyloop.ports import FinalAnswer, ParsedReply
from polyloop.session import replay_parser, run
from polyloop.stores.memory import MemoryRunStore
from polyloop.testing import LineDecisionParser
from polyloop.types import ModelReply
from tests.loop_kit import (
    SCENARIO,
    Effects,
    MixedExecutor,
    make_definition,
    make_request,
    replies,
    scenario_tools,
)


class ReadIsFinal(LineDecisionParser):
    """The line parser, except that ``CALL read ...`` is now a final answer."""

    def parse(self, reply: ModelReply) -> ParsedReply:
        if reply.content.startswith("CALL read"):
            return ParsedReply(reply.content, FinalAnswer("read it"))
        return super().parse(reply)


class Raises(LineDecisionParser):
    def parse(self, reply: ModelReply) -> ParsedReply:
        raise ValueError("no")


async def _recorded(store: MemoryRunStore) -> Effects:
    effects = Effects()
    tools = scenario_tools(effects)
    definition = make_definition(replies(*SCENARIO), store)
    await run(definition, make_request("r", tools=tools, executor=MixedExecutor(tools, effects)))
    return effects


async def test_the_same_parser_finds_no_difference() -> None:
    store = MemoryRunStore()
    await _recorded(store)
    report = await replay_parser(store, "r", LineDecisionParser())
    assert (6, 0, ()) == (report.steps_replayed, report.steps_without_reply, report.differences)


async def test_a_parser_that_changes_one_decision_is_reported_at_that_step_only() -> None:
    store = MemoryRunStore()
    effects = await _recorded(store)
    executed = dict(effects.counts)
    before = await store.read_log("r")
    report = await replay_parser(store, "r", ReadIsFinal())
    assert (1,) == report.steps_differing
    assert {
        ("decision", "action", "final"),
        ("action", "CALL read {}", None),
        ("tool_name", "read", None),
        ("tool_arguments", "{}", None),
        ("final_answer", None, "read it"),
    } == {(d.field, d.recorded, d.replayed) for d in report.differences}
    assert executed == dict(effects.counts)
    assert before == await store.read_log("r")  # nothing written


async def test_a_parser_that_raises_is_a_difference_and_an_unknown_run_is_refused() -> None:
    store = MemoryRunStore()
    await _recorded(store)
    report = await replay_parser(store, "r", Raises())
    assert tuple(range(6)) == report.steps_differing
    assert all(d.replayed == "error: ValueError: no" for d in report.differences)
    with pytest.raises(RunNotFoundError):
        await replay_parser(store, "nope", LineDecisionParser())
