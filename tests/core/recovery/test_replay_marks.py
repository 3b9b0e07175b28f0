"""A step that resume settles by making a call again says so in its StepCompleted
(``replayed_on_resume``, design 0048); every other step says nothing was made twice.

Crashes at every store write of the crash matrix's scenario, then resume, as there.
"""

from __future__ import annotations

import pytest

from polyloop.recovery import ResumeMove, plan_resume
from polyloop.serialization import dumps_log_record, loads_log_record
from polyloop.session import resume, run
from polyloop.stores.memory import MemoryRunStore
from polyloop.types import IntentKind, ReplayPolicy
from tests.core.recovery.test_crash_matrix import CRASH_POINTS
from tests.loop_kit import (
    SCENARIO,
    Crash,
    CrashingStore,
    Effects,
    MixedExecutor,
    make_definition,
    make_request,
    replies,
    scenario_tools,
)

pytestmark = pytest.mark.crash

#: What the resumed step records, by the move resume made on the tail.
EXPECTED = {
    ResumeMove.EXECUTE_ACTION_AGAIN: IntentKind.ACTION,
    ResumeMove.CALL_MODEL_AGAIN: IntentKind.MODEL_CALL,
}


@pytest.mark.parametrize("policy", [ReplayPolicy.SAFE, ReplayPolicy.NEVER], ids=lambda p: p.value)
@pytest.mark.parametrize(
    ("store_kind", "crash_after"),
    CRASH_POINTS,
    ids=[
        f"{'after' if kind is CrashingStore else 'before'}-write{point:02d}"
        for kind, point in CRASH_POINTS
    ],
)
async def test_the_replayed_call_is_recorded_with_its_step(
    policy: ReplayPolicy, store_kind: type[CrashingStore], crash_after: int
) -> None:
    """Exactly the step resume settled by calling again carries the call's kind; the mark
    survives the log's JSON form."""
    effects = Effects()
    tools = scenario_tools(effects)
    memory = MemoryRunStore()
    request = make_request(
        "r", tools=tools, executor=MixedExecutor(tools, effects), model_replay_policy=policy
    )
    with pytest.raises(Crash):
        await run(make_definition(replies(*SCENARIO), store_kind(memory, crash_after)), request)
    before = await memory.read_log("r")
    plan = plan_resume(before, max_consecutive_parse_failures=3, completing_tools={"submit"})
    await resume(make_definition(replies(*SCENARIO), memory), request)
    log = await memory.read_log("r")
    marks = {completed.step.step_idx: completed.replayed_on_resume for completed in log.steps}
    expected = {k: None for k in marks}
    if plan.move in EXPECTED:
        expected[plan.next_step] = EXPECTED[plan.move]
    assert expected == marks
    for completed in log.steps:
        assert completed == loads_log_record(dumps_log_record(completed))


def test_a_step_completed_without_the_field_reads_back_as_no_replay() -> None:
    """A record written before the field existed (no key) decodes to ``None``; ``None`` is
    left out when written, so older readers see the same record as before."""
    from polyloop import testing

    completed = testing.tool_step("r", 0).step_completed
    text = dumps_log_record(completed)
    assert "replayed_on_resume" not in text
    assert completed == loads_log_record(text)
    assert loads_log_record(text).replayed_on_resume is None  # type: ignore[union-attr]
