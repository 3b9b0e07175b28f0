"""Crash after every store write in turn, then resume with fresh seams over the same store.

The "crash" is a ``BaseException`` raised by a store wrapper right after the n-th write became
durable in the memory store: exactly what a process death leaves behind in a store with prefix
durability. Nothing here races or waits: the matrix runs in the parallel part. The tests that
kill real processes of the durable stores live in tests/stores.
"""

from __future__ import annotations

import pytest

from polyloop.ports import RunLog
from polyloop.recovery import ResumeMove, plan_resume, validate_log
from polyloop.session import resume, run
from polyloop.stores.memory import MemoryRunStore
from polyloop.types import IntentKind, ReplayPolicy, StopReason
from tests.core.recovery.test_gated_crash_matrix import gated_crash_moves
from tests.loop_kit import (
    SCENARIO,
    Crash,
    CrashingStore,
    Effects,
    MixedExecutor,
    RecordingStore,
    make_definition,
    make_request,
    replies,
    scenario_tools,
    without_wall_time,
)

pytestmark = pytest.mark.crash

NEVER_ACTIONS = ("write", "code", "submit")


async def _uninterrupted(policy: ReplayPolicy) -> tuple[list[object], int]:
    effects = Effects()
    tools = scenario_tools(effects)
    store = RecordingStore(MemoryRunStore())
    request = make_request(
        "r", tools=tools, executor=MixedExecutor(tools, effects), model_replay_policy=policy
    )
    result = await run(make_definition(replies(*SCENARIO), store), request)
    assert StopReason.TASK_COMPLETED == result.stop_reason
    return without_wall_time(result.steps), len(store.writes)  # type: ignore[return-value]


def _settled_calls(log: RunLog) -> set[int]:
    settled = {r.result_id for r in log.model_results}
    return {
        i.call_index
        for i in log.intents
        if i.kind is IntentKind.MODEL_CALL and i.result_id in settled
    }


def _in_doubt_action(log: RunLog) -> str | None:
    """The tool (or 'code') whose action intent is unsettled at the tail of the log, if any."""
    next_step = len(log.steps)
    for intent in log.intents:
        if intent.kind is IntentKind.ACTION and intent.call_index == next_step:
            line = SCENARIO[next_step]
            return "code" if line.startswith("RUN:") else line.split()[1]
    return None


class CrashBeforeStore(CrashingStore):
    """Dies just before its ``crash_after``-th write: the side effect before it happened, the
    record of it did not (e.g. an action executed but its StepCompleted never written)."""

    async def _write(self, name: str, record: object) -> None:
        if len(self.writes) + 1 >= self.crash_after:
            raise Crash(f"crash before write #{len(self.writes) + 1} ({name})")
        await RecordingStore._write(self, name, record)


#: Store writes of the uninterrupted scenario (checked by every case, so the points below stay
#: every point there is).
TOTAL_WRITES = 24
#: (store kind, crash point): after each write from the first, before each from the second
#: (crashing before RunStarted leaves no run to resume).
CRASH_POINTS = [
    *((CrashingStore, point) for point in range(1, TOTAL_WRITES + 1)),
    *((CrashBeforeStore, point) for point in range(2, TOTAL_WRITES + 1)),
]


@pytest.mark.parametrize("policy", [ReplayPolicy.SAFE, ReplayPolicy.NEVER], ids=lambda p: p.value)
@pytest.mark.parametrize(
    ("store_kind", "crash_after"),
    CRASH_POINTS,
    ids=[
        f"{'after' if kind is CrashingStore else 'before'}-write{point:02d}"
        for kind, point in CRASH_POINTS
    ],
)
async def test_crash_at_a_write_then_resume(
    policy: ReplayPolicy, store_kind: type[CrashingStore], crash_after: int
) -> None:
    """At this crash point: never-actions run at most once, safe ones are redone, recorded
    replies are reused, and a completed run equals the uninterrupted one."""
    expected_steps, total_writes = await _uninterrupted(policy)
    assert TOTAL_WRITES == total_writes
    effects = Effects()
    tools = scenario_tools(effects)
    memory = MemoryRunStore()
    request = make_request(
        "r", tools=tools, executor=MixedExecutor(tools, effects), model_replay_policy=policy
    )
    first = make_definition(replies(*SCENARIO), store_kind(memory, crash_after))
    with pytest.raises(Crash):
        await run(first, request)

    log = await memory.read_log("r")
    validate_log(log, "r")
    settled_before = _settled_calls(log)
    doubtful_action = _in_doubt_action(log)
    plan = plan_resume(log, max_consecutive_parse_failures=3, completing_tools={"submit"})
    executed_before = dict(effects.counts)

    second = make_definition(replies(*SCENARIO), memory)
    result = await resume(second, request)
    validate_log(await memory.read_log("r"), "r")
    where = f"{store_kind.__name__} at write #{crash_after} ({plan.state.value})"

    requested_again = {c.call_index for c in second.model_client.calls}  # type: ignore[attr-defined]
    assert set() == requested_again & settled_before, f"{where}: a recorded reply was re-requested"
    for name in NEVER_ACTIONS:
        assert effects.counts[name] <= 1, f"{where}: never-action {name!r} ran twice"

    if plan.move is ResumeMove.STOP_STATE_UNKNOWN:
        assert StopReason.RESUME_STATE_UNKNOWN == result.stop_reason, where
        if doubtful_action is None:
            assert ReplayPolicy.NEVER == policy, where
        else:
            assert doubtful_action in NEVER_ACTIONS, where
        assert executed_before == dict(effects.counts), f"{where}: resume executed something"
        return

    assert StopReason.TASK_COMPLETED == result.stop_reason, where
    assert expected_steps == without_wall_time(result.steps), where
    if doubtful_action == "read":
        assert ResumeMove.EXECUTE_ACTION_AGAIN == plan.move, where
        assert executed_before.get("read", 0) + 1 == effects.counts["read"], where
    else:
        assert 1 == effects.counts["read"], where
    assert {"write": 1, "code": 1, "submit": 1} == {k: effects.counts[k] for k in NEVER_ACTIONS}, (
        where
    )


async def test_crash_matrix_covers_every_recovery_state() -> None:
    """The scenario's crash points, with those of the gated scenario (test_gated_crash_matrix.py, whose runs
    wait for a person), reach every tail state of the recovery table."""
    seen: set[str] = await gated_crash_moves()
    for policy in (ReplayPolicy.SAFE, ReplayPolicy.NEVER):
        for crash_after in range(1, TOTAL_WRITES + 1):
            effects = Effects()
            tools = scenario_tools(effects)
            memory = MemoryRunStore()
            request = make_request(
                "r", tools=tools, executor=MixedExecutor(tools, effects), model_replay_policy=policy
            )
            with pytest.raises(Crash):
                await run(
                    make_definition(replies(*SCENARIO), CrashingStore(memory, crash_after)), request
                )
            plan = plan_resume(
                await memory.read_log("r"),
                max_consecutive_parse_failures=3,
                completing_tools={"submit"},
            )
            seen.add(plan.move.value)
    assert {m.value for m in ResumeMove} == seen
