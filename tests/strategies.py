"""Hypothesis strategies for every value and record of ``polyloop.types``.

Shared by the property tests of the whole workspace (``from tests.strategies import ...``).
Every strategy builds only structurally valid values (the constructors would refuse the rest);
texts are surrogate-free so that they survive UTF-8, and now and then very long.
"""

from __future__ import annotations

import datetime
from dataclasses import replace

from hypothesis import strategies as st

from polyloop.types import (
    ActionOutcome,
    ActionStatus,
    Budget,
    CallNotExecuted,
    Context,
    Injection,
    Intent,
    IntentKind,
    Message,
    ModelCallResult,
    ModelReply,
    ReplayPolicy,
    Role,
    RunFinished,
    RunResult,
    RunStarted,
    StepCompleted,
    StepRecord,
    StopReason,
    SyntheticObservations,
    TextBlock,
)

__all__ = [
    "action_outcomes",
    "budgets",
    "call_ids",
    "contexts",
    "counts",
    "injections",
    "intents",
    "large_texts",
    "log_records",
    "messages",
    "model_call_results",
    "model_replies",
    "optional_texts",
    "parameter_snapshots",
    "result_ids",
    "run_finished_records",
    "run_ids",
    "run_results",
    "run_started_records",
    "short_texts",
    "step_completed_records",
    "step_records",
    "synthetic_observations",
    "texts",
]

#: Any Unicode scalar value except surrogates (which UTF-8 cannot carry).
_characters = st.characters(exclude_categories=("Cs",))

#: Short texts of any characters, including the empty string, control characters and non-ASCII.
short_texts = st.text(_characters, max_size=40)

#: A long text (a thousand to about a hundred thousand characters), built by repetition so that
#: generating it stays cheap.
large_texts = st.builds(
    lambda unit, times: unit * times,
    st.text(_characters, min_size=1, max_size=12),
    st.integers(min_value=1_000, max_value=10_000),
)

#: Texts of every size: mostly short, now and then very large (about one in eight).
texts = st.one_of(*([short_texts] * 7), large_texts)

optional_texts = st.none() | texts

#: Non-negative counts, including ones far beyond 32 and 64 bits.
counts = st.one_of(
    st.integers(min_value=0, max_value=1_000),
    st.integers(min_value=0, max_value=2**64),
    st.just(0),
)

run_ids = st.text(_characters, max_size=30)
result_ids = st.text(_characters, min_size=1, max_size=30)

#: A provider call id: ``None`` or a non-empty string, never ``""``.
call_ids = st.none() | st.text(_characters, min_size=1, max_size=40)

parameter_snapshots = st.dictionaries(short_texts, short_texts, max_size=8)

#: ``ModelReply.finish_reason``: ``None`` or a non-empty string (added after schema 1.0).
finish_reasons = (
    st.none() | st.sampled_from(["stop", "length", "tool_calls"]) | short_texts.filter(bool)
)
#: ``ModelReply.usage``: ``None`` or token counts by name (added after schema 1.0).
usages = st.none() | st.dictionaries(short_texts, st.integers(0, 2**53), max_size=4)

model_replies = st.builds(
    ModelReply,
    call_id=call_ids,
    content=texts,
    thinking=texts,
    finish_reason=finish_reasons,
    usage=usages,
    model=st.none() | short_texts.filter(bool),
)

action_outcomes = st.builds(
    ActionOutcome,
    status=st.sampled_from(ActionStatus),
    observation=texts,
    observation_is_synthetic=st.booleans(),
    env_reported_completion=st.booleans(),
    observation_truncated_chars=counts,
)

budgets = st.builds(
    Budget,
    max_steps=counts,
    max_actions=counts,
    max_consecutive_parse_failures=counts,
    max_prompt_chars=counts,
)

#: ``StepRecord.calls_not_executed`` (added after schema 1.0, design 0045).
calls_not_executed = st.lists(
    st.builds(CallNotExecuted, tool_name=texts, tool_arguments=texts), max_size=2
).map(tuple)

step_records = st.builds(
    StepRecord,
    step_idx=counts,
    raw_output=texts,
    content_chars=counts,
    thinking_chars=counts,
    action=optional_texts,
    parse_ok=st.booleans(),
    parse_error=optional_texts,
    observation=texts,
    observation_is_synthetic=st.booleans(),
    observation_truncated_chars=counts,
    prompt_chars=counts,
    call_id=call_ids,
    step_wall_ms=counts,
    tool_name=optional_texts,
    tool_arguments=optional_texts,
    action_status=st.none() | st.sampled_from(ActionStatus),
    env_reported_completion=st.booleans(),
    calls_not_executed=calls_not_executed,
)

run_results = st.builds(
    RunResult,
    run_id=run_ids,
    stop_reason=st.sampled_from(StopReason),
    final_answer=optional_texts,
    steps=st.lists(step_records, max_size=3).map(tuple),
    event_delivery_failures=counts,
)

#: ``RunStarted.started_at`` (design 0061): absent in older logs, else a UTC second.
start_times = st.none() | st.datetimes(timezones=st.just(datetime.UTC)).map(
    lambda moment: moment.isoformat(timespec="seconds")
)

_run_started_heads = (
    st.builds(RunStarted, run_id=run_ids, parameter_snapshot=parameter_snapshots)
    | st.builds(
        # A follow-up run (design 0052): it names another run and holds the user's new input.
        lambda ids, snapshot, queued: RunStarted(
            ids[0], snapshot, follows_run_id=ids[1], queued_input=queued
        ),
        st.tuples(run_ids, result_ids).filter(lambda ids: ids[0] != ids[1]),
        parameter_snapshots,
        texts,
    )
    | st.builds(
        # A fork (design 0067): its source run, the step its own agent started at, in doubt or not.
        # Its prefix replayed into a fresh session or not (design 0072).
        lambda ids, snapshot, at, doubt, replayed: RunStarted(
            ids[0],
            snapshot,
            forked_from_run_id=ids[1],
            forked_at_step=at + 1 if doubt else at,
            fork_left_in_doubt=doubt,
            fork_replayed_prefix=replayed,
        ),
        st.tuples(run_ids, result_ids).filter(lambda ids: ids[0] != ids[1]),
        parameter_snapshots,
        counts,
        st.booleans(),
        st.booleans(),
    )
)

run_started_records = st.builds(
    lambda head, started_at: replace(head, started_at=started_at), _run_started_heads, start_times
)

intents = st.builds(
    Intent,
    run_id=run_ids,
    kind=st.sampled_from(IntentKind),
    call_index=counts,
    result_id=result_ids,
    replay_policy=st.sampled_from(ReplayPolicy),
)


@st.composite
def _model_call_result(draw: st.DrawFn) -> ModelCallResult:
    """A model result holding exactly one of a reply and a failure text."""
    if draw(st.booleans()):
        reply, failure = draw(model_replies), None
    else:
        reply, failure = None, draw(texts)
    return ModelCallResult(
        run_id=draw(run_ids), result_id=draw(result_ids), reply=reply, failure=failure
    )


@st.composite
def _step_completed(draw: st.DrawFn) -> StepCompleted:
    """A finished step, with both or neither of ``result_id`` and ``action_outcome``."""
    if draw(st.booleans()):
        result_id, outcome = draw(result_ids), draw(action_outcomes)
    else:
        result_id, outcome = None, None
    return StepCompleted(
        run_id=draw(run_ids), result_id=result_id, action_outcome=outcome, step=draw(step_records)
    )


model_call_results = _model_call_result()
step_completed_records = _step_completed()

run_finished_records = st.builds(RunFinished, run_id=run_ids, result=run_results)

#: Any of the five log records.
log_records = st.one_of(
    run_started_records,
    intents,
    model_call_results,
    step_completed_records,
    run_finished_records,
)

messages = st.builds(
    Message,
    role=st.sampled_from(Role),
    content=st.lists(st.builds(TextBlock, text=short_texts), max_size=3).map(tuple),
)

contexts = st.builds(
    Context,
    run_level=st.lists(messages, max_size=3).map(tuple),
    goal_level=st.lists(messages, max_size=3).map(tuple),
)

injections = st.builds(Injection, entry_id=short_texts, content=short_texts)

synthetic_observations = st.builds(
    SyntheticObservations,
    action_rejected=short_texts,
    env_failed=short_texts,
    model_call_failed=short_texts,
)
