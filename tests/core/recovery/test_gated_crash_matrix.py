"""The gated scenario crashed after (and before) every store write in turn, in memory, then
continued by a fresh driver and fresh deciders: no gated action runs without a recorded
approval, none runs twice, and an acknowledged decision is never lost or asked again.

The "crash" is a ``BaseException`` raised by a store wrapper (see test_crash_matrix.py); runs of real
processes killed on the durable stores are in ``tests/stores/test_gated_sigkill.py``.
"""

from __future__ import annotations

import pytest

from polyloop.asking import Verdict
from polyloop.recovery import ResumeMove, plan_resume, validate_log
from polyloop.stores.memory import MemoryRunStore
from polyloop.types import StopReason
from tests.asking_kit import (
    AskingCrashBeforeStore,
    AskingCrashingStore,
    approved_steps,
    drive_gated,
)
from tests.loop_kit import Crash, Effects, without_wall_time

pytestmark = pytest.mark.crash

#: Writes of the uninterrupted gated scenario, decisions included (checked below).
TOTAL_WRITES = 28
CRASH_POINTS = [
    *((AskingCrashingStore, point) for point in range(1, TOTAL_WRITES + 1)),
    *((AskingCrashBeforeStore, point) for point in range(2, TOTAL_WRITES + 1)),
]
EXPECTED_EFFECTS = {"refund:80": 1, "refund:40": 1, "submit": 1}


async def _uninterrupted() -> tuple[list[object], int]:
    effects = Effects()
    store = AskingCrashingStore(MemoryRunStore(), crash_after=10_000)
    result = await drive_gated(store, "g", effects, started=False)
    assert StopReason.TASK_COMPLETED is result.stop_reason
    assert EXPECTED_EFFECTS == dict(effects.counts)
    return without_wall_time(result.steps), len(store.writes)  # type: ignore[return-value]


async def _crashed(kind: type[AskingCrashingStore], point: int) -> tuple[MemoryRunStore, Effects]:
    effects = Effects()
    memory = MemoryRunStore()
    with pytest.raises(Crash):
        await drive_gated(kind(memory, point), "g", effects, started=False)
    return memory, effects


@pytest.mark.parametrize(
    ("kind", "point"),
    CRASH_POINTS,
    ids=[
        f"{'after' if k is AskingCrashingStore else 'before'}-write{p:02d}" for k, p in CRASH_POINTS
    ],
)
async def test_gated_crash_then_continue(kind: type[AskingCrashingStore], point: int) -> None:
    """Whatever write the crash hits, the log validates, the decisions recorded before it are
    kept, and continuing never runs a refund unapproved or twice."""
    expected_steps, total = await _uninterrupted()
    assert TOTAL_WRITES == total
    memory, effects = await _crashed(kind, point)
    log = await memory.read_log("g")
    validate_log(log, "g")
    decided_before = {(a.step, a.verdict) for a in log.answers}
    plan = plan_resume(log, max_consecutive_parse_failures=3, completing_tools={"submit"})
    where = f"{kind.__name__} at write #{point} ({plan.state.value})"

    result = await drive_gated(memory, "g", effects, started=True)
    final = await memory.read_log("g")
    validate_log(final, "g")
    assert decided_before <= {(a.step, a.verdict) for a in final.answers}, where
    assert len(final.answers) == len({a.step for a in final.answers}), where
    approved = approved_steps(final)
    for step in final.steps:
        if step.step.tool_name == "refund" and step.action_outcome is not None:
            assert step.step.step_idx in approved, f"{where}: a refund ran unapproved"
    assert all(count <= 1 for count in effects.counts.values()), f"{where}: {effects.counts}"
    assert "code" not in effects.counts, f"{where}: rejected code ran"
    if result.stop_reason is StopReason.RESUME_STATE_UNKNOWN:
        assert ResumeMove.STOP_STATE_UNKNOWN is plan.move, where
        return
    assert StopReason.TASK_COMPLETED is result.stop_reason, where
    assert expected_steps == without_wall_time(result.steps), where
    assert EXPECTED_EFFECTS == dict(effects.counts), where
    assert [Verdict.APPROVE, Verdict.ANSWER, Verdict.REJECT, Verdict.EDIT] == [
        a.verdict for a in final.answers
    ], where


async def gated_crash_moves() -> set[str]:
    """The recovery moves the gated crash points reach (test_crash_matrix.py holds the table covered)."""
    seen: set[str] = set()
    for point in range(1, TOTAL_WRITES + 1):
        memory, _ = await _crashed(AskingCrashingStore, point)
        plan = plan_resume(
            await memory.read_log("g"),
            max_consecutive_parse_failures=3,
            completing_tools={"submit"},
        )
        seen.add(plan.move.value)
    return seen


async def test_the_gated_matrix_reaches_both_ask_states() -> None:
    """Parked and decided-not-acted tails are both among the crash points."""
    moves = await gated_crash_moves()
    assert {ResumeMove.WAIT_FOR_DECISION.value, ResumeMove.APPLY_DECISION.value} <= moves
