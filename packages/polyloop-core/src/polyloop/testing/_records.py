"""Run-log records built by hand the way the loop writes them, for tests of stores, tools and resume.

Each step builder returns a :class:`StepWrites`: the records one step writes, in the loop's
order, with the result ids of :func:`polyloop.recovery.model_result_id` and
:func:`~polyloop.recovery.action_result_id` and every :class:`~polyloop.types.StepRecord` field
filled as the loop fills it (``raw_output`` and ``content_chars`` from the reply, the tool's
arguments in canonical JSON, ``call_id`` from the reply, ``None`` where no action was
attempted). Steps joined in order, between :func:`run_started` and :func:`run_finished`, make a
log that :func:`polyloop.recovery.validate_log` accepts — as long as the test puts them together
the way a run could have (a final answer or a model failure ends a run).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from polyloop.asking import (
    UserAnswered,
    UserAsked,
)
from polyloop.ports import RunLog, RunStore
from polyloop.recovery import TOOL_LESS_TERMS, action_result_id, model_result_id
from polyloop.serialization import LogRecord
from polyloop.session._writes import write_one
from polyloop.tools import canonical_arguments
from polyloop.types import (
    ActionOutcome,
    ActionStatus,
    Intent,
    IntentKind,
    ModelCallResult,
    ModelReply,
    ReplayPolicy,
    RunFinished,
    RunResult,
    RunStarted,
    StepCompleted,
    StepRecord,
    StopReason,
)

__all__ = [
    "StepWrites",
    "code_step",
    "final_step",
    "model_failure_step",
    "parse_failure_step",
    "run_finished",
    "run_log_from",
    "run_started",
    "tool_step",
    "write_records",
]

#: The parameter snapshot of :func:`run_started` when the test gives none.
HAND_BUILT_SNAPSHOT: Mapping[str, str] = {"model_client.kind": "hand-built"}


@dataclass(frozen=True, slots=True)
class StepWrites:
    """The records one step writes, as the loop writes them."""

    model_intent: Intent
    model_result: ModelCallResult
    step_completed: StepCompleted
    #: Written only when the step executed (or tried to execute) an accepted action.
    action_intent: Intent | None = None

    @property
    def step(self) -> StepRecord:
        """The step's trajectory row."""
        return self.step_completed.step

    @property
    def records(self) -> tuple[LogRecord, ...]:
        """The step's records in write order: model intent, result, action intent, step."""
        if self.action_intent is None:
            return (self.model_intent, self.model_result, self.step_completed)
        return (self.model_intent, self.model_result, self.action_intent, self.step_completed)


def run_started(
    run_id: str, snapshot: Mapping[str, str] = HAND_BUILT_SNAPSHOT, started_at: str | None = None
) -> RunStarted:
    """The first record of a run, carrying ``snapshot`` as its parameter snapshot, and
    ``started_at`` (a log written before start times were recorded has none, design 0061)."""
    return RunStarted(run_id, snapshot, started_at=started_at)


def _model_intent(run_id: str, step_idx: int, policy: ReplayPolicy) -> Intent:
    return Intent(run_id, IntentKind.MODEL_CALL, step_idx, model_result_id(step_idx), policy)


def _replied(
    run_id: str, step_idx: int, content: str, thinking: str, call_id: str | None
) -> ModelCallResult:
    reply = ModelReply(call_id=call_id, content=content, thinking=thinking)
    return ModelCallResult(run_id, model_result_id(step_idx), reply, None)


def _call_id(call_id: str | None, step_idx: int) -> str:
    return f"call-{step_idx}" if call_id is None else call_id


def _action_step(
    run_id: str,
    step_idx: int,
    *,
    action: str,
    tool_name: str | None,
    tool_arguments: str | None,
    content: str,
    thinking: str,
    call_id: str,
    outcome: ActionOutcome,
    replay_policy: ReplayPolicy,
    model_replay_policy: ReplayPolicy,
    prompt_chars: int,
    step_wall_ms: int,
) -> StepWrites:
    result_id = action_result_id(step_idx)
    step = StepRecord(
        step_idx=step_idx,
        raw_output=content,
        content_chars=len(content),
        thinking_chars=len(thinking),
        action=action,
        parse_ok=True,
        parse_error=None,
        observation=outcome.observation,
        observation_is_synthetic=outcome.observation_is_synthetic,
        observation_truncated_chars=outcome.observation_truncated_chars,
        prompt_chars=prompt_chars,
        call_id=call_id,
        step_wall_ms=step_wall_ms,
        tool_name=tool_name,
        tool_arguments=tool_arguments,
        action_status=outcome.status,
        env_reported_completion=outcome.env_reported_completion,
    )
    return StepWrites(
        model_intent=_model_intent(run_id, step_idx, model_replay_policy),
        model_result=_replied(run_id, step_idx, content, thinking, call_id),
        action_intent=Intent(run_id, IntentKind.ACTION, step_idx, result_id, replay_policy),
        step_completed=StepCompleted(run_id, result_id, outcome, step),
    )


def tool_step(
    run_id: str,
    step_idx: int,
    *,
    tool_name: str = "lookup",
    arguments: Mapping[str, object] | None = None,
    observation: str = "ok",
    status: ActionStatus = ActionStatus.EXECUTED,
    observation_is_synthetic: bool = False,
    observation_truncated_chars: int = 0,
    env_reported_completion: bool = False,
    action: str | None = None,
    content: str | None = None,
    thinking: str = "",
    call_id: str | None = None,
    replay_policy: ReplayPolicy = ReplayPolicy.SAFE,
    model_replay_policy: ReplayPolicy = ReplayPolicy.SAFE,
    prompt_chars: int = 100,
    step_wall_ms: int = 1,
) -> StepWrites:
    """A step whose reply called tool ``tool_name`` and whose executor returned an outcome.

    ``action`` (the parser's ``Action.text``) defaults to ``CALL <tool> <arguments>`` and the
    reply's ``content`` to the action; ``replay_policy`` is the tool's, recorded in the action
    intent; ``call_id`` defaults to ``call-<step_idx>``. ``status=ActionStatus.ENV_ERROR``
    (with a synthetic observation) is the step of a failed environment, which ends a run.
    """
    tool_arguments = canonical_arguments(arguments or {})
    action_text = f"CALL {tool_name} {tool_arguments}" if action is None else action
    outcome = ActionOutcome(
        status=status,
        observation=observation,
        observation_is_synthetic=observation_is_synthetic,
        env_reported_completion=env_reported_completion,
        observation_truncated_chars=observation_truncated_chars,
    )
    return _action_step(
        run_id,
        step_idx,
        action=action_text,
        tool_name=tool_name,
        tool_arguments=tool_arguments,
        content=action_text if content is None else content,
        thinking=thinking,
        call_id=_call_id(call_id, step_idx),
        outcome=outcome,
        replay_policy=replay_policy,
        model_replay_policy=model_replay_policy,
        prompt_chars=prompt_chars,
        step_wall_ms=step_wall_ms,
    )


def code_step(
    run_id: str,
    step_idx: int,
    code: str = "print(1)",
    *,
    observation: str = "1",
    observation_truncated_chars: int = 0,
    content: str | None = None,
    thinking: str = "",
    call_id: str | None = None,
    model_replay_policy: ReplayPolicy = ReplayPolicy.SAFE,
    prompt_chars: int = 100,
    step_wall_ms: int = 1,
) -> StepWrites:
    """A step whose reply held tool-less code (``Action.text``) that the executor ran.

    The reply's ``content`` defaults to ``RUN: <code>``; the action intent carries the terms of
    every tool-less action (:data:`polyloop.recovery.TOOL_LESS_TERMS`: never to replay).
    """
    outcome = ActionOutcome(
        status=ActionStatus.EXECUTED,
        observation=observation,
        observation_is_synthetic=False,
        env_reported_completion=False,
        observation_truncated_chars=observation_truncated_chars,
    )
    return _action_step(
        run_id,
        step_idx,
        action=code,
        tool_name=None,
        tool_arguments=None,
        content=f"RUN: {code}" if content is None else content,
        thinking=thinking,
        call_id=_call_id(call_id, step_idx),
        outcome=outcome,
        replay_policy=TOOL_LESS_TERMS.replay_policy,
        model_replay_policy=model_replay_policy,
        prompt_chars=prompt_chars,
        step_wall_ms=step_wall_ms,
    )


def _reply_only_step(
    run_id: str,
    step_idx: int,
    *,
    content: str,
    thinking: str,
    call_id: str,
    parse_error: str | None,
    observation: str,
    model_replay_policy: ReplayPolicy,
    prompt_chars: int,
    step_wall_ms: int,
) -> StepWrites:
    step = StepRecord(
        step_idx=step_idx,
        raw_output=content,
        content_chars=len(content),
        thinking_chars=len(thinking),
        action=None,
        parse_ok=parse_error is None,
        parse_error=parse_error,
        observation=observation,
        observation_is_synthetic=parse_error is not None,
        observation_truncated_chars=0,
        prompt_chars=prompt_chars,
        call_id=call_id,
        step_wall_ms=step_wall_ms,
    )
    return StepWrites(
        model_intent=_model_intent(run_id, step_idx, model_replay_policy),
        model_result=_replied(run_id, step_idx, content, thinking, call_id),
        step_completed=StepCompleted(run_id, None, None, step),
    )


def final_step(
    run_id: str,
    step_idx: int,
    answer: str = "done",
    *,
    content: str | None = None,
    thinking: str = "",
    call_id: str | None = None,
    model_replay_policy: ReplayPolicy = ReplayPolicy.SAFE,
    prompt_chars: int = 100,
    step_wall_ms: int = 1,
) -> StepWrites:
    """A step whose reply was the final answer ``answer`` (content ``FINAL: <answer>``).

    It ends the run: follow it with ``run_finished(..., StopReason.AGENT_FINISHED,
    final_answer=answer)``.
    """
    return _reply_only_step(
        run_id,
        step_idx,
        content=f"FINAL: {answer}" if content is None else content,
        thinking=thinking,
        call_id=_call_id(call_id, step_idx),
        parse_error=None,
        observation="",
        model_replay_policy=model_replay_policy,
        prompt_chars=prompt_chars,
        step_wall_ms=step_wall_ms,
    )


def parse_failure_step(
    run_id: str,
    step_idx: int,
    *,
    content: str = "gibberish",
    explanation: str = "Reply with one of: FINAL: <answer> | CALL <tool> <json object>.",
    thinking: str = "",
    call_id: str | None = None,
    model_replay_policy: ReplayPolicy = ReplayPolicy.SAFE,
    prompt_chars: int = 100,
    step_wall_ms: int = 1,
) -> StepWrites:
    """A step whose reply ``content`` did not parse: the parser's ``explanation`` is both the
    parse error and the (synthetic) observation, and no action intent is written."""
    return _reply_only_step(
        run_id,
        step_idx,
        content=content,
        thinking=thinking,
        call_id=_call_id(call_id, step_idx),
        parse_error=explanation,
        observation=explanation,
        model_replay_policy=model_replay_policy,
        prompt_chars=prompt_chars,
        step_wall_ms=step_wall_ms,
    )


def model_failure_step(
    run_id: str,
    step_idx: int,
    *,
    failure: str = "TimeoutError: the model did not answer",
    observation: str = "Model call failed.",
    model_replay_policy: ReplayPolicy = ReplayPolicy.SAFE,
    prompt_chars: int = 100,
    step_wall_ms: int = 1,
) -> StepWrites:
    """A step whose model call raised: the result records ``failure`` (``"<type>: <message>"``)
    and no reply; the step has no output, no call id and the definition's ``model_call_failed``
    text (``observation``) as its synthetic observation. It ends the run (``llm_error``)."""
    step = StepRecord(
        step_idx=step_idx,
        raw_output="",
        content_chars=0,
        thinking_chars=0,
        action=None,
        parse_ok=False,
        parse_error=None,
        observation=observation,
        observation_is_synthetic=True,
        observation_truncated_chars=0,
        prompt_chars=prompt_chars,
        call_id=None,
        step_wall_ms=step_wall_ms,
    )
    return StepWrites(
        model_intent=_model_intent(run_id, step_idx, model_replay_policy),
        model_result=ModelCallResult(run_id, model_result_id(step_idx), None, failure),
        step_completed=StepCompleted(run_id, None, None, step),
    )


def run_finished(
    run_id: str,
    steps: Iterable[StepWrites | StepRecord],
    stop_reason: StopReason,
    *,
    final_answer: str | None = None,
    event_delivery_failures: int = 0,
) -> RunFinished:
    """The last record of a run whose recorded steps are ``steps``, stopped for ``stop_reason``."""
    records = tuple(s.step if isinstance(s, StepWrites) else s for s in steps)
    result = RunResult(
        run_id=run_id,
        stop_reason=stop_reason,
        final_answer=final_answer,
        steps=records,
        event_delivery_failures=event_delivery_failures,
    )
    return RunFinished(run_id, result)


def run_log_from(records: Iterable[LogRecord]) -> RunLog:
    """The :class:`RunLog` a correct store reads back after ``records`` were written in order.

    Records are grouped by kind, each group in write order; nothing is checked, so a test can
    build the log of a broken store as well.
    """
    started: RunStarted | None = None
    finished: RunFinished | None = None
    intents: list[Intent] = []
    model_results: list[ModelCallResult] = []
    steps: list[StepCompleted] = []
    asks: list[UserAsked] = []
    answers: list[UserAnswered] = []
    for record in records:
        if isinstance(record, RunStarted):
            started = record
        elif isinstance(record, Intent):
            intents.append(record)
        elif isinstance(record, ModelCallResult):
            model_results.append(record)
        elif isinstance(record, StepCompleted):
            steps.append(record)
        elif isinstance(record, UserAsked):
            asks.append(record)
        elif isinstance(record, UserAnswered):
            answers.append(record)
        else:
            finished = record
    return RunLog(
        started,
        tuple(intents),
        tuple(model_results),
        tuple(steps),
        finished,
        tuple(asks),
        tuple(answers),
    )


async def write_records(store: RunStore, records: Iterable[LogRecord]) -> None:
    """Write ``records`` in order, each through the store method for its kind (the loop's own
    dispatch; asks and answers need a store with the UserAsking capability, design 0037)."""
    for record in records:
        await write_one(store, record)
