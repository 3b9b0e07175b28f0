"""The structural rules of the records of a run that asks a person (design 0037).

Called by :func:`~polyloop.recovery.validate_log` once intents and results passed. A log
without ``UserAsked``/``UserAnswered`` records only has to show that no gated tool ran unasked.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from polyloop.asking import (
    AskKind,
    UserAnswered,
    UserAsked,
    Verdict,
)
from polyloop.errors import CorruptLogError
from polyloop.ports import RunLog
from polyloop.recovery._stops import SnapshotFacts
from polyloop.types import (
    ActionStatus,
    Intent,
    ModelCallResult,
    StepCompleted,
)

__all__ = ["check_asks"]

Corrupt = Callable[[str, str, str], CorruptLogError]

_APPROVING = (Verdict.APPROVE, Verdict.EDIT)
_VERDICTS_OF: Mapping[AskKind, tuple[Verdict, ...]] = {
    AskKind.APPROVAL: (Verdict.APPROVE, Verdict.EDIT, Verdict.REJECT),
    AskKind.QUESTION: (Verdict.ANSWER,),
}


def _ask(position: int, ask: UserAsked) -> str:
    return f"UserAsked #{position} (step={ask.step})"


def _answer(position: int, answer: UserAnswered) -> str:
    return f"UserAnswered #{position} (step={answer.step})"


def check_asks(
    log: RunLog,
    run_id: str,
    facts: SnapshotFacts,
    model_intents: Mapping[int, Intent],
    action_intents: Mapping[int, Intent],
    results_by_id: Mapping[str, ModelCallResult],
    corrupt: Corrupt,
) -> None:
    """Raise :class:`CorruptLogError` for the first ask, decision, action intent or step that
    breaks a rule of asking: an ask ahead of its step or without its step's reply, a decision
    without its ask, a second decision for one ask, a decision bound to other arguments or of
    the wrong kind, an action intent of a gated action without an approval, a step that does
    not carry out its decision."""
    gated_tools = facts.approval_tools | facts.question_tools
    if not log.asks and not log.answers and not gated_tools:
        return
    next_step = len(log.steps)
    asks: dict[int, UserAsked] = {}
    previous = -1
    for position, ask in enumerate(log.asks):
        where = _ask(position, ask)
        if ask.run_id != run_id:
            raise corrupt(run_id, where, f"it carries run_id {ask.run_id!r}")
        if ask.step <= previous:
            raise corrupt(
                run_id,
                where,
                f"it stands after the ask of step {previous}; one ask per step, in step order",
            )
        if ask.step > next_step:
            raise corrupt(run_id, where, f"it runs ahead of the next step ({next_step})")
        intent = model_intents.get(ask.step)
        result = None if intent is None else results_by_id.get(intent.result_id)
        if result is None or result.reply is None:
            raise corrupt(
                run_id, where, "its step has no model reply, so no action was there to ask about"
            )
        previous = ask.step
        asks[ask.step] = ask
    answers: dict[int, UserAnswered] = {}
    for position, answer in enumerate(log.answers):
        where = _answer(position, answer)
        if answer.run_id != run_id:
            raise corrupt(run_id, where, f"it carries run_id {answer.run_id!r}")
        asked = asks.get(answer.step)
        if asked is None:
            raise corrupt(run_id, where, "a UserAnswered without the UserAsked it decides")
        if answer.step in answers:
            raise corrupt(run_id, where, "a second decision for one ask (decisions are once only)")
        if answer.arguments_sha256 != asked.arguments_sha256:
            raise corrupt(
                run_id, where, "its arguments_sha256 is not the one of the ask it decides"
            )
        if answer.verdict not in _VERDICTS_OF[asked.kind]:
            raise corrupt(
                run_id,
                where,
                f"verdict {answer.verdict.value!r} cannot decide a {asked.kind.value} ask",
            )
        if answer.verdict is Verdict.EDIT and asked.tool_name is None:
            raise corrupt(
                run_id, where, "an edit of a tool-less action (only calls have arguments)"
            )
        answers[answer.step] = answer
    for step, intent in action_intents.items():
        asked = asks.get(step)
        if asked is None:
            tool = log.steps[step].step.tool_name if step < next_step else None
            if tool is None or tool not in gated_tools:
                continue
        decided = answers.get(step)
        if decided is None or decided.verdict not in _APPROVING:
            raise corrupt(
                run_id,
                f"the action intent of step {step} ({intent.result_id!r})",
                "an action intent of a gated action without a recorded approval",
            )
    for completed in log.steps:
        _check_decided_step(run_id, completed, asks, answers, facts, corrupt)


def _check_decided_step(
    run_id: str,
    completed: StepCompleted,
    asks: Mapping[int, UserAsked],
    answers: Mapping[int, UserAnswered],
    facts: SnapshotFacts,
    corrupt: Corrupt,
) -> None:
    step = completed.step
    where = f"StepCompleted #{step.step_idx} (step_idx={step.step_idx})"
    asked = asks.get(step.step_idx)
    if asked is None:
        if (
            step.tool_name in facts.question_tools
            and step.action_status is not ActionStatus.NOT_EXECUTED
        ):
            raise corrupt(run_id, where, "a question to the user recorded without its UserAsked")
        return
    answer = answers.get(step.step_idx)
    if answer is None:
        raise corrupt(run_id, where, "its step asked a person, but no decision is recorded")
    if step.action != asked.action or step.tool_name != asked.tool_name:
        raise corrupt(
            run_id, where, "it records another action than the one its UserAsked asked about"
        )
    verdict = answer.verdict
    if verdict in _APPROVING:
        wanted = asked.arguments_json if verdict is Verdict.APPROVE else answer.arguments_json
        if completed.action_outcome is None or step.tool_arguments != wanted:
            raise corrupt(
                run_id, where, f"it does not record the {verdict.value}d action's execution"
            )
        return
    if completed.action_outcome is not None:
        raise corrupt(run_id, where, f"it records an execution, but the ask was {verdict.value}ed")
    if verdict is Verdict.ANSWER:
        if step.observation != answer.answer or step.action_status is not None:
            raise corrupt(run_id, where, "its observation is not the user's recorded answer")
        return
    template = facts.rejected_template
    assert answer.reason is not None
    if step.action_status is not ActionStatus.NOT_EXECUTED or (
        template is not None and step.observation != template.replace("{reason}", answer.reason)
    ):
        raise corrupt(run_id, where, "it is not the NOT_EXECUTED step of the recorded rejection")
