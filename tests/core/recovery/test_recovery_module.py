"""`polyloop.recovery` is the one home of the log's rules; `polyloop.session` re-exports them."""

from __future__ import annotations

import polyloop.recovery as recovery
import polyloop.session as session
from polyloop.recovery import SnapshotFacts, snapshot_facts
from polyloop.session import run_snapshot
from polyloop.tools import Tool, ToolRegistry, ToolSpec
from polyloop.types import Budget, ReplayPolicy
from tests.loop_kit import make_definition, make_request, replies


def test_session_reexports_the_recovery_objects_themselves() -> None:
    """Every recovery name `polyloop.session` offers is the very object of `polyloop.recovery`."""
    shared = [name for name in session.__all__ if name in recovery.__all__]
    assert 8 == len(shared)
    assert [] == [name for name in shared if getattr(session, name) is not getattr(recovery, name)]


def _registry(*specs: ToolSpec) -> ToolRegistry:
    return ToolRegistry([Tool(spec, lambda arguments: "ok") for spec in specs])


def test_snapshot_facts_read_back_what_the_request_recorded() -> None:
    """The facts read from a run's own snapshot are its budget, policies and completing tools."""
    tools = _registry(
        ToolSpec("look.up", "Look up.", {"type": "object"}, replay_policy=ReplayPolicy.SAFE),
        ToolSpec("submit.final", "Submit.", {"type": "object"}, completes_run=True),
    )
    request = make_request(
        "r", tools=tools, budget=Budget(9, 8, 4, 1_000), model_replay_policy=ReplayPolicy.NEVER
    )
    snapshot = run_snapshot(make_definition(replies("FINAL: x")), request)
    expected = SnapshotFacts(
        max_consecutive_parse_failures=4,
        completing_tools=frozenset({"submit.final"}),
        max_steps=9,
        max_actions=8,
        model_replay_policy=ReplayPolicy.NEVER,
        tool_replay_policies={"look.up": ReplayPolicy.SAFE, "submit.final": ReplayPolicy.NEVER},
    )
    assert expected == snapshot_facts(snapshot)


def test_a_toolless_run_has_no_completing_tools_and_an_empty_snapshot_says_nothing() -> None:
    """A run without tools says it has none; a snapshot without those keys says nothing."""
    snapshot = run_snapshot(make_definition(replies("FINAL: x")), make_request("r"))
    assert frozenset() == snapshot_facts(snapshot).completing_tools
    assert SnapshotFacts(None, None) == snapshot_facts({})
    assert SnapshotFacts(None, None) == snapshot_facts(
        {"request.budget.max_consecutive_parse_failures": "three"}
    )
