"""The step a run started and did not finish, read for ``polyloop view`` (designs 0048, 0061).

An unfinished step leaves intents (and often the model's reply, and an ask) but no
``StepCompleted``, so its tool and arguments are not in a step record. Where it stands is the
recovery table's reading of the log (:func:`polyloop.recovery.plan_resume`, through
:func:`~polyloop_cli.rendering.inspection.plan_report`); for a finished run, the same table applied to the
log without its ``RunFinished``: the state the run stopped on. The action comes from what the
log holds, in this order: the ask of the step (its tool and canonical arguments, exactly what a
person is asked to decide; an edit's arguments when the decision edited them), else the
recorded reply read by the run's own decision parser — the agent's when ``view --agent`` built
it, else one polyloop ships whose parameters are exactly those the snapshot recorded. When none
fits, the page says the action is in the reply and not in the log.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass

from polyloop.asking import AskKind, UserAnswered, UserAsked, Verdict
from polyloop.ports import Action, DecisionParser, FinalAnswer, RunLog
from polyloop.recovery import ResumeMove, TailState
from polyloop.testing import LineDecisionParser
from polyloop.tools import canonical_arguments
from polyloop.types import Intent, IntentKind, ModelCallResult, ModelReply
from polyloop_cli.rendering.inspection import plan_report

__all__ = ["PendingStep", "pending_step", "shipped_parser"]

#: The snapshot's prefix of the decision parser's parameters.
PARSER_PREFIX = "decision_parser."


@dataclass(frozen=True, slots=True)
class PendingStep:
    """The step after the last recorded one, announced and never completed, in words."""

    step: int
    #: Where it stands, in words ("waiting for approval since …", "may or may not have run").
    state: str
    #: What resume does (or did) about it, from the recovery table.
    detail: str
    #: ``waiting``, ``decided`` or ``doubt``: the page's colour for it.
    kind: str
    reply: ModelReply | None
    #: The recorded failure of the step's model call, when it failed.
    failure: str | None
    tool_name: str | None
    #: The call's arguments as canonical JSON (``None`` without a tool call).
    arguments: str | None
    #: The action's text for a tool-less action (code).
    action: str | None
    #: Where the action shown comes from, or why none is shown.
    source: str
    intents: tuple[Intent, ...]
    ask: UserAsked | None
    answer: UserAnswered | None


def shipped_parser(snapshot: Mapping[str, str]) -> DecisionParser | None:
    """The decision parser polyloop ships whose parameters are exactly the snapshot's
    ``decision_parser.*`` keys, built as the run built it; ``None`` when no shipped one is."""
    recorded = {
        key.removeprefix(PARSER_PREFIX): value
        for key, value in snapshot.items()
        if key.startswith(PARSER_PREFIX)
    }
    kind = recorded.get("kind")
    candidates: list[DecisionParser] = []
    if kind == "line_protocol":
        candidates.append(LineDecisionParser())
    elif kind == "tool_call_text":
        from polyloop.adapters.tool_calls import ToolCallReplyParser

        candidates += [
            ToolCallReplyParser(plain_text_is_final_answer=True),
            ToolCallReplyParser(plain_text_is_final_answer=False),
        ]
    elif kind == "first_code_block" and "final_marker" in recorded:
        from polyloop.adapters.container import FirstCodeBlockParser

        candidates.append(FirstCodeBlockParser(recorded["final_marker"]))
    for parser in candidates:
        if dict(parser.parameters()) == recorded:
            return parser
    return None


def _state(
    state: TailState,
    move: ResumeMove,
    ask: UserAsked | None,
    answer: UserAnswered | None,
    intent: Intent | None,
) -> tuple[str, str]:
    """(kind, words) for where the step stands."""
    if state is TailState.ASK_PENDING:
        assert ask is not None
        if ask.kind is AskKind.QUESTION:
            return "waiting", f"waiting for an answer since {ask.asked_at}"
        return "waiting", f"waiting for approval since {ask.asked_at}"
    if state is TailState.ASK_DECIDED:
        assert answer is not None
        who = f" by {answer.decided_by}" if answer.decided_by else ""
        return "decided", (
            f"decided ({answer.verdict.value}{who} at {answer.decided_at}); the decision is "
            "not carried out yet"
        )
    if state is TailState.ACTION_IN_DOUBT:
        assert intent is not None
        again = "" if move is ResumeMove.STOP_STATE_UNKNOWN else "; resume runs it again"
        return "doubt", (
            f"announced and never settled: the action may or may not have run (replay "
            f"policy {intent.replay_policy.value}){again}"
        )
    if state is TailState.MODEL_CALL_IN_DOUBT:
        return "doubt", (
            "announced and never settled: the model call may or may not have reached the model; "
            "no reply is recorded"
        )
    if state is TailState.MODEL_RESULT_RECORDED:
        return "doubt", "the model call's result is recorded; nothing after it was announced"
    return "doubt", f"announced, never completed ({state.value})"


def _from_parser(
    reply: ModelReply, parser: DecisionParser | None, described: str
) -> tuple[str | None, str | None, str | None, str]:
    """(tool, arguments, action text, source) as the run's parser reads ``reply``."""
    if parser is None:
        return None, None, None, described
    try:
        decision = parser.parse(reply).decision
    except Exception as error:  # a user's parser that raises: said, not fatal to the page
        return None, None, None, f"the run's decision parser raised reading the reply: {error}"
    source = f"read from the reply by {described}"
    if isinstance(decision, Action):
        if decision.tool_call is not None:
            call = decision.tool_call
            return call.name, canonical_arguments(call.arguments), decision.text, source
        return None, None, decision.text, source
    if isinstance(decision, FinalAnswer):
        return None, None, None, f"{source}: a final answer, no action"
    return None, None, None, f"{source}: no decision ({decision.explanation})"


def pending_step(
    log: RunLog, parser: DecisionParser | None = None, parser_name: str | None = None
) -> PendingStep | None:
    """The step after the last recorded one when it was announced, in words; else ``None``.

    ``parser``: the run's own decision parser, when the caller has it (``parser_name`` says
    whose); otherwise a shipped one is chosen from the snapshot (:func:`shipped_parser`).
    """
    next_step = len(log.steps)
    intents = tuple(intent for intent in log.intents if intent.call_index == next_step)
    if not intents:
        return None
    # The recovery table's own reading; a finished run is read as it stood when it stopped.
    standing = log if log.finished is None else dataclasses.replace(log, finished=None)
    plan = plan_report(standing).plan
    action_intent = next((i for i in intents if i.kind is IntentKind.ACTION), None)
    kind, state = _state(plan.state, plan.move, plan.ask, plan.answer, plan.intent_in_doubt)
    detail = plan.reason
    if log.finished is not None:
        stop = log.finished.result.stop_reason.value
        detail = (
            f"The run stopped ({stop}) with this step unfinished; resume did not and will not "
            "carry it further."
            + (
                " Its replay policy is never, so it was not run again: it may or may not have "
                "happened."
                if plan.move is ResumeMove.STOP_STATE_UNKNOWN
                else ""
            )
        )
    results: Mapping[str, ModelCallResult] = {r.result_id: r for r in log.model_results}
    model_intent = next((i for i in intents if i.kind is IntentKind.MODEL_CALL), None)
    result = None if model_intent is None else results.get(model_intent.result_id)
    reply = None if result is None else result.reply
    failure = None if result is None else result.failure
    ask, answer = plan.ask, plan.answer
    tool_name = arguments = action = None
    if ask is not None:
        tool_name, arguments, action = ask.tool_name, ask.arguments_json, ask.action
        source = "the ask of this step (what a person is asked to decide)"
        if answer is not None and answer.verdict is Verdict.EDIT:
            arguments = answer.arguments_json
            source = "the ask of this step, with the arguments the decision edited"
    elif reply is not None:
        if parser is not None:
            described = f"the agent's decision parser ({parser_name or 'from --agent'})"
        else:
            snapshot = log.started.parameter_snapshot if log.started else {}
            parser = shipped_parser(snapshot)
            kind_key = snapshot.get(f"{PARSER_PREFIX}kind", "not recorded")
            described = (
                f"the run's decision parser ({kind_key}, as its snapshot records it)"
                if parser is not None
                else (
                    f"not in the log: the run's decision parser ({kind_key}) reads them from the "
                    "reply above, and it is not one polyloop ships; `polyloop view RUN --agent "
                    "MODULE:FACTORY` reads the reply with the agent's own parser"
                )
            )
        if action_intent is None and plan.state is not TailState.MODEL_RESULT_RECORDED:
            described = "no action was announced"
            parser = None
        tool_name, arguments, action, source = _from_parser(reply, parser, described)
    else:
        source = "no reply is recorded, so no action was chosen"
    return PendingStep(
        next_step,
        state,
        detail,
        kind,
        reply,
        failure,
        tool_name,
        arguments,
        action,
        source,
        intents,
        ask,
        answer,
    )
