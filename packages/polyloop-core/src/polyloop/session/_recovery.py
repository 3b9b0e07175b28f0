"""Reading a run log back: structural validation and the four-state recovery table.

Both live here, once. ``resume`` uses them to decide what to do; the ``polyloop`` command uses
them to show what ``resume`` would do, without calling any seam.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum

from polyloop.errors import CorruptLogError
from polyloop.ports import RunLog
from polyloop.serialization import READABLE_SCHEMA_VERSIONS
from polyloop.types import (
    ActionStatus,
    Intent,
    IntentKind,
    ModelCallResult,
    ReplayPolicy,
    StepRecord,
    StopReason,
)

__all__ = [
    "ResumeMove",
    "ResumePlan",
    "TailState",
    "action_result_id",
    "model_result_id",
    "plan_resume",
    "stop_after_step",
    "validate_log",
]


def model_result_id(call_index: int) -> str:
    """The result id of step ``call_index``'s model call: deterministic, so a replay reuses it."""
    return f"model-{call_index}"


def action_result_id(call_index: int) -> str:
    """The result id of step ``call_index``'s action."""
    return f"action-{call_index}"


# ---------------------------------------------------------------------------
# Which step ends a run
# ---------------------------------------------------------------------------


def is_parse_failure(step: StepRecord) -> bool:
    """A step whose reply could not be read (not a failed model call, which has no parse_error)."""
    return not step.parse_ok and step.parse_error is not None


def stop_after_step(
    step: StepRecord,
    *,
    completes_run: bool,
    consecutive_parse_failures: int,
    max_consecutive_parse_failures: int,
) -> StopReason | None:
    """The stop reason a just-recorded step implies, or ``None`` when the run goes on.

    Used by the live loop after every step and by ``resume`` on the last recorded step, so both
    derive the same reason from the same record.
    """
    if not step.parse_ok and step.parse_error is None:
        return StopReason.LLM_ERROR
    if step.action_status is ActionStatus.ENV_ERROR:
        return StopReason.ENV_ERROR
    if step.action_status is ActionStatus.EXECUTED and (
        step.env_reported_completion or completes_run
    ):
        return StopReason.TASK_COMPLETED
    if step.parse_ok and step.action is None:
        return StopReason.AGENT_FINISHED
    if is_parse_failure(step) and consecutive_parse_failures >= max_consecutive_parse_failures:
        return StopReason.PARSE_FAILED_REPEATEDLY
    return None


def trailing_parse_failures(steps: Sequence[StepRecord]) -> int:
    count = 0
    for step in reversed(steps):
        if not is_parse_failure(step):
            break
        count += 1
    return count


# ---------------------------------------------------------------------------
# Structural validation
# ---------------------------------------------------------------------------


def _corrupt(run_id: str, record: str, rule: str) -> CorruptLogError:
    return CorruptLogError(
        f"Run {run_id!r}: the log is corrupt — {record}: {rule}. resume refuses to continue "
        "from a corrupt log; inspect it (e.g. `polyloop verify`) and start a new run_id."
    )


def _describe_intent(index: int, intent: Intent) -> str:
    return (
        f"Intent #{index} (kind={intent.kind.value}, call_index={intent.call_index}, "
        f"result_id={intent.result_id!r})"
    )


def _describe_result(index: int, result: ModelCallResult) -> str:
    return f"ModelCallResult #{index} (result_id={result.result_id!r})"


def _describe_step(index: int, step: StepRecord) -> str:
    return f"StepCompleted #{index} (step_idx={step.step_idx})"


def validate_log(log: RunLog, run_id: str) -> None:
    """Raise :class:`CorruptLogError` naming the first record that breaks a structural rule.

    Rules: every record carries ``run_id``; versioned records carry a readable schema version;
    steps are ``0..n-1`` in order; ``result_id``/``action_outcome`` are set together; a model
    result has exactly one of reply/failure; every result has an intent of its kind (and of its
    step); no intent is written twice; no intent runs ahead of the next step; every recorded
    step has its model call's intent and result; an action intent of a recorded step is settled
    by that step.
    """
    if log.started is None:
        if log.intents or log.model_results or log.steps or log.finished:
            raise _corrupt(run_id, "the log", "it has records but no RunStarted")
        return
    if log.started.run_id != run_id:
        raise _corrupt(run_id, "RunStarted", f"it carries run_id {log.started.run_id!r}")
    if log.started.schema_version not in READABLE_SCHEMA_VERSIONS:
        raise _corrupt(
            run_id, "RunStarted", f"schema_version {log.started.schema_version!r} is not readable"
        )

    model_intents: dict[int, Intent] = {}
    action_intents: dict[int, Intent] = {}
    intents_by_result: dict[str, Intent] = {}
    model_call = IntentKind.MODEL_CALL
    for index, intent in enumerate(log.intents):
        if intent.run_id != run_id:
            raise _corrupt(
                run_id, _describe_intent(index, intent), f"it carries run_id {intent.run_id!r}"
            )
        by_step = model_intents if intent.kind is model_call else action_intents
        if intent.call_index in by_step:
            raise _corrupt(
                run_id,
                _describe_intent(index, intent),
                "a second intent of this kind for the same step",
            )
        if intent.result_id in intents_by_result:
            raise _corrupt(
                run_id,
                _describe_intent(index, intent),
                "its result_id is already used by another intent",
            )
        by_step[intent.call_index] = intent
        intents_by_result[intent.result_id] = intent

    results_by_id: dict[str, ModelCallResult] = {}
    for index, result in enumerate(log.model_results):
        if result.run_id != run_id:
            raise _corrupt(
                run_id, _describe_result(index, result), f"it carries run_id {result.run_id!r}"
            )
        if (result.reply is None) == (result.failure is None):
            raise _corrupt(
                run_id,
                _describe_result(index, result),
                "it must have exactly one of reply and failure",
            )
        announced = intents_by_result.get(result.result_id)
        if announced is None or announced.kind is not model_call:
            raise _corrupt(
                run_id, _describe_result(index, result), "no model-call intent has this result_id"
            )
        if result.result_id in results_by_id:
            raise _corrupt(
                run_id, _describe_result(index, result), "a second result for the same model call"
            )
        results_by_id[result.result_id] = result

    for index, completed in enumerate(log.steps):
        step = completed.step
        if completed.run_id != run_id:
            raise _corrupt(
                run_id, _describe_step(index, step), f"it carries run_id {completed.run_id!r}"
            )
        if step.schema_version not in READABLE_SCHEMA_VERSIONS:
            raise _corrupt(
                run_id,
                _describe_step(index, step),
                f"schema_version {step.schema_version!r} is not readable",
            )
        if step.step_idx != index:
            raise _corrupt(
                run_id,
                _describe_step(index, step),
                f"steps must be numbered 0..n-1 in order; expected {index}",
            )
        if (completed.result_id is None) != (completed.action_outcome is None):
            raise _corrupt(
                run_id,
                _describe_step(index, step),
                "result_id and action_outcome must be set together",
            )
        model_intent = model_intents.get(index)
        if model_intent is None or model_intent.result_id not in results_by_id:
            raise _corrupt(
                run_id, _describe_step(index, step), "its model call has no intent or no result"
            )
        action_intent = action_intents.get(index)
        if completed.result_id is not None:
            if action_intent is None or action_intent.result_id != completed.result_id:
                raise _corrupt(
                    run_id,
                    _describe_step(index, step),
                    "its result_id matches no action intent of the same step",
                )
        elif action_intent is not None:
            unsettled = action_intent
            raise _corrupt(
                run_id,
                _describe_intent(log.intents.index(unsettled), unsettled),
                "an action intent of a recorded step that the step does not settle",
            )

    next_step = len(log.steps)
    for index, intent in enumerate(log.intents):
        if intent.call_index > next_step:
            raise _corrupt(
                run_id,
                _describe_intent(index, intent),
                f"it runs ahead of the next step ({next_step})",
            )
    tail_action = action_intents.get(next_step)
    if tail_action is not None:
        tail_model = model_intents.get(next_step)
        if tail_model is None or tail_model.result_id not in results_by_id:
            raise _corrupt(
                run_id,
                _describe_intent(log.intents.index(tail_action), tail_action),
                "an action intent before its step's model call has a result",
            )

    if log.finished is not None:
        if log.finished.run_id != run_id or log.finished.result.run_id != run_id:
            raise _corrupt(run_id, "RunFinished", "it carries another run_id")
        if log.finished.result.schema_version not in READABLE_SCHEMA_VERSIONS:
            raise _corrupt(run_id, "RunFinished", "its result's schema_version is not readable")


# ---------------------------------------------------------------------------
# The four-state table
# ---------------------------------------------------------------------------


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


class ResumeMove(StrEnum):
    """What ``resume`` does about the tail."""

    RETURN_RECORDED_RESULT = "return_recorded_result"
    RECORD_FINISH = "record_finish"
    START_STEP = "start_step"
    CALL_MODEL_AGAIN = "call_model_again"
    REUSE_MODEL_RESULT = "reuse_model_result"
    EXECUTE_ACTION_AGAIN = "execute_action_again"
    STOP_STATE_UNKNOWN = "stop_state_unknown"


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


def _in_doubt(
    state: TailState,
    intent: Intent,
    next_step: int,
    again: ResumeMove,
    model_result: ModelCallResult | None,
) -> ResumePlan:
    what = "model call" if intent.kind is IntentKind.MODEL_CALL else "action"
    if intent.replay_policy is ReplayPolicy.SAFE:
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
    return _in_doubt(
        TailState.ACTION_IN_DOUBT,
        action_intent,
        next_step,
        ResumeMove.EXECUTE_ACTION_AGAIN,
        model_result,
    )
