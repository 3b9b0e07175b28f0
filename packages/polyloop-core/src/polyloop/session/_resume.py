"""``resume``: continue a run from its log, by the recovery table.

:func:`polyloop.recovery.plan_resume` decides what the tail of the log needs; :func:`settle`
is the one place that carries the decision out, with the loop's own steps. Before anything is
written it refuses what it cannot settle faithfully (a reply that no longer parses into the
action in doubt, a call the registry now rejects, a policy that is not the tool's), so that no
configuration a resume accepts can make it write a log the library's own rules refuse.
"""

from __future__ import annotations

import time

from polyloop.asking import (
    RunParked,
    UserAnswered,
    UserAsked,
)
from polyloop.errors import (
    CorruptLogError,
    PolyLoopError,
    RunNotFoundError,
    SnapshotMismatchError,
    StaleAskError,
    ToolCallRejected,
)
from polyloop.ports import Action, Event, EventKind, FinalAnswer, RunLog
from polyloop.recovery import (
    ResumeMove,
    ResumePlan,
    model_result_id,
    plan_resume,
    snapshot_facts,
    validate_log,
)
from polyloop.session._deciding import AskHandler
from polyloop.session._definition import AgentDefinition, RunRequest, snapshot_differences
from polyloop.session._follow_up import resumed_request
from polyloop.session._fork import refuse_incomplete_fork
from polyloop.session._gates import DEFAULT_REJECTED_TEMPLATE, ApprovalPolicy
from polyloop.session._loop import (
    _UNGATED,
    DEFAULT_EVENT_TIMEOUT_SECONDS,
    Asking,
    Clock,
    Driver,
    StepEnd,
    check_options,
    edited,
    entry_ids,
    leased,
    refuse_gated,
    run_snapshot,
)
from polyloop.types import (
    Intent,
    IntentKind,
    ModelCallResult,
    RunResult,
    StopReason,
)

__all__ = ["resume", "resume_or_park", "settle"]


async def resume(
    definition: AgentDefinition,
    request: RunRequest,
    *,
    clock: Clock = time.monotonic,
    event_timeout_seconds: float = DEFAULT_EVENT_TIMEOUT_SECONDS,
    lease_wait_seconds: float = 0.0,
) -> RunResult:
    """Continue run ``request.run_id`` from its log, by the recovery table.

    Takes the run's lease first, then reads the log (so it sees everything earlier drivers
    wrote), and holds the lease until it returns or raises; while another driver holds it,
    raises :class:`RunLeaseHeldError` before reading, writing or calling any seam (after
    retrying for up to ``lease_wait_seconds``). Raises :class:`RunNotFoundError` when there is
    no ``RunStarted``, :class:`CorruptLogError` naming the offending record,
    :class:`SnapshotMismatchError` listing every differing parameter. A finished run's recorded
    result is returned without calling any seam.
    """
    check_options(clock, event_timeout_seconds, lease_wait_seconds)
    refuse_gated(request, "resume", "resume_or_park")
    outcome = await leased(
        _continue, definition, request, clock, event_timeout_seconds, lease_wait_seconds, _UNGATED
    )
    assert type(outcome) is RunResult  # an ungated run never parks
    return outcome


async def resume_or_park(
    definition: AgentDefinition,
    request: RunRequest,
    *,
    clock: Clock = time.monotonic,
    event_timeout_seconds: float = DEFAULT_EVENT_TIMEOUT_SECONDS,
    lease_wait_seconds: float = 0.0,
    approval_policy: ApprovalPolicy | None = None,
    rejected_template: str = DEFAULT_REJECTED_TEMPLATE,
    ask_now: AskHandler | None = None,
) -> RunResult | RunParked:
    """``resume``, for a request that may gate actions: continues from the log, carrying out a
    recorded decision, and returns a :class:`RunResult` or a :class:`RunParked` (the run
    still waits, or waits again at a later step). ``approval_policy``, ``rejected_template``
    and ``ask_now`` as for ``run_or_park`` (the first two must be those the run started with:
    the snapshot holds them); a pending ask is put to ``ask_now`` again, first of all.

    Besides the errors of ``resume``, raises :class:`StaleAskError` naming the key when the
    recorded reply now parses into another action than the one asked about (a parser that
    is not deterministic), and :class:`UnsupportedStoreError` for a gated request on a store
    without :class:`~polyloop.ports.UserAsking`.
    """
    check_options(clock, event_timeout_seconds, lease_wait_seconds)
    asking = Asking.of(request, definition, approval_policy, rejected_template, ask_now)
    return await leased(
        _continue, definition, request, clock, event_timeout_seconds, lease_wait_seconds, asking
    )


async def _continue(
    definition: AgentDefinition,
    request: RunRequest,
    clock: Clock,
    event_timeout_seconds: float,
    asking: Asking,
) -> RunResult | RunParked:
    run_id = request.run_id
    log = await definition.store.read_log(run_id)
    if log.started is None:
        raise RunNotFoundError(
            f"Run {run_id!r} has no RunStarted record in this store, so there is nothing to "
            "resume; check the run_id and the store, or start it with run()."
        )
    validate_log(log, run_id)
    refuse_incomplete_fork(log, run_id)
    current = run_snapshot(definition, request, asking.gates)
    differences = snapshot_differences(log.started.parameter_snapshot, current)
    if differences:
        raise SnapshotMismatchError(
            f"Run {run_id!r} was started with other parameters than it is resumed with; "
            "resume only under the exact configuration it started with (or start a new run). "
            "Differences:\n" + "\n".join(differences)
        )
    if log.finished is not None:
        return log.finished.result
    request = await resumed_request(definition.store, request, log.started)

    plan = plan_resume(
        log,
        max_consecutive_parse_failures=request.budget.max_consecutive_parse_failures,
        completing_tools=snapshot_facts(current).completing_tools or (),
    )
    driver = Driver(definition, request, clock, event_timeout_seconds, asking)
    driver.rebuild(log)
    await driver.events.emit(
        Event(
            EventKind.RUN_STARTED,
            run_id,
            plan.next_step,
            resumed=True,
            injection_entry_ids=entry_ids(request),
            parameter_snapshot=log.started.parameter_snapshot,
            resume_move=plan.move.value,
            intent_in_doubt=plan.intent_in_doubt,
        )
    )
    return await driver.drive(settle(driver, plan, log))


async def settle(driver: Driver, plan: ResumePlan, log: RunLog) -> StepEnd:
    """Carry out ``plan`` on the tail of ``log``; the stop reason if the run ends here, else
    ``None`` (the loop then goes on with the next step).

    The one place that acts on the recovery table: a step the log shows begun is finished here
    with the loop's own phases, never announced a second time.
    """
    move = plan.move
    if move is ResumeMove.RECORD_FINISH or move is ResumeMove.STOP_STATE_UNKNOWN:
        # The recovery table decided why the run stops; its plan carries the reason.
        assert plan.stop_reason is not None
        if plan.stop_reason is StopReason.AGENT_FINISHED:
            driver.final_answer = _recorded_final_answer(driver, log)
        return plan.stop_reason
    driver.rebuild_history()
    k = plan.next_step
    if move is ResumeMove.START_STEP:
        return None
    started = driver.clock()
    prompt_chars = driver.prompt.chars
    await driver.events.emit(Event(EventKind.STEP_STARTED, driver.run_id, k))
    if move is ResumeMove.CALL_MODEL_AGAIN:
        assert plan.intent_in_doubt is not None
        driver.replaying = IntentKind.MODEL_CALL
        result = await driver.model_result(k, plan.intent_in_doubt.result_id)
    else:
        assert plan.model_result is not None
        result = plan.model_result
    if move is ResumeMove.REUSE_MODEL_RESULT or move is ResumeMove.CALL_MODEL_AGAIN:
        return await driver.after_result(k, result, prompt_chars, started)
    if move is ResumeMove.WAIT_FOR_DECISION or move is ResumeMove.APPLY_DECISION:
        assert plan.ask is not None
        assert result.reply is not None
        decision, head = driver.interpret(k, result.reply, prompt_chars)
        action = _asked_action(driver, k, decision, plan.ask)
        driver.parse_failures_in_a_row = 0
        if plan.answer is None:
            return await driver.await_decision(k, action, head, started, plan.ask, result)
        return await driver.carry_out(k, action, head, started, plan.answer, result)
    assert move is ResumeMove.EXECUTE_ACTION_AGAIN
    assert plan.intent_in_doubt is not None
    action, completes_run = _action_in_doubt(driver, k, result, plan.intent_in_doubt, plan.answer)
    assert result.reply is not None  # validate_log: an action intent follows a reply
    _, head = driver.interpret(k, result.reply, prompt_chars)
    driver.parse_failures_in_a_row = 0
    driver.replaying = IntentKind.ACTION
    return await driver.execute_announced(k, action, head, started, completes_run, result)


def _asked_action(driver: Driver, k: int, decision: object, ask: UserAsked) -> Action:
    """The action the recorded reply of step ``k`` parses into, refused unless it is exactly
    the one ``ask`` asked about (same arguments, tool digests and policy)."""
    if not isinstance(decision, Action):
        raise PolyLoopError(
            f"Run {driver.run_id!r}, step {k}: the recorded reply once parsed into the action a "
            f"person was asked about, but now parses into {type(decision).__name__}; the "
            "decision parser is not deterministic, so the ask cannot be settled."
        )
    gates = driver.gates
    spec = None
    call = decision.tool_call
    if call is not None:
        spec = driver.request.tools.spec_for(call.name)
    now = None if gates is None else gates.asked(driver.run_id, k, ask.kind, decision, spec)
    for key in ("arguments_sha256", "schema_sha256", "description_sha256", "policy_name"):
        recorded = getattr(ask, key)
        current = None if now is None else getattr(now, key)
        if current != recorded:
            raise StaleAskError(
                f"Run {driver.run_id!r}, step {k}: the action was asked about with {key} "
                f"{recorded!r}, but under this configuration it has {current!r}; the recorded "
                "ask (and any decision on it) is bound to what was shown. Resume with the "
                "configuration the run was asked under.",
                key=key,
            )
    return decision


def _action_in_doubt(
    driver: Driver,
    k: int,
    result: ModelCallResult,
    intent: Intent,
    answered: UserAnswered | None = None,
) -> tuple[Action, bool]:
    """The action the in-doubt intent of step ``k`` announced, read again from the recorded
    reply, and whether its tool completes the run; refuses what cannot be that action."""
    run_id = driver.run_id
    decision = (
        None if result.reply is None else driver.definition.decision_parser.parse(result.reply)
    )
    if decision is None or not isinstance(decision.decision, Action):
        parsed = "nothing" if decision is None else type(decision.decision).__name__
        raise PolyLoopError(
            f"Run {run_id!r}, step {k}: the recorded reply once parsed into an action but now "
            f"parses into {parsed}; the decision parser is not deterministic, so resume cannot "
            "settle the action safely."
        )
    action = decision.decision if answered is None else edited(decision.decision, answered)
    call = action.tool_call
    if call is not None:
        try:
            driver.request.tools.validate(call)
        except ToolCallRejected as rejected:
            raise PolyLoopError(
                f"Run {run_id!r}, step {k}: the action in doubt ({call.name}) is now rejected "
                f"by the tool registry ({rejected}); resume cannot settle it under this "
                "configuration. Resume with the tools the run started with."
            ) from None
    terms = driver.terms_of(call)
    assert terms is not None  # validate() accepted the name
    if terms.replay_policy is not intent.replay_policy:
        what = "a tool-less action" if call is None else f"tool {call.name!r}"
        raise CorruptLogError(
            f"Run {run_id!r}: the log is corrupt — the action intent of step {k} says replay "
            f"policy {intent.replay_policy.value!r}, but its reply calls {what}, whose policy is "
            f"{terms.replay_policy.value!r}. The intent was edited or the parser is not "
            "deterministic; resume refuses to guess whether the action may run again."
        )
    return action, terms.completes_run


def _recorded_final_answer(driver: Driver, log: RunLog) -> str:
    last = log.steps[-1].step.step_idx
    wanted = model_result_id(last)
    for result in log.model_results:
        if result.result_id == wanted and result.reply is not None:
            decision = driver.definition.decision_parser.parse(result.reply).decision
            if isinstance(decision, FinalAnswer):
                return decision.text
    raise PolyLoopError(
        f"Run {driver.run_id!r}: step {last} was recorded as a final answer but its recorded "
        "reply no longer parses into one; the decision parser is not deterministic."
    )
