"""The structural rules of a run log: what no driver of this library can have written.

``resume`` refuses a log that breaks one of them, and ``polyloop verify`` reports it, naming the
first offending record.
"""

from __future__ import annotations

from polyloop.errors import CorruptLogError
from polyloop.ports import RunLog
from polyloop.serialization import READABLE_SCHEMA_VERSIONS
from polyloop.types import Intent, IntentKind, ModelCallResult, StepRecord

__all__ = ["validate_log"]


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
