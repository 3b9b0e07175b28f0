"""What `resume` refuses, what it returns without calling anything, and the snapshot guard."""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import replace
from typing import cast

import pytest

from polyloop.errors import CorruptLogError, RunNotFoundError, SnapshotMismatchError
from polyloop.ports import RunLog
from polyloop.serialization import LogRecord
from polyloop.session import resume, run
from polyloop.stores.memory import MemoryRunStore
from polyloop.testing import ScriptedExecutor, run_log_from, write_records
from polyloop.types import (
    Budget,
    Intent,
    IntentKind,
    ModelCallResult,
    ModelReply,
    ReplayPolicy,
    RunFinished,
    RunStarted,
    StepCompleted,
    StopReason,
)
from tests.loop_kit import (
    Effects,
    RecordingStore,
    make_definition,
    make_request,
    replies,
    scenario_tools,
)

Write = tuple[str, object]
SCRIPT = ('CALL write {"path": "a"}', "CALL noop {}", "CALL submit {}")


async def _recorded_writes() -> list[Write]:
    store = RecordingStore(MemoryRunStore())
    tools = scenario_tools(Effects())
    await run(make_definition(replies(*SCRIPT), store), make_request("r", tools=tools))
    return list(store.writes)


def _forced(record: object, **changes: object) -> object:
    """Build a record that breaks a constructor invariant (as a buggy store might return)."""
    clone = replace(record)  # type: ignore[type-var]
    for name, value in changes.items():
        object.__setattr__(clone, name, value)
    return clone


def _drop_finish(writes: list[Write]) -> list[Write]:
    return [w for w in writes if w[0] != "write_run_finished"]


def _index(writes: list[Write], name: str, nth: int = 0) -> int:
    return [i for i, w in enumerate(writes) if w[0] == name][nth]


def _set(writes: list[Write], name: str, nth: int, record: object) -> list[Write]:
    out = list(writes)
    out[_index(writes, name, nth)] = (name, record)
    return out


def _get(writes: list[Write], name: str, nth: int = 0) -> object:
    return writes[_index(writes, name, nth)][1]


def _no_run_started(w: list[Write]) -> list[Write]:
    return [x for x in w if x[0] != "write_run_started"]


def _started_other_run(w: list[Write]) -> list[Write]:
    started = _get(w, "write_run_started")
    return _set(w, "write_run_started", 0, _forced(started, run_id="other"))


def _started_unknown_version(w: list[Write]) -> list[Write]:
    started = _get(w, "write_run_started")
    return _set(w, "write_run_started", 0, _forced(started, schema_version=2))


def _intent_other_run(w: list[Write]) -> list[Write]:
    return _set(w, "write_intent", 1, replace(_get(w, "write_intent", 1), run_id="other"))  # type: ignore[type-var]


def _duplicate_intent(w: list[Write]) -> list[Write]:
    return [*_drop_finish(w), ("write_intent", _get(w, "write_intent", 0))]


def _result_id_reused(w: list[Write]) -> list[Write]:
    first = _get(w, "write_intent", 0)
    return [
        *_drop_finish(w),
        ("write_intent", Intent("r", IntentKind.ACTION, 3, first.result_id, ReplayPolicy.NEVER)),
    ]  # type: ignore[attr-defined]


def _result_other_run(w: list[Write]) -> list[Write]:
    return _set(
        w, "write_model_call_result", 0, replace(_get(w, "write_model_call_result"), run_id="x")
    )  # type: ignore[type-var]


def _result_both(w: list[Write]) -> list[Write]:
    return _set(
        w, "write_model_call_result", 0, _forced(_get(w, "write_model_call_result"), failure="E: x")
    )


def _result_neither(w: list[Write]) -> list[Write]:
    return _set(
        w, "write_model_call_result", 0, _forced(_get(w, "write_model_call_result"), reply=None)
    )


def _result_without_intent(w: list[Write]) -> list[Write]:
    extra = ModelCallResult("r", "model-99", ModelReply(None, "x", ""), None)
    return [*_drop_finish(w), ("write_model_call_result", extra)]


def _result_of_wrong_kind(w: list[Write]) -> list[Write]:
    extra = ModelCallResult("r", "action-0", ModelReply(None, "x", ""), None)
    return [*_drop_finish(w), ("write_model_call_result", extra)]


def _second_result(w: list[Write]) -> list[Write]:
    return [*_drop_finish(w), ("write_model_call_result", _get(w, "write_model_call_result", 0))]


def _step_other_run(w: list[Write]) -> list[Write]:
    return _set(
        w, "write_step_completed", 1, replace(_get(w, "write_step_completed", 1), run_id="x")
    )  # type: ignore[type-var]


def _step_unknown_version(w: list[Write]) -> list[Write]:
    completed = _get(w, "write_step_completed", 0)
    step = _forced(completed.step, schema_version=7)  # type: ignore[attr-defined]
    return _set(w, "write_step_completed", 0, replace(completed, step=step))  # type: ignore[type-var]


def _steps_out_of_order(w: list[Write]) -> list[Write]:
    completed = _get(w, "write_step_completed", 1)
    renumbered = replace(completed, step=replace(completed.step, step_idx=5))  # type: ignore[attr-defined, type-var]
    return _set(w, "write_step_completed", 1, renumbered)


def _result_id_without_outcome(w: list[Write]) -> list[Write]:
    return _set(
        w,
        "write_step_completed",
        0,
        _forced(_get(w, "write_step_completed", 0), action_outcome=None),
    )


def _outcome_without_result_id(w: list[Write]) -> list[Write]:
    return _set(
        w, "write_step_completed", 0, _forced(_get(w, "write_step_completed", 0), result_id=None)
    )


def _step_without_model_call(w: list[Write]) -> list[Write]:
    return [x for i, x in enumerate(w) if i != _index(w, "write_model_call_result", 1)]


def _step_result_matches_no_intent(w: list[Write]) -> list[Write]:
    return _set(
        w,
        "write_step_completed",
        0,
        replace(_get(w, "write_step_completed", 0), result_id="action-7"),
    )  # type: ignore[type-var]


def _unsettled_action_of_recorded_step(w: list[Write]) -> list[Write]:
    completed = _get(w, "write_step_completed", 0)
    return _set(w, "write_step_completed", 0, StepCompleted("r", None, None, completed.step))  # type: ignore[attr-defined]


def _intent_ahead(w: list[Write]) -> list[Write]:
    return [
        *_drop_finish(w),
        ("write_intent", Intent("r", IntentKind.MODEL_CALL, 9, "model-9", ReplayPolicy.SAFE)),
    ]


def _action_before_model_result(w: list[Write]) -> list[Write]:
    tail = [
        ("write_intent", Intent("r", IntentKind.MODEL_CALL, 3, "model-3", ReplayPolicy.SAFE)),
        ("write_intent", Intent("r", IntentKind.ACTION, 3, "action-3", ReplayPolicy.SAFE)),
    ]
    return [*_drop_finish(w), *tail]


def _finished_other_run(w: list[Write]) -> list[Write]:
    finished = _get(w, "write_run_finished")
    return _set(w, "write_run_finished", 0, RunFinished("r", replace(finished.result, run_id="x")))  # type: ignore[attr-defined]


def _finished_unknown_version(w: list[Write]) -> list[Write]:
    finished = _get(w, "write_run_finished")
    return _set(
        w, "write_run_finished", 0, RunFinished("r", _forced(finished.result, schema_version=3))
    )  # type: ignore[attr-defined, arg-type]


CORRUPTIONS: Mapping[str, tuple[Callable[[list[Write]], list[Write]], str]] = {
    "records without RunStarted": (_no_run_started, "no RunStarted"),
    "RunStarted of another run": (_started_other_run, "RunStarted: it carries run_id 'other'"),
    "RunStarted with unknown schema version": (_started_unknown_version, "schema_version 2"),
    "intent of another run": (_intent_other_run, "Intent #1 .* run_id 'other'"),
    "intent written twice": (_duplicate_intent, "a second intent of this kind"),
    "result id used by two intents": (_result_id_reused, "already used by another intent"),
    "model result of another run": (_result_other_run, "ModelCallResult #0 .* run_id 'x'"),
    "model result with reply and failure": (_result_both, "exactly one of reply and failure"),
    "model result with neither": (_result_neither, "exactly one of reply and failure"),
    "model result without intent": (_result_without_intent, "no model-call intent"),
    "model result for an action intent": (_result_of_wrong_kind, "no model-call intent"),
    "two results for one model call": (_second_result, "a second result"),
    "step of another run": (_step_other_run, "StepCompleted #1 .* run_id 'x'"),
    "step with unknown schema version": (_step_unknown_version, "schema_version 7"),
    "steps not 0..n-1": (_steps_out_of_order, "numbered 0..n-1"),
    "result_id without action_outcome": (_result_id_without_outcome, "set together"),
    "action_outcome without result_id": (_outcome_without_result_id, "set together"),
    "step without its model call": (_step_without_model_call, "no intent or no result"),
    "step result matching no action intent": (
        _step_result_matches_no_intent,
        "matches no action intent",
    ),
    "action intent a recorded step does not settle": (
        _unsettled_action_of_recorded_step,
        "does not settle",
    ),
    "intent ahead of the next step": (_intent_ahead, "runs ahead of the next step"),
    "action intent before model result": (
        _action_before_model_result,
        "before its step's model call",
    ),
    "RunFinished of another run": (_finished_other_run, "RunFinished: it carries another run_id"),
    "RunFinished with unknown schema version": (_finished_unknown_version, "not readable"),
}


class VerbatimStore:
    """A store that keeps every record it is handed as the log of any run it is asked for,
    refusing and checking nothing, as a broken store would: resume reads exactly what was
    written, whatever run_id, order or repetition the records carry."""

    def __init__(self) -> None:
        self.records: list[LogRecord] = []

    async def write_run_started(self, record: RunStarted) -> None:
        self.records.append(record)

    async def write_intent(self, record: Intent) -> None:
        self.records.append(record)

    async def write_model_call_result(self, record: ModelCallResult) -> None:
        self.records.append(record)

    async def write_step_completed(self, record: StepCompleted) -> None:
        self.records.append(record)

    async def write_run_finished(self, record: RunFinished) -> None:
        self.records.append(record)

    async def read_log(self, run_id: str) -> RunLog:
        return run_log_from(self.records)

    def parameters(self) -> Mapping[str, str]:
        return {"kind": "verbatim"}


async def _stored(writes: list[Write]) -> VerbatimStore:
    """A verbatim store holding ``writes``, written through its public methods."""
    store = VerbatimStore()
    await write_records(store, [cast(LogRecord, record) for _, record in writes])
    return store


@pytest.mark.parametrize("rule", list(CORRUPTIONS))
async def test_resume_refuses_corrupt_log(rule: str) -> None:
    """Each corruption rule makes resume raise CorruptLogError naming the record."""
    mutate, message = CORRUPTIONS[rule]
    store = await _stored(mutate(await _recorded_writes()))
    definition = make_definition(replies(*SCRIPT), store)
    request = make_request("r", tools=scenario_tools(Effects()))
    expected_error: type[Exception] = (
        RunNotFoundError if rule == "records without RunStarted" else CorruptLogError
    )
    if expected_error is RunNotFoundError:
        with pytest.raises(RunNotFoundError):
            await resume(definition, request)
        from polyloop.recovery import validate_log

        with pytest.raises(CorruptLogError, match=message):
            validate_log(await store.read_log("r"), "r")
        return
    with pytest.raises(CorruptLogError, match=message):
        await resume(definition, request)
    assert [] == definition.model_client.calls  # type: ignore[attr-defined]


async def test_unmodified_log_is_valid() -> None:
    """The baseline the corruptions start from validates (so each refusal is the mutation's)."""
    from polyloop.recovery import validate_log

    store = MemoryRunStore()
    for name, record in await _recorded_writes():
        await getattr(store, name)(record)
    validate_log(await store.read_log("r"), "r")


async def test_resume_of_unknown_run_raises() -> None:
    """resume on a run_id with no RunStarted raises RunNotFoundError and writes nothing."""
    store = RecordingStore(MemoryRunStore())
    with pytest.raises(RunNotFoundError, match="nothing to resume"):
        await resume(make_definition(replies("FINAL: x"), store), make_request("nope"))
    assert [] == store.writes


async def test_resume_of_finished_run_returns_recorded_result_and_calls_no_seam() -> None:
    """A finished run's recorded result is returned; model, parser, executor and sink are idle."""
    store = MemoryRunStore()
    first = await run(make_definition(replies("FINAL: 7"), store), make_request("r"))

    class RefusingParser:
        def parse(self, reply: object) -> object:
            raise AssertionError("resume of a finished run parsed a reply")

        def parameters(self) -> dict[str, str]:
            from polyloop.testing import LineDecisionParser

            return dict(LineDecisionParser().parameters())

    definition = make_definition(replies("FINAL: 7"), store, parser=RefusingParser())
    result = await resume(definition, make_request("r"))
    assert first == result
    assert [] == definition.model_client.calls  # type: ignore[attr-defined]
    assert [] == definition.event_sink.events  # type: ignore[attr-defined]


async def test_resume_refuses_changed_parameters_listing_each_key() -> None:
    """A changed budget, binding and template are each listed with old and new value."""
    store = MemoryRunStore()
    request = make_request("r", budget=Budget(1, 5, 3, 10_000))
    await run(make_definition(replies("RUN: a", "RUN: b"), store), request)
    changed = make_request(
        "r",
        budget=Budget(2, 5, 3, 10_000),
        model_binding={"project": "other", "extra": "1"},
        observation_template="Obs: {observation}",
    )
    with pytest.raises(SnapshotMismatchError) as caught:
        await resume(make_definition(replies("RUN: a", "RUN: b"), store), changed)
    message = str(caught.value)
    assert "request.budget.max_steps: recorded '1', now '2'" in message
    assert "request.model_binding.project: recorded 'tests', now 'other'" in message
    assert "request.model_binding.extra: recorded '<absent>', now '1'" in message
    assert (
        "request.observation_template: recorded 'Observation: {observation}', now 'Obs: {observation}'"
        in message
    )


async def test_snapshot_includes_executor_parameters() -> None:
    """Resuming on an executor that reports another session is refused."""
    store = MemoryRunStore()
    await run(
        make_definition(replies("RUN: a"), store),
        make_request(
            "r", executor=ScriptedExecutor(name="session-1"), budget=Budget(1, 5, 3, 10_000)
        ),
    )
    with pytest.raises(
        SnapshotMismatchError,
        match=re.escape("action_executor.name: recorded 'session-1', now 'session-2'"),
    ):
        await resume(
            make_definition(replies("RUN: a"), store),
            make_request(
                "r", executor=ScriptedExecutor(name="session-2"), budget=Budget(1, 5, 3, 10_000)
            ),
        )


async def test_resume_records_finish_when_last_step_ended_the_run() -> None:
    """A log whose last step ended the run gets RunFinished with the derived reason, and the
    final answer is recovered from the recorded reply."""
    writes = _drop_finish(await _recorded_writes())
    store = MemoryRunStore()
    for name, record in writes:
        await getattr(store, name)(record)
    result = await resume(
        make_definition(replies(*SCRIPT), store), make_request("r", tools=scenario_tools(Effects()))
    )
    assert StopReason.TASK_COMPLETED == result.stop_reason
    log = await store.read_log("r")
    assert log.finished is not None
    assert result == log.finished.result

    store = MemoryRunStore()
    final = RecordingStore(store)
    await run(
        make_definition(replies("RUN: a", "FINAL: the answer"), final),
        make_request("f", executor=ScriptedExecutor()),
    )
    fresh = MemoryRunStore()
    for name, record in _drop_finish(final.writes):
        await getattr(fresh, name)(record)

    result = await resume(
        make_definition(replies("RUN: a", "FINAL: the answer"), fresh),
        make_request("f", executor=ScriptedExecutor()),
    )
    assert (StopReason.AGENT_FINISHED, "the answer") == (result.stop_reason, result.final_answer)


def test_run_started_rejects_non_string_snapshot() -> None:
    """RunStarted refuses a snapshot with non-string values."""
    with pytest.raises(ValueError, match="str to str"):
        RunStarted("r", {"a": 1})  # type: ignore[dict-item]
