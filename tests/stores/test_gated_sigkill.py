"""Runs that wait for a person, killed with SIGKILL around the ask and the decision (issue 24).

A child process drives the gated scenario (tests.asking_kit: approve a refund, answer a
question, reject code, edit a refund, submit) on a durable store, announcing every write; the
parent kills it right before or after the ``UserAsked`` and the ``UserAnswered`` of a refund,
or while the approved refund runs. Then, with a fresh store on the same storage, the parent
checks the log, continues the run (deciding what is still pending) and checks again:

- the log always validates;
- no refund ever ran without a recorded approval, and none ran twice (the effects ledger is
  synced before the tool returns);
- a decision acknowledged before the kill is in the log after it (never lost, never asked
  again).

And two processes deciding one ask at the same moment: exactly one wins, the other is told
the ask is no longer pending.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys

import pytest

from polyloop.asking import RunParked, Verdict
from polyloop.recovery import validate_log
from polyloop.session import resume_or_park, run_or_park
from polyloop.types import StopReason
from tests.asking_kit import (
    GATED_SCENARIO,
    AboveLimit,
    LedgerEffects,
    approved_steps,
    definition,
    drive_gated,
    gated_request,
)
from tests.stores._helpers import DURABLE_KINDS, close_store, open_store
from tests.stores._postgres import wait_until_sessions_end
from tests.stores._procs import ROOT

#: Real processes killed with SIGKILL.
pytestmark = [pytest.mark.slow, pytest.mark.crash]

#: (line that triggers the kill, step): before/after the ask and the decision of both refunds
#: (step 0 is approved, step 3 edited), and during each approved refund.
KILL_POINTS = [
    (trigger, step)
    for step in (0, 3)
    for trigger in (
        "begin write_user_asked",
        "w write_user_asked",
        "begin write_user_answered",
        "w write_user_answered",
        "in-action",
    )
]
REFUND_OF_STEP = {0: "refund:80", 3: "refund:40"}
EXPECTED = {"refund:80": 1, "refund:40": 1, "submit": 1}


def _child(*args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "tests.stores._gated_child", *args],
        cwd=ROOT,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        bufsize=1,
    )


def _kill_at(process: subprocess.Popen[str], wanted: str) -> list[str]:
    """Read the child's lines until ``wanted``, then SIGKILL it; the lines read."""
    assert process.stdout is not None
    seen: list[str] = []
    for line in process.stdout:
        seen.append(line.strip())
        if seen[-1] == wanted:
            os.kill(process.pid, signal.SIGKILL)
            process.communicate(timeout=30)  # reaps it and closes the pipes
            return seen
    _, err = process.communicate(timeout=30)
    raise AssertionError(f"the child ended before {wanted!r}: {seen[-5:]}\n{err[-3000:]}")


@pytest.mark.parametrize("kind", DURABLE_KINDS)
@pytest.mark.parametrize(
    ("trigger", "step"), KILL_POINTS, ids=[f"{t.replace(' ', '-')}-{s}" for t, s in KILL_POINTS]
)
async def test_a_kill_around_an_ask_or_a_decision_loses_nothing_and_repeats_nothing(
    kind: str, trigger: str, step: int, tmp_path: object
) -> None:
    """Killed there, the run continues from its log: every refund ran once, approved."""
    where = str(tmp_path)
    ledger = os.path.join(where, "ledger")
    hang_on = REFUND_OF_STEP[step] if trigger == "in-action" else "-"
    wanted = "in-action" if trigger == "in-action" else f"{trigger} {step}"
    process = _child("drive", kind, where, "g", ledger, hang_on, wanted)
    seen = _kill_at(process, wanted)
    if kind == "postgres":
        wait_until_sessions_end(process.pid)
    acknowledged = {
        int(line.split()[2]) for line in seen if line.startswith("w write_user_answered")
    }
    effects = LedgerEffects(ledger)
    store = open_store(kind, where)
    try:
        log = await store.read_log("g")
        validate_log(log, "g")
        assert acknowledged <= {a.step for a in log.answers}, "an acknowledged decision was lost"
        before = effects.ledger()
        for name in before:
            if name.startswith("refund"):
                owner = next(k for k, v in REFUND_OF_STEP.items() if v == name)
                assert owner in approved_steps(log), f"{name} ran without a recorded approval"
        result = await drive_gated(store, "g", effects, started=True)
        final = await store.read_log("g")
        validate_log(final, "g")
    finally:
        await close_store(store)
    ran = effects.ledger()
    assert len(ran) == len(set(ran)), f"something ran twice: {ran}"
    assert {a.step for a in log.answers} <= {a.step for a in final.answers}
    assert len(final.answers) == len({a.step for a in final.answers})
    if trigger == "in-action":
        # The approved refund's intent is unsettled and it may not be replayed.
        assert StopReason.RESUME_STATE_UNKNOWN is result.stop_reason
        assert REFUND_OF_STEP[step] in ran
        return
    assert StopReason.TASK_COMPLETED is result.stop_reason
    assert EXPECTED == {name: ran.count(name) for name in set(ran)}
    assert [Verdict.APPROVE, Verdict.ANSWER, Verdict.REJECT, Verdict.EDIT] == [
        a.verdict for a in final.answers
    ]


@pytest.mark.parametrize("kind", DURABLE_KINDS)
async def test_two_processes_deciding_at_once_exactly_one_wins(kind: str, tmp_path: object) -> None:
    """Two deciders released together: one decision is recorded, the other is refused with
    AskNotPendingError (the ask is already decided). The run parked in this process, was
    decided in others, and this process then carries the decision out (hours of waiting)."""
    where = str(tmp_path)
    store = open_store(kind, where)
    try:
        effects = LedgerEffects(os.path.join(where, "ledger"))
        parked = await run_or_park(
            definition(GATED_SCENARIO, store),
            gated_request("race", effects),
            approval_policy=AboveLimit(),
        )
        assert isinstance(parked, RunParked)
    finally:
        await close_store(store)
    deciders = [_child("decide", kind, where, "race", verdict) for verdict in ("approve", "reject")]
    for decider in deciders:
        assert decider.stdout is not None
        assert "ready" == decider.stdout.readline().strip()
    for decider in deciders:
        assert decider.stdin is not None
        decider.stdin.write("go\n")
        decider.stdin.flush()
    outcomes = []
    for decider in deciders:
        out, err = decider.communicate(timeout=60)
        assert 0 == decider.returncode, err[-3000:]
        outcomes.append(out.strip().splitlines()[-1])
    assert ["lost AskNotPendingError", "won"] == sorted(outcomes)
    store = open_store(kind, where)
    try:
        log = await store.read_log("race")
        validate_log(log, "race")
        winner = "approve" if outcomes[0] == "won" else "reject"
        assert [winner] == [a.verdict.value for a in log.answers]
        effects = LedgerEffects(os.path.join(where, "ledger"))
        again = await resume_or_park(
            definition(GATED_SCENARIO, store),
            gated_request("race", effects),
            approval_policy=AboveLimit(),
        )
        assert isinstance(again, RunParked)
        assert 1 == again.steps_done
        assert (["refund:80"] if winner == "approve" else []) == effects.ledger()
    finally:
        await close_store(store)
