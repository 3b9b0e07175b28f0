"""The four-state recovery table: what ``resume`` does about the tail of a validated log.

Nothing here calls a seam: the replay policies come from the intents themselves, so the
``polyloop`` command can show what ``resume`` would do.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass, replace
from enum import StrEnum

from polyloop.asking import (
    UserAnswered,
    UserAsked,
)
from polyloop.ports import RunLog
from polyloop.recovery._status import answer_to
from polyloop.recovery._stops import stop_after_step, trailing_parse_failures
from polyloop.recovery._terms import repeated_on_resume
from polyloop.types import (
    Intent,
    IntentKind,
    ModelCallResult,
    StopReason,
)

__all__ = ["ResumeMove", "ResumePlan", "TailState", "plan_resume"]


class TailState(StrEnum):
    """Where a run log ends."""

    #: ``RunFinished`` is recorded.
    FINISHED = "finished"
    #: The last recorded step ended the run, but ``RunFinished`` is missing.
    ENDED_UNRECORDED = "ended_unrecorded"
    #: No intent for the next step: it has not started.
    NOT_STARTED = "not_started"
    #: The next step's model-call intent has no result: the call's state is unknown.
    MODEL_CALL_IN_DOUBT = "model_call_in_doubt"
    #: The next step's model result is recorded and no action intent follows it.
    MODEL_RESULT_RECORDED = "model_result_recorded"
    #: The next step's action intent has no ``StepCompleted``: the action's state is unknown.
    ACTION_IN_DOUBT = "action_in_doubt"
    #: The next step's ``UserAsked`` has no decision: the run is parked (design 0037).
    ASK_PENDING = "ask_pending"
    #: The next step's ask is decided, and nothing of the decision is carried out yet.
    ASK_DECIDED = "ask_decided"


class ResumeMove(StrEnum):
    """What ``resume`` does about the tail."""

    RETURN_RECORDED_RESULT = "return_recorded_result"
    RECORD_FINISH = "record_finish"
    START_STEP = "start_step"
    CALL_MODEL_AGAIN = "call_model_again"
    REUSE_MODEL_RESULT = "reuse_model_result"
    EXECUTE_ACTION_AGAIN = "execute_action_again"
    STOP_STATE_UNKNOWN = "stop_state_unknown"
    #: Park again (or ask in-process): nothing is written, no seam is called.
    WAIT_FOR_DECISION = "wait_for_decision"
    #: Carry the recorded decision out: the approved action's intent and execution, or the
    #: step of a rejection or an answer.
    APPLY_DECISION = "apply_decision"


@dataclass(frozen=True, slots=True)
class ResumePlan:
    """The recovery table's verdict for one log."""

    state: TailState
    move: ResumeMove
    #: The index of the step resume continues with (= number of recorded steps).
    next_step: int
    #: The stop reason for the moves that end the run (recorded, derived, or unknown state).
    stop_reason: StopReason | None
    #: The in-doubt intent when the move depends on a replay policy.
    intent_in_doubt: Intent | None
    #: The recorded model result of the next step, when there is one.
    model_result: ModelCallResult | None
    #: One sentence saying why.
    reason: str
    #: The next step's ``UserAsked``, when it has one.
    ask: UserAsked | None = None
    #: The decision on it, when one is recorded.
    answer: UserAnswered | None = None


def _in_doubt(
    state: TailState,
    intent: Intent,
    next_step: int,
    again: ResumeMove,
    model_result: ModelCallResult | None,
) -> ResumePlan:
    what = "model call" if intent.kind is IntentKind.MODEL_CALL else "action"
    if repeated_on_resume(intent.replay_policy):
        return ResumePlan(
            state,
            again,
            next_step,
            None,
            intent,
            model_result,
            f"The {what} of step {next_step} was announced but never settled; its replay policy "
            f"is 'safe', so it is made again under the same result_id {intent.result_id!r}.",
        )
    return ResumePlan(
        state,
        ResumeMove.STOP_STATE_UNKNOWN,
        next_step,
        StopReason.RESUME_STATE_UNKNOWN,
        intent,
        model_result,
        f"The {what} of step {next_step} was announced but never settled, and its replay policy "
        "is 'never': it may or may not have happened, so the run stops instead of repeating it.",
    )


def plan_resume(
    log: RunLog,
    *,
    max_consecutive_parse_failures: int,
    completing_tools: Collection[str],
) -> ResumePlan:
    """Apply the recovery table to a validated log (see :func:`validate_log`).

    ``completing_tools`` are the names of tools marked ``completes_run``. Nothing here calls a
    seam; the replay policies come from the intents themselves.
    """
    next_step = len(log.steps)
    if log.finished is not None:
        return ResumePlan(
            TailState.FINISHED,
            ResumeMove.RETURN_RECORDED_RESULT,
            next_step,
            log.finished.result.stop_reason,
            None,
            None,
            "The run is finished; resume returns the recorded result and calls nothing.",
        )
    if log.steps:
        last = log.steps[-1].step
        reason = stop_after_step(
            last,
            completes_run=last.tool_name in completing_tools,
            consecutive_parse_failures=trailing_parse_failures([c.step for c in log.steps]),
            max_consecutive_parse_failures=max_consecutive_parse_failures,
        )
        if reason is not None:
            return ResumePlan(
                TailState.ENDED_UNRECORDED,
                ResumeMove.RECORD_FINISH,
                next_step,
                reason,
                None,
                None,
                f"Step {last.step_idx} ended the run ({reason.value}) but RunFinished was not "
                "written; resume writes it and returns.",
            )

    model_intent: Intent | None = None
    action_intent: Intent | None = None
    for intent in log.intents:
        if intent.call_index == next_step:
            if intent.kind is IntentKind.MODEL_CALL:
                model_intent = intent
            else:
                action_intent = intent
    if model_intent is None:
        return ResumePlan(
            TailState.NOT_STARTED,
            ResumeMove.START_STEP,
            next_step,
            None,
            None,
            None,
            f"Nothing of step {next_step} was announced; resume starts it.",
        )
    results: Mapping[str, ModelCallResult] = {r.result_id: r for r in log.model_results}
    model_result = results.get(model_intent.result_id)
    if model_result is None:
        return _in_doubt(
            TailState.MODEL_CALL_IN_DOUBT,
            model_intent,
            next_step,
            ResumeMove.CALL_MODEL_AGAIN,
            None,
        )
    ask = log.asks[-1] if log.asks and log.asks[-1].step == next_step else None
    answer = None if ask is None else answer_to(log, ask)
    if ask is not None and action_intent is None:
        if answer is None:
            what = "approval of" if ask.question is None else "answer to"
            return ResumePlan(
                TailState.ASK_PENDING,
                ResumeMove.WAIT_FOR_DECISION,
                next_step,
                None,
                None,
                model_result,
                f"Step {next_step} waits for a person's {what} its action; resume parks again "
                "until the decision is recorded (approve, edit, reject or answer).",
                ask,
                None,
            )
        return ResumePlan(
            TailState.ASK_DECIDED,
            ResumeMove.APPLY_DECISION,
            next_step,
            None,
            None,
            model_result,
            f"The ask of step {next_step} is decided ({answer.verdict.value}); resume carries "
            "the decision out.",
            ask,
            answer,
        )
    if action_intent is None:
        return ResumePlan(
            TailState.MODEL_RESULT_RECORDED,
            ResumeMove.REUSE_MODEL_RESULT,
            next_step,
            None,
            None,
            model_result,
            f"The model result of step {next_step} is recorded; resume reuses it without calling "
            "the model and interprets it again.",
        )
    plan = _in_doubt(
        TailState.ACTION_IN_DOUBT,
        action_intent,
        next_step,
        ResumeMove.EXECUTE_ACTION_AGAIN,
        model_result,
    )
    return plan if ask is None else replace(plan, ask=ask, answer=answer)
