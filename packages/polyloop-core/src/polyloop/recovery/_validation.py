"""The structural rules of a run log: what no driver of this library can have written.

``resume`` refuses a log that breaks one of them, and ``polyloop verify`` reports it, naming the
first offending record. The rules read a :class:`RunLog`, which groups records by kind; where a
store keeps the order of all writes, :class:`~polyloop.recovery.WriteOrderCheck` checks the
order across kinds while the store reads.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from polyloop.errors import CorruptLogError
from polyloop.ports import RunLog
from polyloop.recovery._ask_rules import check_asks
from polyloop.recovery._result_ids import action_result_id, model_result_id
from polyloop.recovery._stops import (
    SnapshotFacts,
    implied_by_last_step,
    snapshot_facts,
    stop_reasons_allowed,
)
from polyloop.recovery._terms import ActionTerms, action_terms
from polyloop.serialization import READABLE_SCHEMA_VERSIONS
from polyloop.types import (
    ActionOutcome,
    ActionStatus,
    Intent,
    IntentKind,
    ModelCallResult,
    RunFinished,
    StepCompleted,
    StepRecord,
    StopReason,
)

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


@dataclass(slots=True)
class _Index:
    """The intents and results of a log, by step and by result_id, once they passed."""

    facts: SnapshotFacts
    model_intents: dict[int, Intent] = field(default_factory=dict)
    action_intents: dict[int, Intent] = field(default_factory=dict)
    intents_by_result: dict[str, Intent] = field(default_factory=dict)
    results_by_id: dict[str, ModelCallResult] = field(default_factory=dict)

    def tool_terms(self, name: str) -> ActionTerms | None:
        """Tool ``name``'s terms as the run's snapshot records them; ``None`` when it does not
        record its replay policy. (Only the policy is checked against an intent; a snapshot
        that names no completing tools is read as ``completes_run=False``.)"""
        policy = self.facts.tool_replay_policies.get(name)
        if policy is None:
            return None
        completing = self.facts.completing_tools
        return ActionTerms(policy, completes_run=completing is not None and name in completing)


def validate_log(log: RunLog, run_id: str) -> None:
    """Raise :class:`CorruptLogError` naming the first record that breaks a structural rule.

    Rules: every record carries ``run_id``; versioned records carry a readable schema version;
    steps are ``0..n-1`` in order; intents and model results stand in step order (a step's
    model-call intent before its action intent); ``result_id``/``action_outcome`` are set
    together, and the outcome agrees with the step record; a model result has exactly one of
    reply/failure, and agrees with its step (a failure is the step of a failed call, a reply's
    lengths are the step's); every result has an intent of its kind (and of its step); an
    intent's result_id is the one the loop allocates (:func:`model_result_id`); no intent
    is written twice; no intent runs ahead of the next step; every recorded step has its model
    call's intent and result; an action intent of a recorded step is settled by that step, and
    follows a reply; no step begins after a step that ended the run; an intent's replay policy
    is the one the snapshot gives it; a finished log's result carries the
    recorded steps, and a stop reason the records allow (:func:`stop_reasons_allowed`); the
    records of asking a person follow their own rules (``_ask_rules.check_asks``: no decision
    without its ask, one decision per ask, no action intent of a gated action without an
    approval, every decided step carries its decision out).
    """
    started = log.started
    if started is None:
        if log.intents or log.model_results or log.steps or log.finished or log.asks or log.answers:
            raise _corrupt(run_id, "the log", "it has records but no RunStarted")
        return
    if started.run_id != run_id:
        raise _corrupt(run_id, "RunStarted", f"it carries run_id {started.run_id!r}")
    if started.schema_version not in READABLE_SCHEMA_VERSIONS:
        raise _corrupt(
            run_id, "RunStarted", f"schema_version {started.schema_version!r} is not readable"
        )
    index = _Index(snapshot_facts(started.parameter_snapshot))
    _check_intents(log, run_id, index)
    _check_results(log, run_id, index)
    for position, completed in enumerate(log.steps):
        _check_step(log, run_id, index, position, completed)
    check_asks(
        log,
        run_id,
        index.facts,
        index.model_intents,
        index.action_intents,
        index.results_by_id,
        _corrupt,
    )
    _check_tail(log, run_id, index)
    if log.finished is not None:
        _check_finished(log, run_id, index, log.finished)


def _check_intents(log: RunLog, run_id: str, index: _Index) -> None:
    model_call = IntentKind.MODEL_CALL
    model_policy = index.facts.model_replay_policy
    model_intents, action_intents = index.model_intents, index.action_intents
    intents_by_result = index.intents_by_result
    previous_rank = -1
    for position, intent in enumerate(log.intents):
        # The common case in one test, per intent: ranks 2k (model call) and 2k+1 (action) strictly
        # growing also rule out a second intent of a step and kind, and with the allocated
        # result_ids a second use of one; anything else is told apart by _refuse_intent.
        k = intent.call_index
        is_model = intent.kind is model_call
        rank = 2 * k if is_model else 2 * k + 1
        if (
            intent.run_id != run_id
            or rank <= previous_rank
            or intent.result_id != (model_result_id(k) if is_model else action_result_id(k))
            or (is_model and model_policy is not None and intent.replay_policy is not model_policy)
        ):
            _refuse_intent(log, run_id, index, position, intent)
        previous_rank = rank
        (model_intents if is_model else action_intents)[k] = intent
        intents_by_result[intent.result_id] = intent


def _refuse_intent(log: RunLog, run_id: str, index: _Index, position: int, intent: Intent) -> None:
    """Raise for the first rule ``intent`` (at ``position``) breaks, in the rules' order."""
    model_call = IntentKind.MODEL_CALL
    model_policy = index.facts.model_replay_policy
    before = log.intents[position - 1] if position else None
    previous = (
        (-1, 1) if before is None else (before.call_index, int(before.kind is not model_call))
    )
    if intent.run_id != run_id:
        raise _corrupt(
            run_id, _describe_intent(position, intent), f"it carries run_id {intent.run_id!r}"
        )
    is_model = intent.kind is model_call
    by_step = index.model_intents if is_model else index.action_intents
    if intent.call_index in by_step:
        raise _corrupt(
            run_id,
            _describe_intent(position, intent),
            "a second intent of this kind for the same step",
        )
    if intent.result_id in index.intents_by_result:
        raise _corrupt(
            run_id,
            _describe_intent(position, intent),
            "its result_id is already used by another intent",
        )
    allocated = (model_result_id if is_model else action_result_id)(intent.call_index)
    if intent.result_id != allocated:
        raise _corrupt(
            run_id,
            _describe_intent(position, intent),
            f"its result_id is not the one the loop allocates for it ({allocated!r})",
        )
    order = (intent.call_index, 0 if is_model else 1)
    if order <= previous:
        raise _corrupt(
            run_id,
            _describe_intent(position, intent),
            f"it stands after the intents of step {previous[0]}; intents are written in step "
            "order, a step's model call before its action",
        )
    if is_model and model_policy is not None and intent.replay_policy is not model_policy:
        raise _corrupt(
            run_id,
            _describe_intent(position, intent),
            f"its replay_policy {intent.replay_policy.value!r} is not the run's "
            f"model_replay_policy {model_policy.value!r}",
        )
    raise AssertionError("an intent the fast check refused breaks no rule")


def _check_results(log: RunLog, run_id: str, index: _Index) -> None:
    previous_step = -1
    for position, result in enumerate(log.model_results):
        if result.run_id != run_id:
            raise _corrupt(
                run_id, _describe_result(position, result), f"it carries run_id {result.run_id!r}"
            )
        if (result.reply is None) == (result.failure is None):
            raise _corrupt(
                run_id,
                _describe_result(position, result),
                "it must have exactly one of reply and failure",
            )
        announced = index.intents_by_result.get(result.result_id)
        if announced is None or announced.kind is not IntentKind.MODEL_CALL:
            raise _corrupt(
                run_id,
                _describe_result(position, result),
                "no model-call intent has this result_id",
            )
        if result.result_id in index.results_by_id:
            raise _corrupt(
                run_id,
                _describe_result(position, result),
                "a second result for the same model call",
            )
        if announced.call_index <= previous_step:
            raise _corrupt(
                run_id,
                _describe_result(position, result),
                f"it is the result of step {announced.call_index} but stands after the result "
                f"of step {previous_step}; results are written in step order",
            )
        previous_step = announced.call_index
        index.results_by_id[result.result_id] = result


def _check_step(
    log: RunLog, run_id: str, index: _Index, position: int, completed: StepCompleted
) -> None:
    step = completed.step
    if completed.run_id != run_id:
        raise _corrupt(
            run_id, _describe_step(position, step), f"it carries run_id {completed.run_id!r}"
        )
    if step.schema_version not in READABLE_SCHEMA_VERSIONS:
        raise _corrupt(
            run_id,
            _describe_step(position, step),
            f"schema_version {step.schema_version!r} is not readable",
        )
    if step.step_idx != position:
        raise _corrupt(
            run_id,
            _describe_step(position, step),
            f"steps must be numbered 0..n-1 in order; expected {position}",
        )
    outcome = completed.action_outcome
    if (completed.result_id is None) != (outcome is None):
        raise _corrupt(
            run_id,
            _describe_step(position, step),
            "result_id and action_outcome must be set together",
        )
    model_intent = index.model_intents.get(position)
    result = None if model_intent is None else index.results_by_id.get(model_intent.result_id)
    if result is None:
        raise _corrupt(
            run_id, _describe_step(position, step), "its model call has no intent or no result"
        )
    _check_step_against_result(run_id, position, step, result)
    action_intent = index.action_intents.get(position)
    if outcome is None:
        if action_intent is not None:
            raise _corrupt(
                run_id,
                _describe_intent(log.intents.index(action_intent), action_intent),
                "an action intent of a recorded step that the step does not settle",
            )
        if step.action_status is ActionStatus.EXECUTED or (
            step.action_status is ActionStatus.ENV_ERROR
        ):
            raise _corrupt(
                run_id,
                _describe_step(position, step),
                f"it says {step.action_status.value} but records no action outcome",
            )
        return
    if action_intent is None or action_intent.result_id != completed.result_id:
        raise _corrupt(
            run_id,
            _describe_step(position, step),
            "its result_id matches no action intent of the same step",
        )
    if not step.parse_ok:
        raise _corrupt(
            run_id,
            _describe_step(position, step),
            "it records an action outcome, but no action was parsed",
        )
    if (
        step.action_status is not outcome.status
        or step.observation != outcome.observation
        or step.observation_is_synthetic != outcome.observation_is_synthetic
        or step.observation_truncated_chars != outcome.observation_truncated_chars
        or step.env_reported_completion != outcome.env_reported_completion
    ):
        raise _corrupt(run_id, _describe_step(position, step), _outcome_difference(step, outcome))
    terms = action_terms(step.tool_name, index.tool_terms)
    expected = None if terms is None else terms.replay_policy
    if expected is not None and action_intent.replay_policy is not expected:
        tool = "a tool-less action" if step.tool_name is None else f"tool {step.tool_name!r}"
        raise _corrupt(
            run_id,
            _describe_intent(log.intents.index(action_intent), action_intent),
            f"its replay_policy {action_intent.replay_policy.value!r} is not the policy of "
            f"{tool} ({expected.value!r})",
        )


def _check_step_against_result(
    run_id: str, position: int, step: StepRecord, result: ModelCallResult
) -> None:
    """A failed call becomes the step of a failed call; a reply's lengths are the step's."""
    failed_call_step = not step.parse_ok and step.parse_error is None
    reply = result.reply
    if reply is None:
        if not failed_call_step:
            raise _corrupt(
                run_id,
                _describe_step(position, step),
                "its model call failed, but it is not a failed call's step",
            )
        return
    if failed_call_step:
        raise _corrupt(
            run_id,
            _describe_step(position, step),
            "it is a failed call's step, but its model call has a reply",
        )
    if step.content_chars != len(reply.content) or step.thinking_chars != len(reply.thinking):
        raise _corrupt(
            run_id,
            _describe_step(position, step),
            "its content_chars/thinking_chars are not the lengths of its reply",
        )


def _outcome_difference(step: StepRecord, outcome: ActionOutcome) -> str:
    for name, recorded in (
        ("action_status", outcome.status),
        ("observation", outcome.observation),
        ("observation_is_synthetic", outcome.observation_is_synthetic),
        ("observation_truncated_chars", outcome.observation_truncated_chars),
        ("env_reported_completion", outcome.env_reported_completion),
    ):
        if getattr(step, name) != recorded:
            return f"its {name} is not the one its action_outcome records"
    return "it differs from its action_outcome"


def _check_tail(log: RunLog, run_id: str, index: _Index) -> None:
    next_step = len(log.steps)
    for position, intent in enumerate(log.intents):
        if intent.call_index > next_step:
            raise _corrupt(
                run_id,
                _describe_intent(position, intent),
                f"it runs ahead of the next step ({next_step})",
            )
    tail_model = index.model_intents.get(next_step)
    tail_action = index.action_intents.get(next_step)
    if tail_action is not None:
        tail_result = None if tail_model is None else index.results_by_id.get(tail_model.result_id)
        if tail_result is None:
            raise _corrupt(
                run_id,
                _describe_intent(log.intents.index(tail_action), tail_action),
                "an action intent before its step's model call has a result",
            )
        if tail_result.reply is None:
            raise _corrupt(
                run_id,
                _describe_intent(log.intents.index(tail_action), tail_action),
                "an action intent after its step's model call failed",
            )
    if (
        tail_model is not None
        and log.steps
        and None
        not in implied_by_last_step([completed.step for completed in log.steps], index.facts)
    ):
        raise _corrupt(
            run_id,
            _describe_intent(log.intents.index(tail_model), tail_model),
            f"it begins step {next_step}, but step {next_step - 1} ended the run",
        )


def _check_finished(log: RunLog, run_id: str, index: _Index, finished: RunFinished) -> None:
    result = finished.result
    if finished.run_id != run_id or result.run_id != run_id:
        raise _corrupt(run_id, "RunFinished", "it carries another run_id")
    if result.schema_version not in READABLE_SCHEMA_VERSIONS:
        raise _corrupt(run_id, "RunFinished", "its result's schema_version is not readable")
    recorded = tuple(completed.step for completed in log.steps)
    if result.steps != recorded and not (
        # A step's write can land after a cancellation stopped waiting for it, so the result
        # of a cancelled run may lack the last recorded step.
        result.stop_reason is StopReason.CANCELLED and result.steps == recorded[:-1]
    ):
        raise _corrupt(run_id, "RunFinished", _steps_difference(result.steps, recorded))
    next_step = len(recorded)
    model_intent = index.model_intents.get(next_step)
    action_intent = index.action_intents.get(next_step)
    in_doubt = action_intent
    if model_intent is not None and model_intent.result_id not in index.results_by_id:
        in_doubt = model_intent
    allowed = stop_reasons_allowed(
        recorded,
        step_begun=model_intent is not None,
        in_doubt_policy=None if in_doubt is None else in_doubt.replay_policy,
        facts=index.facts,
    )
    if result.stop_reason not in allowed:
        names = ", ".join(sorted(reason.value for reason in allowed))
        raise _corrupt(
            run_id,
            "RunFinished",
            f"its stop_reason {result.stop_reason.value!r} is not one the records allow ({names})",
        )


def _steps_difference(written: tuple[StepRecord, ...], recorded: tuple[StepRecord, ...]) -> str:
    if len(written) != len(recorded):
        return (
            f"its result holds {len(written)} steps where {len(recorded)} StepCompleted records "
            "stand"
        )
    for position, (mine, theirs) in enumerate(zip(written, recorded, strict=True)):
        if mine != theirs:
            differing = next(
                (
                    name
                    for name in StepRecord.__dataclass_fields__
                    if getattr(mine, name) != getattr(theirs, name)
                ),
                "?",
            )
            return (
                f"step {position} of its result differs from StepCompleted #{position} "
                f"(field {differing})"
            )
    return "its result's steps differ from the recorded ones"
