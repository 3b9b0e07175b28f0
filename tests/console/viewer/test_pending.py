"""``view_pending``: the step a crashed run started and did not finish, read at every crash
point of a real run — its state is the recovery table's, and the tool and arguments the page
shows are those the step records once resume completes it (design 0061)."""

from __future__ import annotations

import contextlib

import pytest

from polyloop.recovery import TailState
from polyloop.session import resume, run
from polyloop.stores.memory import MemoryRunStore
from polyloop.testing import LineDecisionParser
from polyloop.types import StopReason
from polyloop_cli.rendering.inspection import plan_report
from polyloop_console.viewer.pending import pending_step, shipped_parser
from tests.loop_kit import (
    SCENARIO,
    Crash,
    CrashingStore,
    Effects,
    make_definition,
    make_request,
    replies,
    scenario_tools,
)

pytestmark = pytest.mark.crash

#: The words each in-doubt tail state is shown with.
WORDS = {
    TailState.MODEL_CALL_IN_DOUBT: "may or may not have reached the model",
    TailState.ACTION_IN_DOUBT: "may or may not have run",
    TailState.MODEL_RESULT_RECORDED: "result is recorded; nothing after it was announced",
}


@pytest.mark.parametrize("crash_after", range(1, 24))
async def test_every_crash_point_is_read_as_resume_reads_it(crash_after: int) -> None:
    """Crash a scenario run after each write: where the tail stands, the unfinished step's
    words follow the recovery table's state; once resume completes that step, its record has
    the tool and arguments the page showed."""
    memory = MemoryRunStore()
    script = replies(*SCENARIO)
    request = make_request("r", tools=scenario_tools(Effects()))
    with contextlib.suppress(Crash):
        await run(make_definition(script, CrashingStore(memory, crash_after)), request)
    log = await memory.read_log("r")
    pending = pending_step(log)
    state = plan_report(log).plan.state
    if state not in WORDS:
        assert pending is None or log.finished is not None
        return
    assert pending is not None
    assert len(log.steps) == pending.step
    assert WORDS[state] in pending.state
    request = make_request("r", tools=scenario_tools(Effects()))
    result = await resume(make_definition(script, memory), request)
    after = await memory.read_log("r")
    if result.stop_reason is StopReason.RESUME_STATE_UNKNOWN:
        # Refused: the finished run's page shows the same step, the same action, stopped.
        stopped = pending_step(after)
        assert stopped is not None
        assert (stopped.tool_name, stopped.arguments, stopped.action) == (
            pending.tool_name,
            pending.arguments,
            pending.action,
        )
        assert "may or may not have run" in stopped.state
        assert "The run stopped (resume_state_unknown)" in stopped.detail
        return
    step = after.steps[pending.step].step
    if pending.tool_name is not None:
        assert (step.tool_name, step.tool_arguments) == (pending.tool_name, pending.arguments)
    elif state is not TailState.MODEL_CALL_IN_DOUBT:
        assert step.tool_name is None


def test_a_shipped_parser_is_chosen_only_by_its_exact_parameters() -> None:
    """The snapshot's decision_parser keys must equal a shipped parser's parameters."""
    line = {f"decision_parser.{k}": v for k, v in LineDecisionParser().parameters().items()}
    assert isinstance(shipped_parser(line), LineDecisionParser)
    assert shipped_parser({**line, "decision_parser.version": "2"}) is None
    assert shipped_parser({**line, "decision_parser.extra": "x"}) is None
    assert shipped_parser({"decision_parser.kind": "custom"}) is None
    assert shipped_parser({}) is None
    tool_calls = {
        "decision_parser.kind": "tool_call_text",
        "decision_parser.version": "1",
        "decision_parser.plain_text": "invalid",
    }
    chosen = shipped_parser(tool_calls)
    assert chosen is not None
    assert tool_calls == {f"decision_parser.{k}": v for k, v in chosen.parameters().items()}
