"""Realistic run-log records, the order the loop writes them in, and how to describe a mismatch.

The kit writes only logs the loop itself could write (RunStarted first; per step a model-call
intent, its result, optionally an action intent, then StepCompleted; RunFinished last), so a
store that validates its input is never failed for refusing nonsense.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import TYPE_CHECKING

from polyloop.ports import RunLog
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

if TYPE_CHECKING:
    from polyloop.ports import RunStore

LogRecord = RunStarted | Intent | ModelCallResult | StepCompleted | RunFinished

#: Text that stresses an encoding: quotes, escapes, newlines, NUL, non-BMP, RTL, combining.
AWKWARD_TEXT = 'line one\nline "two"\t\\ \x00 \u2028 é e\u0301 \u05d0\u05d1 \U0001f600 }{ ]['


def model_intent(run_id: str, k: int) -> Intent:
    return Intent(run_id, IntentKind.MODEL_CALL, k, f"model-{k}", ReplayPolicy.SAFE)


def action_intent(run_id: str, k: int) -> Intent:
    return Intent(run_id, IntentKind.ACTION, k, f"action-{k}", ReplayPolicy.NEVER)


def model_result(run_id: str, k: int, *, failed: bool = False) -> ModelCallResult:
    if failed:
        return ModelCallResult(
            run_id, f"model-{k}", None, f"TimeoutError: call {k} of {run_id} timed out"
        )
    reply = ModelReply(
        call_id=f"call-{run_id}-{k}",
        content=f"step {k} of {run_id}: {AWKWARD_TEXT}",
        thinking=f"thinking {k}",
    )
    return ModelCallResult(run_id, f"model-{k}", reply, None)


def outcome(run_id: str, k: int) -> ActionOutcome:
    return ActionOutcome(
        status=ActionStatus.EXECUTED,
        observation=f"observation {k} of {run_id}",
        observation_is_synthetic=False,
        env_reported_completion=False,
        observation_truncated_chars=k,
    )


def step_record(run_id: str, k: int, *, with_action: bool = True) -> StepRecord:
    return StepRecord(
        step_idx=k,
        raw_output=f"step {k} of {run_id}: {AWKWARD_TEXT}",
        content_chars=40 + k,
        thinking_chars=10,
        action=f"search({k})" if with_action else None,
        parse_ok=with_action,
        parse_error=None if with_action else f"no action in step {k}",
        observation=f"observation {k} of {run_id}",
        observation_is_synthetic=not with_action,
        observation_truncated_chars=k if with_action else 0,
        prompt_chars=1000 + k,
        call_id=f"call-{run_id}-{k}",
        step_wall_ms=7 * k,
        tool_name="search" if with_action else None,
        tool_arguments=f'{{"q":"{k}"}}' if with_action else None,
        action_status=ActionStatus.EXECUTED if with_action else None,
        env_reported_completion=False,
    )


def step_completed(run_id: str, k: int, *, with_action: bool = True) -> StepCompleted:
    if with_action:
        return StepCompleted(
            run_id, f"action-{k}", outcome(run_id, k), step_record(run_id, k, with_action=True)
        )
    return StepCompleted(run_id, None, None, step_record(run_id, k, with_action=False))


def run_started(run_id: str, **extra: str) -> RunStarted:
    snapshot = {
        "model_client.model": "contract-model",
        "request.budget.max_steps": "20",
        "request.observation_template": "Observation: {observation}",
        "store.kind": "under-test",
        "request.run": run_id,
        **extra,
    }
    return RunStarted(run_id, snapshot)


def run_finished(run_id: str, steps: tuple[StepRecord, ...] = ()) -> RunFinished:
    result = RunResult(
        run_id=run_id,
        stop_reason=StopReason.AGENT_FINISHED,
        final_answer=f"the answer for {run_id}",
        steps=steps,
        event_delivery_failures=1,
    )
    return RunFinished(run_id, result)


def step_writes(run_id: str, k: int) -> list[LogRecord]:
    """The writes of step ``k``; the pattern varies with ``k`` (action, parse failure, model failure)."""
    kind = k % 3
    if kind == 0:  # an executed action
        return [
            model_intent(run_id, k),
            model_result(run_id, k),
            action_intent(run_id, k),
            step_completed(run_id, k, with_action=True),
        ]
    if kind == 1:  # the reply could not be parsed: no action intent
        return [
            model_intent(run_id, k),
            model_result(run_id, k),
            step_completed(run_id, k, with_action=False),
        ]
    return [  # the model call failed
        model_intent(run_id, k),
        model_result(run_id, k, failed=True),
        step_completed(run_id, k, with_action=False),
    ]


def full_run(run_id: str, steps: int, *, finish: bool = True) -> list[LogRecord]:
    """Every write of a run of ``steps`` steps, in the order the loop makes them."""
    writes: list[LogRecord] = [run_started(run_id)]
    records: list[StepRecord] = []
    for k in range(steps):
        batch = step_writes(run_id, k)
        writes.extend(batch)
        last = batch[-1]
        assert isinstance(last, StepCompleted)
        records.append(last.step)
    if finish:
        writes.append(run_finished(run_id, tuple(records)))
    return writes


async def write(store: RunStore, record: LogRecord) -> None:
    """Hand ``record`` to the store method for its kind."""
    if isinstance(record, RunStarted):
        await store.write_run_started(record)
    elif isinstance(record, Intent):
        await store.write_intent(record)
    elif isinstance(record, ModelCallResult):
        await store.write_model_call_result(record)
    elif isinstance(record, StepCompleted):
        await store.write_step_completed(record)
    else:
        await store.write_run_finished(record)


def method_for(record: LogRecord) -> str:
    return {
        RunStarted: "write_run_started",
        Intent: "write_intent",
        ModelCallResult: "write_model_call_result",
        StepCompleted: "write_step_completed",
        RunFinished: "write_run_finished",
    }[type(record)]


@dataclass
class LogModel:
    """The plain model of one run log: what a correct store returns after these writes."""

    started: RunStarted | None = None
    intents: list[Intent] = field(default_factory=list)
    model_results: list[ModelCallResult] = field(default_factory=list)
    steps: list[StepCompleted] = field(default_factory=list)
    finished: RunFinished | None = None

    def add(self, record: LogRecord) -> None:
        if isinstance(record, RunStarted):
            self.started = record
        elif isinstance(record, Intent):
            self.intents.append(record)
        elif isinstance(record, ModelCallResult):
            self.model_results.append(record)
        elif isinstance(record, StepCompleted):
            self.steps.append(record)
        else:
            self.finished = record

    def log(self) -> RunLog:
        return RunLog(
            self.started,
            tuple(self.intents),
            tuple(self.model_results),
            tuple(self.steps),
            self.finished,
        )


def expected_log(records: list[LogRecord]) -> RunLog:
    model = LogModel()
    for record in records:
        model.add(record)
    return model.log()


def describe(record: object) -> str:
    """A short, readable name of a record for failure messages."""
    if isinstance(record, RunStarted):
        return f"RunStarted(run_id={record.run_id!r})"
    if isinstance(record, Intent):
        return (
            f"Intent(kind={record.kind.value}, call_index={record.call_index}, "
            f"result_id={record.result_id!r})"
        )
    if isinstance(record, ModelCallResult):
        state = "failure" if record.failure is not None else "reply"
        return f"ModelCallResult(result_id={record.result_id!r}, {state})"
    if isinstance(record, StepCompleted):
        action = "with action" if record.result_id is not None else "no action"
        return f"StepCompleted(step {record.step.step_idx}, {action})"
    if isinstance(record, RunFinished):
        return f"RunFinished(stop_reason={record.result.stop_reason.value})"
    return repr(record)


def _first_difference(expected: object, actual: object) -> str:
    """Name the first field that differs between two records of one type."""
    if type(expected) is not type(actual):
        return f"a {type(actual).__name__} where a {type(expected).__name__} belongs"
    try:
        names = [f.name for f in fields(expected)]  # type: ignore[arg-type]
    except TypeError:
        return f"{actual!r} instead of {expected!r}"
    for name in names:
        want, got = getattr(expected, name), getattr(actual, name)
        if want != got:
            inner = _first_difference(want, got) if hasattr(want, "__dataclass_fields__") else ""
            if inner:
                return f"field {name}: {inner}"
            return f"field {name} is {_short(got)} instead of {_short(want)}"
    return "equal fields but unequal records"


def _short(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 120 else text[:117] + "..."


def log_difference(expected: RunLog, actual: object) -> str | None:
    """``None`` when ``actual`` equals ``expected``; else the first difference, in words."""
    if not isinstance(actual, RunLog):
        return f"read_log returned {type(actual).__name__}, not a RunLog"
    for name in ("started", "finished"):
        want, got = getattr(expected, name), getattr(actual, name)
        if want != got:
            if got is None:
                return f"{describe(want)} is missing"
            if want is None:
                return f"an unexpected {describe(got)} is present"
            return f"{describe(want)} reads back with {_first_difference(want, got)}"
    for name in ("intents", "model_results", "steps"):
        want_seq, got_seq = getattr(expected, name), getattr(actual, name)
        if tuple(want_seq) == tuple(got_seq):
            continue
        for position in range(max(len(want_seq), len(got_seq))):
            if position >= len(got_seq):
                return f"{name} #{position}: {describe(want_seq[position])} is missing"
            if position >= len(want_seq):
                return f"{name} #{position}: an unexpected {describe(got_seq[position])} is present"
            want, got = want_seq[position], got_seq[position]
            if want != got:
                if type(want) is type(got) and want in tuple(got_seq):
                    return (
                        f"{name} #{position}: {describe(got)} where {describe(want)} was written "
                        "(records come back out of write order)"
                    )
                return f"{name} #{position}: {describe(want)} reads back with {_first_difference(want, got)}"
        return f"{name} differ"
    return None
