"""``replay_parser``: a run's recorded replies read again by another decision parser (design 0067).

Nothing is called, executed or written: each step's recorded reply goes to the parser, and what
it decides is compared, field by field, with what the step recorded. Research code runs it
before changing a parser that pre-registered analyses depend on.
"""

from __future__ import annotations

from dataclasses import dataclass

from polyloop.asking import Verdict
from polyloop.errors import RunNotFoundError
from polyloop.ports import (
    Action,
    DecisionParser,
    FinalAnswer,
    InvalidDecision,
    RunLog,
    RunStore,
)
from polyloop.recovery import model_result_id, validate_log
from polyloop.session._loop import edited
from polyloop.tools import canonical_arguments
from polyloop.types import CallNotExecuted, StepRecord, StopReason

__all__ = ["DecisionDifference", "ParserReplay", "replay_log", "replay_parser"]


@dataclass(frozen=True, slots=True)
class DecisionDifference:
    """One field of one step where the replayed decision differs from the recorded one.

    ``field`` is ``decision`` (``action``, ``final`` or ``invalid``; ``error: ...`` when the
    parser raised), ``action``, ``tool_name``, ``tool_arguments``, ``parse_error``,
    ``history_text``, ``calls_not_executed`` or ``final_answer``; ``None`` stands for absent.
    """

    run_id: str
    step: int
    field: str
    recorded: str | None
    replayed: str | None


@dataclass(frozen=True, slots=True)
class ParserReplay:
    """The outcome of replaying one run: how many steps had a reply to parse again, and every
    difference, in step order."""

    run_id: str
    steps_replayed: int
    #: Steps whose model call failed: no reply, nothing to parse.
    steps_without_reply: int
    differences: tuple[DecisionDifference, ...]

    @property
    def steps_differing(self) -> tuple[int, ...]:
        """The steps with at least one difference, ascending."""
        return tuple(sorted({difference.step for difference in self.differences}))


async def replay_parser(store: RunStore, run_id: str, parser: DecisionParser) -> ParserReplay:
    """Read run ``run_id`` from ``store`` and replay its recorded replies through ``parser``.

    Raises :class:`RunNotFoundError` for a run without a log and :class:`CorruptLogError` for a
    corrupt one. Calls no model and executes nothing; only ``read_log`` touches the store.
    """
    log = await store.read_log(run_id)
    if log.started is None:
        raise RunNotFoundError(
            f"Run {run_id!r} has no RunStarted record in this store, so there is nothing to "
            "replay; check the run id and the store."
        )
    validate_log(log, run_id)
    return replay_log(log, run_id, parser)


def replay_log(log: RunLog, run_id: str, parser: DecisionParser) -> ParserReplay:
    """:func:`replay_parser` on a log already read (and validated)."""
    replies = {result.result_id: result.reply for result in log.model_results}
    edits = {answer.step: answer for answer in log.answers if answer.verdict is Verdict.EDIT}
    final_answer = None
    if log.finished is not None and log.finished.result.stop_reason is StopReason.AGENT_FINISHED:
        final_answer = log.finished.result.final_answer
    last = len(log.steps) - 1
    differences: list[DecisionDifference] = []
    replayed = without_reply = 0
    for completed in log.steps:
        step = completed.step
        k = step.step_idx
        reply = replies.get(model_result_id(k))
        if reply is None:
            without_reply += 1
            continue
        replayed += 1
        recorded = _recorded(step, final_answer if k == last else None)
        try:
            parsed = parser.parse(reply)
        except Exception as error:  # a parser that raises is itself a difference to report
            now: dict[str, str | None] = {"decision": f"error: {type(error).__name__}: {error}"}
        else:
            decision = parsed.decision
            if isinstance(decision, Action) and k in edits:
                decision = edited(decision, edits[k])
            now = _decided(decision, parsed.history_text, parsed.calls_not_executed)
            if recorded["decision"] == "final" and now["decision"] == "final" and k != last:
                now["final_answer"] = recorded["final_answer"]  # only the last step's is known
        for name, value in recorded.items():
            if name in now and now[name] != value:
                differences.append(DecisionDifference(run_id, k, name, value, now[name]))
    return ParserReplay(run_id, replayed, without_reply, tuple(differences))


def _recorded(step: StepRecord, final_answer: str | None) -> dict[str, str | None]:
    if not step.parse_ok:
        kind = "invalid"
    elif step.action is None:
        kind = "final"
    else:
        kind = "action"
    return {
        "decision": kind,
        "action": step.action,
        "tool_name": step.tool_name,
        "tool_arguments": step.tool_arguments,
        "parse_error": step.parse_error,
        "history_text": step.raw_output,
        "calls_not_executed": _calls(step.calls_not_executed),
        "final_answer": final_answer,
    }


def _decided(
    decision: object, history_text: str, calls: tuple[CallNotExecuted, ...]
) -> dict[str, str | None]:
    fields: dict[str, str | None] = {
        "action": None,
        "tool_name": None,
        "tool_arguments": None,
        "parse_error": None,
        "history_text": history_text,
        "calls_not_executed": _calls(calls),
        "final_answer": None,
    }
    if isinstance(decision, InvalidDecision):
        fields["decision"] = "invalid"
        fields["parse_error"] = decision.explanation
    elif isinstance(decision, FinalAnswer):
        fields["decision"] = "final"
        fields["final_answer"] = decision.text
    elif isinstance(decision, Action):
        fields["decision"] = "action"
        fields["action"] = decision.text
        call = decision.tool_call
        if call is not None:
            fields["tool_name"] = call.name
            fields["tool_arguments"] = canonical_arguments(call.arguments)
    else:
        fields["decision"] = f"error: the parser returned {type(decision).__name__}"
    return fields


def _calls(calls: tuple[CallNotExecuted, ...]) -> str | None:
    if not calls:
        return None
    return "; ".join(f"{call.tool_name} {call.tool_arguments}" for call in calls)
