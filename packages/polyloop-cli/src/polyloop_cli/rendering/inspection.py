"""What the inspection commands compute from a run log: summaries, verdicts and plans.

Pure functions of a :class:`~polyloop.ports.RunLog`; nothing here calls a seam or a store.
Each returns plain JSON-ready data, rendered as tables or as ``--json`` by :mod:`.render`.
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from polyloop.asking import AskKind
from polyloop.errors import CorruptLogError
from polyloop.ports import LeaseHolder, RunLog
from polyloop.recovery import (
    PARSE_FAILURE_LIMIT_KEY,
    ResumeMove,
    ResumePlan,
    TailState,
    answer_to,
    is_parse_failure,
    pending_ask,
    plan_resume,
    run_status,
    snapshot_facts,
    validate_log,
)
from polyloop.serialization import to_dict
from polyloop.types import (
    REQUESTS_USAGE_KEY,
    ActionStatus,
    Intent,
    StepRecord,
    model_call_counts,
)
from polyloop_cli.rendering.asks import ask_json, decision_json

__all__ = [
    "PlanReport",
    "StepSpan",
    "asks_json",
    "corruption",
    "holder_json",
    "model_calls_json",
    "model_requests_json",
    "model_usage_fields",
    "plan_report",
    "run_summary",
    "run_totals",
    "select_steps",
    "step_row",
    "unfinished_step",
]


def corruption(log: RunLog, run_id: str) -> str | None:
    """``None`` when the log is structurally valid, else the one-line verdict naming the record."""
    try:
        validate_log(log, run_id)
    except CorruptLogError as error:
        return " ".join(str(error).split())
    return None


@dataclass(frozen=True, slots=True)
class PlanReport:
    """A resume plan plus what the CLI had to assume to compute it."""

    plan: ResumePlan
    #: Facts missing from the snapshot and the value used instead (one sentence each).
    assumptions: tuple[str, ...]

    def to_json(self) -> dict[str, Any]:
        plan = self.plan
        return {
            "state": plan.state.value,
            "move": plan.move.value,
            "next_step": plan.next_step,
            "stop_reason": None if plan.stop_reason is None else plan.stop_reason.value,
            "intent_in_doubt": None
            if plan.intent_in_doubt is None
            else intent_json(plan.intent_in_doubt),
            "model_result_recorded": plan.model_result is not None,
            "reason": plan.reason,
            "assumptions": list(self.assumptions),
        }


def intent_json(intent: Intent) -> dict[str, Any]:
    return {
        "kind": intent.kind.value,
        "call_index": intent.call_index,
        "result_id": intent.result_id,
        "replay_policy": intent.replay_policy.value,
    }


def plan_report(log: RunLog) -> PlanReport:
    """The recovery table applied to a (validated) log, with the run's own settings.

    The parse-failure limit and the ``completes_run`` tools come from the run's parameter
    snapshot, which is what ``resume`` would compare its own configuration against.
    """
    facts = snapshot_facts(log.started.parameter_snapshot if log.started else {})
    assumptions: list[str] = []
    limit = facts.max_consecutive_parse_failures
    if limit is None:
        limit = 2**31
        assumptions.append(
            f"the snapshot has no usable {PARSE_FAILURE_LIMIT_KEY}; parse failures were assumed "
            "never to reach the limit"
        )
    plan = plan_resume(
        log, max_consecutive_parse_failures=limit, completing_tools=facts.completing_tools or ()
    )
    return PlanReport(plan, tuple(assumptions))


def holder_json(holder: LeaseHolder | None) -> dict[str, Any] | None:
    """Who drives a run now, as JSON (``None``: nobody, as far as the store can tell)."""
    if holder is None:
        return None
    return {
        "process_id": holder.process_id,
        "host_name": holder.host_name,
        "acquired_at": holder.acquired_at,
        "description": holder.describe(),
    }


def run_summary(
    run_id: str, log: RunLog, damage: str | None = None, holder: LeaseHolder | None = None
) -> dict[str, Any]:
    """One row of ``polyloop runs``. ``damage``: why the store could not read the log (then
    ``log`` holds what was salvaged, if anything); ``holder``: who holds the run's lease now.

    An unfinished run whose lease is held is ``running``: a driver is at work on it right now.
    A fork whose copy a crash cut short, with no holder, is ``incomplete_fork``.
    """
    if damage is not None and log == RunLog():
        return {
            "run_id": run_id,
            "started": None,
            "steps": None,
            "model": "",
            "status": "corrupt",
            "stop_reason": None,
            "tail": None,
            "corrupt": damage,
            "holder": holder_json(holder),
            "follows_run_id": None,
            "run_status": None,
            "pending_ask": None,
            "started_at": None,
        }
    verdict = damage if damage is not None else corruption(log, run_id)
    snapshot: Mapping[str, str] = log.started.parameter_snapshot if log.started else {}
    model = snapshot.get("model_client.model") or snapshot.get("model_client.name") or ""
    kind = snapshot.get("model_client.kind", "")
    row: dict[str, Any] = {
        "run_id": run_id,
        "started": log.started is not None,
        "steps": len(log.steps),
        "model": f"{kind}:{model}" if model else kind,
        "status": "unfinished",
        "stop_reason": None,
        "tail": None,
        "corrupt": verdict,
        "holder": holder_json(holder),
        "follows_run_id": None if log.started is None else log.started.follows_run_id,
        # Seed 002's status word (design 0038); unknown for a corrupt log.
        "run_status": None,
        "pending_ask": None,
        # UTC, to the second; None for a log written before RunStarted had it (design 0061).
        "started_at": None if log.started is None else log.started.started_at,
    }
    if verdict is not None:
        row["status"] = "corrupt"
        return row
    row["run_status"] = run_status(log).value
    if log.finished is not None:
        row["status"] = "finished"
        row["stop_reason"] = log.finished.result.stop_reason.value
        return row
    started = log.started
    if (
        holder is None
        and started is not None
        and started.forked_at_step is not None
        and len(log.steps) < started.forked_at_step
    ):
        # A fork whose copy a crash cut short: resume refuses it, the same fork completes it
        # (design 0072); no driver is on it, and it has no step of its own to resume from.
        row["status"] = "incomplete_fork"
        return row
    row["tail"] = plan_report(log).plan.state.value
    ask = pending_ask(log)
    if ask is not None:
        # Parked: no driver holds it, it waits for a person (design 0037).
        row["status"] = "waiting_approval"
        row["pending_ask"] = {
            "step": ask.step,
            "kind": ask.kind.value,
            "tool_name": ask.tool_name,
            "asked_at": ask.asked_at,
        }
    elif holder is not None:
        row["status"] = "running"
    return row


def asks_json(log: RunLog) -> list[dict[str, Any]]:
    """Every ask the run made, each with the decision on it (``None`` while it waits)."""
    items = []
    for ask in log.asks:
        answered = answer_to(log, ask)
        decision = None if answered is None else decision_json(answered)
        items.append({**ask_json(ask), "decision": decision})
    return items


def _short(text: str | None, limit: int) -> str:
    if text is None:
        return ""
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


def full_step(step: StepRecord) -> dict[str, Any]:
    """Every StepRecord field (``show --full``): the stored form, plus the fields added after
    schema 1.0 that the stored form leaves out while they hold their default."""
    shown = to_dict(step)
    for field in dataclasses.fields(StepRecord):
        if field.name not in shown:
            default = field.default
            shown[field.name] = list(default) if isinstance(default, tuple) else default
    return shown


def step_row(step: StepRecord, *, width: int = 60) -> dict[str, Any]:
    """The StepRecord fields that matter when reading a trajectory, shortened for a table."""
    if step.tool_name is not None:
        action = f"{step.tool_name} {step.tool_arguments or ''}".strip()
    elif step.action is not None:
        action = step.action
    elif step.parse_ok:
        action = "(final answer)"
    elif step.parse_error is not None:
        action = "(unreadable reply)"
    else:
        action = "(model call failed)"
    status = "" if step.action_status is None else step.action_status.value
    row: dict[str, Any] = {
        "step": step.step_idx,
        "action": _short(action, width),
        "parse_ok": step.parse_ok,
        "status": status,
        "observation": _short(step.observation, width),
        "synthetic": step.observation_is_synthetic,
        "prompt_chars": step.prompt_chars,
        "wall_ms": step.step_wall_ms,
    }
    if step.calls_not_executed:
        # The reply made more calls than the step executed (design 0045): marked, never hidden.
        names = [call.tool_name for call in step.calls_not_executed]
        row["status"] = f"{status} +{len(names)} not executed".strip()
        row["action"] = _short(f"{action} [not executed: {', '.join(names)}]", width)
        row["calls_not_executed"] = names
    return row


def run_totals(steps: Sequence[StepRecord], summary: Mapping[str, Any]) -> dict[str, Any]:
    """The whole run in one line: steps, executed actions, parse failures, wall time, and how
    it ended (``summary`` is the run's :func:`run_summary`)."""
    return {
        "steps": len(steps),
        "executed_actions": sum(1 for step in steps if step.action_status is ActionStatus.EXECUTED),
        "parse_failures": sum(1 for step in steps if is_parse_failure(step)),
        "wall_ms": sum(step.step_wall_ms for step in steps),
        "status": summary["status"],
        "stop_reason": summary["stop_reason"],
        "tail": summary["tail"],
    }


@dataclass(frozen=True, slots=True)
class StepSpan:
    """Steps ``first`` to ``last`` (step indexes, both included); ``None`` leaves that end open."""

    first: int | None
    last: int | None

    def __str__(self) -> str:
        return (
            f"{'' if self.first is None else self.first}-{'' if self.last is None else self.last}"
        )


def select_steps(
    steps: Sequence[StepRecord], *, last: int | None = None, span: StepSpan | None = None
) -> list[StepRecord]:
    """The steps ``show`` prints: the last ``last`` of them, or those whose index is in ``span``."""
    if last is not None:
        return list(steps[-last:]) if last > 0 else []
    if span is not None:
        low = -1 if span.first is None else span.first
        high = float("inf") if span.last is None else span.last
        return [step for step in steps if low <= step.step_idx <= high]
    return list(steps)


def model_calls_json(log: RunLog) -> list[dict[str, Any]]:
    """Finish reason and token usage of each recorded model reply, in call order (both
    ``None`` where the client did not report them)."""
    return [
        {
            "result_id": result.result_id,
            "finish_reason": result.reply.finish_reason,
            "usage": None if result.reply.usage is None else dict(result.reply.usage),
        }
        for result in log.model_results
        if result.reply is not None
    ]


def model_requests_json(log: RunLog) -> dict[str, int]:
    """The run's model calls, the requests they made and how many were retries (design 0065:
    a retrying client records its counts; a call without them made one request)."""
    calls = requests = retries = 0
    for result in log.model_results:
        made, retried = model_call_counts(result)
        calls, requests, retries = calls + 1, requests + made, retries + retried
    return {"calls": calls, "requests": requests, "retries": retries}


def model_usage_fields(log: RunLog) -> list[tuple[str, str]]:
    """``show``'s header lines for the replies: the finish reasons seen (with counts) and the
    token usage summed over the run, each only when some reply reported it; the requests and
    retries when a retrying client counted them."""
    replies = [result.reply for result in log.model_results if result.reply is not None]
    reasons = Counter(reply.finish_reason for reply in replies if reply.finish_reason)
    totals: Counter[str] = Counter()
    counted = False
    for result in log.model_results:
        usage = result.reply.usage if result.reply is not None else result.failure_usage
        counted = counted or REQUESTS_USAGE_KEY in (usage or {})
        totals.update(
            {key: count for key, count in (usage or {}).items() if not key.startswith("polyloop.")}
        )
    fields: list[tuple[str, str]] = []
    if reasons:
        fields.append(
            ("finish reasons", ", ".join(f"{reason} ×{n}" for reason, n in sorted(reasons.items())))
        )
    if totals:
        fields.append(("token usage", " ".join(f"{k}={v}" for k, v in sorted(totals.items()))))
    if counted:
        made = model_requests_json(log)
        fields.append(
            (
                "model requests",
                f"{made['requests']} for {made['calls']} calls ({made['retries']} retries)",
            )
        )
    return fields


@dataclass(frozen=True, slots=True)
class UnfinishedStep:
    """Where the step after the last recorded one stands, when it was announced (design 0074)."""

    step: int
    #: ``running`` (a driver holds the run's lease), ``stopped`` (the run finished with the
    #: step unfinished), else the recovery table's tail state (``ask_pending``,
    #: ``action_in_doubt``, ``model_call_in_doubt``, ...).
    state: str
    #: The state in words, without a final full stop.
    words: str

    def to_json(self) -> dict[str, Any]:
        return {"step": self.step, "state": self.state, "words": self.words}


def unfinished_step(log: RunLog, holder: LeaseHolder | None = None) -> UnfinishedStep | None:
    """The announced, unfinished step of ``log`` (a validated log) in words; ``None`` when the
    next step has no intent. The facts are the viewer's pending card's: the recovery table's
    reading of the log (of the log without its ``RunFinished`` for a finished run), the ask and
    its decision, the intent in doubt; plus ``holder``, who holds the run's lease now: a step
    of a run being driven is under way, not in doubt."""
    step = len(log.steps)
    if not any(intent.call_index == step for intent in log.intents):
        return None
    if log.finished is not None:
        stop = log.finished.result.stop_reason.value
        return UnfinishedStep(
            step,
            "stopped",
            f"left unfinished when the run stopped ({stop}); resume does not carry it further",
        )
    plan = plan_report(log).plan
    if holder is not None:
        return UnfinishedStep(
            step, "running", f"under way: the run is being driven now ({holder.describe()})"
        )
    words = _tail_words(plan.state, plan.move, plan)
    return UnfinishedStep(step, plan.state.value, words)


def _tail_words(state: TailState, move: ResumeMove, plan: ResumePlan) -> str:
    ask, answer, intent = plan.ask, plan.answer, plan.intent_in_doubt
    if state is TailState.ASK_PENDING and ask is not None:
        what = "an answer" if ask.kind is AskKind.QUESTION else "approval"
        return f"waiting for {what} since {ask.asked_at}; nothing runs until a person decides"
    if state is TailState.ASK_DECIDED and answer is not None:
        who = f" by {answer.decided_by}" if answer.decided_by else ""
        return (
            f"decided ({answer.verdict.value}{who} at {answer.decided_at}), not carried out "
            "yet; resume carries it out"
        )
    stopped = "the run stopped mid-step (a crash or a kill) and nobody drives it now"
    if state in (TailState.ACTION_IN_DOUBT, TailState.MODEL_CALL_IN_DOUBT) and intent is not None:
        what = (
            "the model call may or may not have reached the model"
            if state is TailState.MODEL_CALL_IN_DOUBT
            else "the action may or may not have run"
        )
        then = (
            "resume stops the run rather than repeat it"
            if move is ResumeMove.STOP_STATE_UNKNOWN
            else "resume makes it again"
        )
        return f"in doubt: {stopped}; {what}; {then} (replay policy {intent.replay_policy.value})"
    if state is TailState.MODEL_RESULT_RECORDED:
        return (
            f"interrupted: {stopped}; the model's reply is recorded and nothing after it was "
            "announced; resume reads the recorded reply again"
        )
    return f"unfinished ({state.value}): {stopped}; {plan.reason}"
