"""``resume``: continue a run from its log, by the recovery table.

:func:`polyloop.recovery.plan_resume` decides what the tail of the log needs; :func:`settle`
is the one place that carries the decision out, with the loop's own steps. Before anything is
written it refuses what it cannot settle faithfully (a reply that no longer parses into the
action in doubt, a call the registry now rejects, a policy that is not the tool's), so that no
configuration a resume accepts can make it write a log the library's own rules refuse.
"""

from __future__ import annotations

import time

from polyloop.errors import (
    CorruptLogError,
    PolyLoopError,
    RunNotFoundError,
    SnapshotMismatchError,
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
from polyloop.session._definition import AgentDefinition, RunRequest, snapshot_differences
from polyloop.session._follow_up import resumed_request
from polyloop.session._loop import (
    DEFAULT_EVENT_TIMEOUT_SECONDS,
    Clock,
    Driver,
    check_options,
    entry_ids,
    leased,
    run_snapshot,
)
from polyloop.types import Intent, ModelCallResult, ReplayPolicy, RunResult, StopReason

__all__ = ["resume", "settle"]


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
    return await leased(
        _continue, definition, request, clock, event_timeout_seconds, lease_wait_seconds
    )


async def _continue(
    definition: AgentDefinition,
    request: RunRequest,
    clock: Clock,
    event_timeout_seconds: float,
) -> RunResult:
    run_id = request.run_id
    log = await definition.store.read_log(run_id)
    if log.started is None:
        raise RunNotFoundError(
            f"Run {run_id!r} has no RunStarted record in this store, so there is nothing to "
            "resume; check the run_id and the store, or start it with run()."
        )
    validate_log(log, run_id)
    current = run_snapshot(definition, request)
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
    driver = Driver(definition, request, clock, event_timeout_seconds)
    driver.rebuild(log)
    await driver.events.emit(
        Event(
            EventKind.RUN_STARTED,
            run_id,
            plan.next_step,
            resumed=True,
            injection_entry_ids=entry_ids(request),
        )
    )
    return await driver.drive(settle(driver, plan, log))


async def settle(driver: Driver, plan: ResumePlan, log: RunLog) -> StopReason | None:
    """Carry out ``plan`` on the tail of ``log``; the stop reason if the run ends here, else
    ``None`` (the loop then goes on with the next step).

    The one place that acts on the recovery table: a step the log shows begun is finished here
    with the loop's own phases, never announced a second time.
    """
    move = plan.move
    if move is ResumeMove.RECORD_FINISH:
        assert plan.stop_reason is not None
        if plan.stop_reason is StopReason.AGENT_FINISHED:
            driver.final_answer = _recorded_final_answer(driver, log)
        return plan.stop_reason
    if move is ResumeMove.STOP_STATE_UNKNOWN:
        return StopReason.RESUME_STATE_UNKNOWN
    driver.rebuild_history()
    k = plan.next_step
    if move is ResumeMove.START_STEP:
        return None
    started = driver.clock()
    prompt_chars = driver.prompt.chars
    await driver.events.emit(Event(EventKind.STEP_STARTED, driver.run_id, k))
    if move is ResumeMove.CALL_MODEL_AGAIN:
        assert plan.intent_in_doubt is not None
        result = await driver.model_result(k, plan.intent_in_doubt.result_id)
    else:
        assert plan.model_result is not None
        result = plan.model_result
    if move is ResumeMove.REUSE_MODEL_RESULT or move is ResumeMove.CALL_MODEL_AGAIN:
        return await driver.after_result(k, result, prompt_chars, started)
    assert move is ResumeMove.EXECUTE_ACTION_AGAIN
    assert plan.intent_in_doubt is not None
    action, completes_run = _action_in_doubt(driver, k, result, plan.intent_in_doubt)
    assert result.reply is not None  # validate_log: an action intent follows a reply
    _, head = driver.interpret(k, result.reply, prompt_chars)
    driver.parse_failures_in_a_row = 0
    return await driver.execute_announced(k, action, head, started, completes_run)


def _action_in_doubt(
    driver: Driver, k: int, result: ModelCallResult, intent: Intent
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
    action = decision.decision
    call = action.tool_call
    if call is None:
        policy, completes_run, what = ReplayPolicy.NEVER, False, "a tool-less action"
    else:
        tools = driver.request.tools
        try:
            tools.validate(call)
        except ToolCallRejected as rejected:
            raise PolyLoopError(
                f"Run {run_id!r}, step {k}: the action in doubt ({call.name}) is now rejected "
                f"by the tool registry ({rejected}); resume cannot settle it under this "
                "configuration. Resume with the tools the run started with."
            ) from None
        spec = tools.spec_for(call.name)
        assert spec is not None  # validate() accepted the name
        policy, completes_run, what = spec.replay_policy, spec.completes_run, f"tool {call.name!r}"
    if policy is not intent.replay_policy:
        raise CorruptLogError(
            f"Run {run_id!r}: the log is corrupt — the action intent of step {k} says replay "
            f"policy {intent.replay_policy.value!r}, but its reply calls {what}, whose policy is "
            f"{policy.value!r}. The intent was edited or the parser is not deterministic; resume "
            "refuses to guess whether the action may run again."
        )
    return action, completes_run


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
