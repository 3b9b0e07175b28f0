"""Gating and parking (issue 24 items 1-3): a gated action is asked about before its intent,
the run parks holding no lease, and a decision is carried out by ``resume_or_park``."""

from __future__ import annotations

import pytest

from polyloop.asking import (
    AskKind,
    RunParked,
)
from polyloop.errors import RunWouldParkError
from polyloop.recovery import RunStatus, pending_ask, run_status, validate_log
from polyloop.session import (
    UserDecision,
    approve,
    edit,
    reject,
    resume,
    resume_or_park,
    run,
    run_or_park,
)
from polyloop.stores.memory import MemoryRunStore
from polyloop.types import (
    ActionStatus,
    RunResult,
    StopReason,
)
from tests.asking_kit import AboveLimit, definition, gated_request, gated_tools
from tests.loop_kit import Effects

SCRIPT = ['CALL refund {"amount": 80}', "CALL submit {}"]


async def _parked(run_id: str = "r") -> tuple[MemoryRunStore, Effects, RunParked]:
    store, effects = MemoryRunStore(), Effects()
    parked = await run_or_park(definition(SCRIPT, store), gated_request(run_id, effects))
    assert isinstance(parked, RunParked)
    return store, effects, parked


async def test_a_gated_call_parks_before_its_action_intent() -> None:
    """The ask is recorded after the model result, no action intent follows, nothing ran."""
    store, effects, parked = await _parked()
    log = await store.read_log("r")
    assert 0 == parked.steps_done
    assert "refund" == parked.ask.tool_name
    assert '{"amount":80}' == parked.ask.arguments_json
    assert AskKind.APPROVAL is parked.ask.kind
    assert [] == [i for i in log.intents if i.kind.value == "action"]
    assert parked.ask == pending_ask(log)
    assert RunStatus.WAITING_APPROVAL is run_status(log)
    assert {} == dict(effects.counts)
    validate_log(log, "r")


async def test_the_lease_is_free_while_parked() -> None:
    """A parked run holds no lease: another driver takes it at once."""
    store, _, _ = await _parked()
    lease = await store.acquire_run_lease("r")
    await lease.release()


async def test_approve_then_resume_executes_once() -> None:
    """Approve → the normal intent and execution; the run goes on to complete."""
    store, effects, parked = await _parked()
    await approve(
        store,
        "r",
        step=parked.ask.step,
        arguments_sha256=parked.ask.arguments_sha256,
        decided_by="ana",
    )
    result = await resume_or_park(definition(SCRIPT, store), gated_request("r", effects))
    assert isinstance(result, RunResult)
    assert StopReason.TASK_COMPLETED is result.stop_reason
    assert {"refund:80": 1, "submit": 1} == dict(effects.counts)
    assert ActionStatus.EXECUTED is result.steps[0].action_status
    validate_log(await store.read_log("r"), "r")


async def test_edit_executes_the_edited_arguments() -> None:
    """Edit → the approved other arguments run, and the step records them."""
    store, effects, parked = await _parked()
    tools = gated_request("r", effects).tools
    await edit(
        store,
        "r",
        {"amount": 30},
        tools=tools,
        step=parked.ask.step,
        arguments_sha256=parked.ask.arguments_sha256,
    )
    result = await resume_or_park(definition(SCRIPT, store), gated_request("r", effects))
    assert isinstance(result, RunResult)
    assert {"refund:30": 1, "submit": 1} == dict(effects.counts)
    assert '{"amount":30}' == result.steps[0].tool_arguments
    validate_log(await store.read_log("r"), "r")


async def test_reject_ends_the_step_not_executed_with_the_reason() -> None:
    """Reject → NOT_EXECUTED, the observation tells the model why, the step counts."""
    store, effects, parked = await _parked()
    await reject(
        store,
        "r",
        reason="too much",
        step=parked.ask.step,
        arguments_sha256=parked.ask.arguments_sha256,
    )
    result = await resume_or_park(definition(SCRIPT, store), gated_request("r", effects))
    assert isinstance(result, RunResult)
    first = result.steps[0]
    assert ActionStatus.NOT_EXECUTED is first.action_status
    assert first.observation.endswith("too much")
    assert first.observation_is_synthetic
    assert {"submit": 1} == dict(effects.counts)
    validate_log(await store.read_log("r"), "r")


async def test_ask_now_answers_without_parking() -> None:
    """An in-process handler decides at once: no park, both records written."""
    store, effects = MemoryRunStore(), Effects()
    seen = []

    async def ask_now(ask: object) -> UserDecision:
        seen.append(ask)
        return UserDecision.approve(decided_by="terminal")

    result = await run_or_park(
        definition(SCRIPT, store), gated_request("r", effects), ask_now=ask_now
    )
    assert isinstance(result, RunResult)
    log = await store.read_log("r")
    assert 1 == len(seen) == len(log.asks) == len(log.answers)
    assert {"refund:80": 1, "submit": 1} == dict(effects.counts)


async def test_run_refuses_a_gated_request_writing_nothing() -> None:
    """``run``/``resume`` only drive runs that cannot park."""
    store, effects = MemoryRunStore(), Effects()
    with pytest.raises(RunWouldParkError, match="run_or_park"):
        await run(definition(SCRIPT, store), gated_request("r", effects))
    with pytest.raises(RunWouldParkError, match="resume_or_park"):
        await resume(definition(SCRIPT, store), gated_request("r", effects))
    assert not await store.list_run_ids()


async def test_a_policy_gates_single_calls_and_tool_less_actions() -> None:
    """The request's policy: a refund of 20 runs unasked, the tool-less action waits."""
    store, effects = MemoryRunStore(), Effects()
    script = ['CALL refund {"amount": 20}', "RUN: print(1)", "CALL submit {}"]
    tools = gated_tools(effects, refund_gated=False)
    request = gated_request("r", effects, tools=tools)
    parked = await run_or_park(definition(script, store), request, approval_policy=AboveLimit())
    assert isinstance(parked, RunParked)
    assert 1 == parked.steps_done
    assert parked.ask.tool_name is None
    assert "print(1)" == parked.ask.action
    assert "refunds-above-50-and-code" == parked.ask.policy_name
    assert {"refund:20": 1} == dict(effects.counts)
    await approve(store, "r", step=parked.ask.step, arguments_sha256=parked.ask.arguments_sha256)
    result = await resume_or_park(definition(script, store), request, approval_policy=AboveLimit())
    assert isinstance(result, RunResult)
    assert {"refund:20": 1, "code": 1, "submit": 1} == dict(effects.counts)
    validate_log(await store.read_log("r"), "r")
