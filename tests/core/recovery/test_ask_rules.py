"""The log rules of asking (issue 24 item 6): ``validate_log`` refuses what no driver writes,
``WriteOrderCheck`` refuses records out of the loop's order, and the status words are read
from the log (design 0038)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from polyloop.asking import RunParked, UserAnswered, Verdict
from polyloop.errors import CorruptLogError
from polyloop.ports import RunLog
from polyloop.recovery import (
    STATUS_OF_STOP_REASON,
    ResumeMove,
    RunStatus,
    TailState,
    WriteOrderCheck,
    pending_ask,
    plan_resume,
    run_status,
    validate_log,
)
from polyloop.session import approve, resume_or_park, run, run_or_park
from polyloop.stores.memory import MemoryRunStore
from polyloop.types import IntentKind, RunResult, StopReason
from tests.asking_kit import GATED_SCENARIO, AboveLimit, definition, drive_gated, gated_request
from tests.loop_kit import DatedClock, Effects, make_definition, make_request, replies


async def _finished_log() -> RunLog:
    store = MemoryRunStore()
    await drive_gated(store, "g", Effects(), started=False)
    log = await store.read_log("g")
    validate_log(log, "g")
    return log


async def _parked_log() -> RunLog:
    store = MemoryRunStore()
    parked = await run_or_park(definition(GATED_SCENARIO, store), gated_request("g", Effects()))
    assert isinstance(parked, RunParked)
    return await store.read_log("g")


def _refused(log: RunLog, rule: str) -> None:
    with pytest.raises(CorruptLogError, match=rule):
        validate_log(log, "g")


async def test_a_decision_without_its_ask_is_corrupt() -> None:
    """A UserAnswered whose step has no UserAsked."""
    log = await _finished_log()
    _refused(replace(log, asks=log.asks[1:]), "without the UserAsked it decides")


async def test_two_decisions_for_one_ask_are_corrupt() -> None:
    """Decisions are once only."""
    log = await _finished_log()
    second = replace(log.answers[0], verdict=Verdict.REJECT, reason="no")
    answers = (log.answers[0], second, *log.answers[1:])
    _refused(replace(log, answers=answers), "a second decision for one ask")


async def test_an_action_intent_of_a_gated_action_without_approval_is_corrupt() -> None:
    """The refund's intent stands, its approval is gone (or is a rejection)."""
    log = await _finished_log()
    rejected = replace(log.answers[0], verdict=Verdict.REJECT, reason="no")
    _refused(replace(log, answers=(rejected, *log.answers[1:])), "without a recorded approval")


async def test_a_gated_tool_executed_without_any_ask_is_corrupt() -> None:
    """The snapshot says the refund requires approval; its step has neither ask nor answer."""
    log = await _finished_log()
    _refused(
        replace(log, asks=log.asks[1:], answers=log.answers[1:]), "without a recorded approval"
    )


async def test_a_decision_bound_to_other_arguments_is_corrupt() -> None:
    """The decision repeats the ask's digest."""
    log = await _finished_log()
    moved = replace(log.answers[0], arguments_sha256="f" * 64)
    _refused(replace(log, answers=(moved, *log.answers[1:])), "not the one of the ask")


async def test_a_step_that_does_not_carry_out_its_decision_is_corrupt() -> None:
    """An answered question whose step shows another observation."""
    log = await _finished_log()
    answer = log.answers[1]
    assert Verdict.ANSWER is answer.verdict
    other = replace(answer, answer="another account")
    _refused(replace(log, answers=(log.answers[0], other, *log.answers[2:])), "recorded answer")


async def test_an_ask_ahead_of_its_step_is_corrupt() -> None:
    """An ask for a step whose model call is not recorded."""
    log = await _parked_log()
    ahead = replace(log.asks[0], step=5)
    _refused(replace(log, asks=(ahead,)), "runs ahead")


async def test_a_verdict_of_the_wrong_kind_is_corrupt() -> None:
    """An approval answered with ANSWER."""
    log = await _parked_log()
    wrong = UserAnswered(
        "g", 0, Verdict.ANSWER, log.asks[0].arguments_sha256, None, None, "x", "", "t"
    )
    _refused(replace(log, answers=(wrong,)), "cannot decide a approval ask")


async def test_the_write_order_puts_a_decision_after_its_ask_and_before_the_intent() -> None:
    """A store reading in write order refuses a decision before its ask, and an action intent
    before the decision."""
    log = await _finished_log()
    check = WriteOrderCheck("a test file")
    assert log.started is not None
    check.add(log.started, "line", 1)
    check.add(log.intents[0], "line", 2)
    check.add(log.model_results[0], "line", 3)
    check.add(log.answers[0], "line", 4)
    with pytest.raises(CorruptLogError, match="UserAsked of step 0"):
        check.add(log.asks[0], "line", 5)
    again = WriteOrderCheck("a test file")
    again.add(log.started, "line", 1)
    again.add(log.intents[0], "line", 2)
    again.add(log.model_results[0], "line", 3)
    again.add(log.asks[0], "line", 4)
    action = next(i for i in log.intents if i.kind is IntentKind.ACTION)
    again.add(action, "line", 5)
    with pytest.raises(CorruptLogError, match="UserAnswered of step 0"):
        again.add(log.answers[0], "line", 6)


async def test_the_tail_states_of_a_parked_and_a_decided_run() -> None:
    """Parked → wait for the decision; decided → carry it out."""
    store = MemoryRunStore()
    parked = await run_or_park(definition(GATED_SCENARIO, store), gated_request("g", Effects()))
    assert isinstance(parked, RunParked)
    plan = plan_resume(
        await store.read_log("g"), max_consecutive_parse_failures=3, completing_tools=()
    )
    assert (TailState.ASK_PENDING, ResumeMove.WAIT_FOR_DECISION) == (plan.state, plan.move)
    assert parked.ask == plan.ask
    await approve(store, "g", step=parked.ask.step, arguments_sha256=parked.ask.arguments_sha256)
    plan = plan_resume(
        await store.read_log("g"), max_consecutive_parse_failures=3, completing_tools=()
    )
    assert (TailState.ASK_DECIDED, ResumeMove.APPLY_DECISION) == (plan.state, plan.move)
    assert plan.answer is not None
    assert Verdict.APPROVE is plan.answer.verdict


def test_every_stop_reason_has_a_status() -> None:
    """The mapping of design 0038, all ten reasons."""
    assert set(StopReason) == set(STATUS_OF_STOP_REASON)
    assert {
        "task_completed": "succeeded",
        "agent_finished": "succeeded",
        "step_budget": "timed_out",
        "action_budget": "timed_out",
        "context_overflow": "failed",
        "parse_failed_repeatedly": "failed",
        "env_error": "failed",
        "llm_error": "failed",
        "resume_state_unknown": "failed",
        "cancelled": "cancelled",
    } == {reason.value: status.value for reason, status in STATUS_OF_STOP_REASON.items()}


async def test_run_status_through_a_run_s_life() -> None:
    """created → waiting_approval → running (decided) → succeeded; the pending ask is readable."""
    store = MemoryRunStore()
    assert RunStatus.CREATED is run_status(await store.read_log("g"))
    request = gated_request("g", Effects())
    parked = await run_or_park(
        definition(GATED_SCENARIO, store), request, approval_policy=AboveLimit()
    )
    assert isinstance(parked, RunParked)
    log = await store.read_log("g")
    assert RunStatus.WAITING_APPROVAL is run_status(log)
    assert parked.ask == pending_ask(log)
    await approve(store, "g", step=parked.ask.step, arguments_sha256=parked.ask.arguments_sha256)
    log = await store.read_log("g")
    assert RunStatus.RUNNING is run_status(log)
    assert pending_ask(log) is None
    await drive_gated(store, "g", Effects(), started=True)
    assert RunStatus.SUCCEEDED is run_status(await store.read_log("g"))


async def test_an_ungated_run_through_run_or_park_writes_what_run_writes() -> None:
    """Byte for byte: the same records (the snapshot has no approval key)."""
    first, second = MemoryRunStore(), MemoryRunStore()
    script = replies("RUN: print(1)", "FINAL: done")
    # One dating clock each, so that started_at cannot differ by a second boundary.
    await run(make_definition(script, first), make_request("u"), clock=DatedClock())
    result = await run_or_park(
        make_definition(replies("RUN: print(1)", "FINAL: done"), second),
        make_request("u"),
        clock=DatedClock(),
    )
    assert isinstance(result, RunResult)
    a, b = await first.read_log("u"), await second.read_log("u")
    assert [replace(s.step, step_wall_ms=0) for s in a.steps] == [
        replace(s.step, step_wall_ms=0) for s in b.steps
    ]
    assert a.started == b.started
    assert a.started is not None
    assert DatedClock().utc == a.started.started_at
    assert not any(key.startswith("approval.") for key in a.started.parameter_snapshot)


async def test_a_rejected_step_counts_against_the_step_budget() -> None:
    """Rejections are steps: three rejected refunds use up max_steps=3."""
    store = MemoryRunStore()
    script = ['CALL refund {"amount": 80}'] * 3
    request = gated_request("s", Effects(), max_steps=3)
    outcome = await run_or_park(definition(script, store), request)
    while isinstance(outcome, RunParked):
        from polyloop.session import reject

        await reject(
            store,
            "s",
            reason="no",
            step=outcome.ask.step,
            arguments_sha256=outcome.ask.arguments_sha256,
        )
        outcome = await resume_or_park(definition(script, store), request)
    assert StopReason.STEP_BUDGET is outcome.stop_reason
    assert 3 == len(outcome.steps)
    assert RunStatus.TIMED_OUT is run_status(await store.read_log("s"))


async def test_a_policy_run_records_its_name_in_the_snapshot() -> None:
    """approval.policy and approval.rejected_template, only for gated runs."""
    store = MemoryRunStore()
    await run_or_park(
        definition(["RUN: x"], store), gated_request("p", Effects()), approval_policy=AboveLimit()
    )
    snapshot = (await store.read_log("p")).started.parameter_snapshot  # type: ignore[union-attr]
    assert "refunds-above-50-and-code" == snapshot["approval.policy"]
    assert "{reason}" in snapshot["approval.rejected_template"]
    assert "true" == snapshot["request.tools.refund.requires_approval"]
    assert "request.tools.read.requires_approval" not in snapshot
