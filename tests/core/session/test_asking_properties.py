"""Random runs of gated steps and random decisions, against a model of what must have run
(issue 24): every approved refund runs once with the approved amount, nothing rejected or
merely asked runs, answers and reasons are what the model reads, and random crashes keep the
log valid, never run a refund unapproved or twice, and never lose a recorded decision."""

from __future__ import annotations

import contextlib
from collections import Counter
from dataclasses import dataclass

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from polyloop.asking import RunParked, UserAsked, Verdict
from polyloop.recovery import validate_log
from polyloop.session import (
    DEFAULT_REJECTED_TEMPLATE,
    UserDecision,
    answer,
    approve,
    edit,
    reject,
    resume_or_park,
    run_or_park,
)
from polyloop.stores.memory import MemoryRunStore
from polyloop.types import ActionStatus, RunResult, StopReason
from tests.asking_kit import AboveLimit, AskingCrashingStore, definition, gated_request
from tests.loop_kit import Crash, Effects

pytestmark = pytest.mark.crash


@dataclass(frozen=True)
class Step:
    """One scripted step: what the model does and what the person decides about it."""

    kind: str  # refund | ask | read | code | small_refund
    amount: int
    verdict: str  # approve | edit | reject | answer (ask) | none (ungated)
    text: str
    in_process: bool

    def line(self) -> str:
        if self.kind in ("refund", "small_refund"):
            return f'CALL refund {{"amount": {self.amount}}}'
        if self.kind == "ask":
            return f'CALL ask_user {{"question": "q{self.amount}"}}'
        if self.kind == "read":
            return "CALL read {}"
        return f"RUN: print({self.amount})"


def _step(kind: str) -> st.SearchStrategy[Step]:
    texts = st.text(alphabet="abcé 中", min_size=1, max_size=8).filter(str.strip)
    if kind == "refund":
        verdicts = st.sampled_from(["approve", "edit", "reject"])
        amounts = st.integers(51, 500)
    elif kind == "code":
        verdicts = st.sampled_from(["approve", "reject"])
        amounts = st.integers(0, 9)
    elif kind == "ask":
        verdicts, amounts = st.just("answer"), st.integers(0, 9)
    elif kind == "small_refund":
        verdicts, amounts = st.just("none"), st.integers(0, 50)
    else:
        verdicts, amounts = st.just("none"), st.just(0)
    return st.builds(Step, st.just(kind), amounts, verdicts, texts, st.booleans())


STEPS = st.lists(
    st.sampled_from(["refund", "code", "ask", "small_refund", "read"]).flatmap(_step),
    min_size=1,
    max_size=7,
)


def _decision(step: Step) -> UserDecision:
    if step.verdict == "approve":
        return UserDecision.approve(decided_by="prop")
    if step.verdict == "edit":
        return UserDecision.edit({"amount": step.amount - 1})
    if step.verdict == "reject":
        return UserDecision.reject(step.text)
    return UserDecision.answer(step.text)


async def _decide(store: object, parked: RunParked, steps: list[Step], tools: object) -> None:
    step = steps[parked.ask.step]
    digest, asked = parked.ask.arguments_sha256, parked.ask.step
    if step.verdict == "approve":
        await approve(store, "p", step=asked, arguments_sha256=digest)  # type: ignore[arg-type]
    elif step.verdict == "edit":
        await edit(
            store,
            "p",
            {"amount": step.amount - 1},
            tools=tools,
            step=asked,
            arguments_sha256=digest,
        )  # type: ignore[arg-type]
    elif step.verdict == "reject":
        await reject(store, "p", reason=step.text, step=asked, arguments_sha256=digest)  # type: ignore[arg-type]
    else:
        await answer(store, "p", step.text, step=asked)  # type: ignore[arg-type]


def _expected_effects(steps: list[Step]) -> Counter[str]:
    effects: Counter[str] = Counter()
    for step in steps:
        if step.kind == "refund" and step.verdict in ("approve", "edit"):
            amount = step.amount if step.verdict == "approve" else step.amount - 1
            effects[f"refund:{amount}"] += 1
        elif step.kind == "small_refund":
            effects[f"refund:{step.amount}"] += 1
        elif step.kind == "code" and step.verdict == "approve":
            effects["code"] += 1
        elif step.kind == "read":
            effects["read"] += 1
    effects["submit"] += 1
    return effects


async def _drive(steps: list[Step], store: object, effects: Effects, started: bool) -> RunResult:
    script = [step.line() for step in steps] + ["CALL submit {}"]
    from tests.asking_kit import gated_tools

    tools = gated_tools(effects, refund_gated=False)
    request = gated_request("p", effects, tools=tools, max_steps=len(script) + 1)

    async def ask_now(ask: UserAsked) -> UserDecision | None:
        step = steps[ask.step]
        return _decision(step) if step.in_process else None

    options = {"approval_policy": AboveLimit(), "ask_now": ask_now}
    entry = resume_or_park if started else run_or_park
    outcome = await entry(definition(script, store), request, **options)  # type: ignore[arg-type]
    while isinstance(outcome, RunParked):
        await _decide(store, outcome, steps, tools)
        outcome = await resume_or_park(definition(script, store), request, **options)  # type: ignore[arg-type]
    return outcome


@settings(max_examples=80, deadline=None)
@given(steps=STEPS)
async def test_random_gated_runs_do_what_the_decisions_say(steps: list[Step]) -> None:
    """Without crashes, the run's effects, statuses and observations are the model's."""
    store, effects = MemoryRunStore(), Effects()
    result = await _drive(steps, store, effects, started=False)
    assert StopReason.TASK_COMPLETED is result.stop_reason
    assert _expected_effects(steps) == effects.counts
    for step, record in zip(steps, result.steps, strict=False):
        if step.verdict == "reject":
            assert ActionStatus.NOT_EXECUTED is record.action_status
            assert DEFAULT_REJECTED_TEMPLATE.replace("{reason}", step.text) == record.observation
        elif step.verdict == "answer":
            assert record.action_status is None
            assert step.text == record.observation
        elif step.verdict == "edit":
            assert f'{{"amount":{step.amount - 1}}}' == record.tool_arguments
        else:
            assert ActionStatus.EXECUTED is record.action_status
    log = await store.read_log("p")
    validate_log(log, "p")
    gated = [s for s in steps if s.verdict != "none"]
    assert [s.verdict for s in gated] == [a.verdict.value for a in log.answers]


@settings(max_examples=60, deadline=None)
@given(steps=STEPS, crashes=st.lists(st.integers(1, 30), max_size=4))
async def test_random_crashes_never_run_a_gated_action_unapproved_or_twice(
    steps: list[Step], crashes: list[int]
) -> None:
    """Crash after random writes, continue each time: the log validates, effects never exceed
    the model's, every executed refund above the limit has its approval, no decision is lost."""
    memory, effects = MemoryRunStore(), Effects()
    started = False
    decided: set[tuple[int, str]] = set()
    result: RunResult | None = None
    for crash_after in [*crashes, None]:
        store = memory if crash_after is None else AskingCrashingStore(memory, crash_after)
        with contextlib.suppress(Crash):
            result = await _drive(steps, store, effects, started)
        log = await memory.read_log("p")
        started = started or log.started is not None
        validate_log(log, "p")
        now = {(a.step, a.verdict.value) for a in log.answers}
        assert decided <= now
        decided = now
        if result is not None:
            break
    assert result is not None
    expected = _expected_effects(steps)
    assert all(effects.counts[key] <= expected[key] for key in effects.counts), effects.counts
    log = await memory.read_log("p")
    approved = {a.step for a in log.answers if a.verdict in (Verdict.APPROVE, Verdict.EDIT)}
    for completed in log.steps:
        step = completed.step
        gated = step.step_idx < len(steps) and steps[step.step_idx].verdict in ("approve", "edit")
        if completed.action_outcome is not None and gated:
            assert step.step_idx in approved
    if result.stop_reason is StopReason.TASK_COMPLETED:
        assert expected == effects.counts
    else:
        assert StopReason.RESUME_STATE_UNKNOWN is result.stop_reason
