"""The run logs the kit writes, built with the record builders of :mod:`polyloop.testing`.

The kit writes only what the loop itself could write, record by record: RunStarted first; per
step a model-call intent, its result, an action intent where an action was attempted, then
StepCompleted; RunFinished last — so a store that validates its input is never failed for
refusing nonsense. The text is awkward on purpose (quotes, escapes, NUL, non-BMP, RTL), and
every value differs from run to run and from step to step, so a record filed under the wrong
run or step shows.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

from polyloop.asking import AskKind, UserAnswered, UserAsked, Verdict
from polyloop.serialization import LogRecord
from polyloop.testing import (
    StepWrites,
    code_step,
    model_failure_step,
    parse_failure_step,
    run_log_from,
    tool_step,
    write_records,
)
from polyloop.testing import run_finished as finished_record
from polyloop.testing import run_started as started_record
from polyloop.types import (
    Intent,
    ModelCallResult,
    ReplayPolicy,
    RunFinished,
    RunStarted,
    StepCompleted,
    StepRecord,
    StopReason,
)

if TYPE_CHECKING:
    from polyloop.ports import RunLog, RunStore

__all__ = [
    "AWKWARD_TEXT",
    "LONG_OBSERVATION",
    "LogModel",
    "LogRecord",
    "action_writes",
    "approved_writes",
    "code_writes",
    "expected_log",
    "full_run",
    "method_for",
    "model_failure_writes",
    "parse_failure_writes",
    "run_finished",
    "run_started",
    "step_writes",
    "user_answered",
    "user_asked",
    "write",
]

#: Text that stresses an encoding: quotes, escapes, newlines, NUL, non-BMP, RTL, combining.
AWKWARD_TEXT = 'line one\nline "two"\t\\ \x00 \u2028 é e\u0301 \u05d0\u05d1 \U0001f600 }{ ]['


#: An observation longer than 65 535 characters (and UTF-8 bytes): a tool's whole output.
LONG_OBSERVATION = "".join(f"output line {n:05d}: é 中 \U0001f600\n" for n in range(3_500))


def _content(run_id: str, k: int) -> str:
    return f"step {k} of {run_id}: {AWKWARD_TEXT}"


def _call_id(run_id: str, k: int) -> str:
    return f"call-{run_id}-{k}"


def action_writes(run_id: str, k: int, *, observation: str | None = None) -> StepWrites:
    """Step ``k`` called tool ``search`` (never to be replayed) and it executed."""
    return tool_step(
        run_id,
        k,
        tool_name="search",
        arguments={"q": str(k)},
        observation=f"observation {k} of {run_id}" if observation is None else observation,
        observation_truncated_chars=k,
        action=f"search({k})",
        content=_content(run_id, k),
        thinking=f"thinking {k}",
        call_id=_call_id(run_id, k),
        replay_policy=ReplayPolicy.NEVER,
        prompt_chars=1000 + k,
        step_wall_ms=7 * k,
    )


def parse_failure_writes(run_id: str, k: int) -> StepWrites:
    """Step ``k``'s reply could not be parsed: no action intent."""
    return parse_failure_step(
        run_id,
        k,
        content=_content(run_id, k),
        explanation=f"no action in step {k} of {run_id}",
        thinking=f"thinking {k}",
        call_id=_call_id(run_id, k),
        prompt_chars=1000 + k,
        step_wall_ms=7 * k,
    )


def code_writes(run_id: str, k: int) -> StepWrites:
    """Step ``k`` ran tool-less code."""
    return code_step(
        run_id,
        k,
        f"print({k!r}, {run_id!r})",
        observation=f"{k} {run_id}",
        content=_content(run_id, k),
        call_id=_call_id(run_id, k),
        prompt_chars=1000 + k,
        step_wall_ms=7 * k,
    )


def model_failure_writes(run_id: str, k: int) -> StepWrites:
    """Step ``k``'s model call failed (which ends a run with ``llm_error``)."""
    return model_failure_step(
        run_id,
        k,
        failure=f"TimeoutError: call {k} of {run_id} timed out",
        observation=f"model call {k} of {run_id} failed",
        prompt_chars=1000 + k,
        step_wall_ms=7 * k,
    )


def user_asked(run_id: str, k: int) -> UserAsked:
    """The ask of step ``k`` of :func:`action_writes`: its ``search`` call waits for a person."""
    arguments_json = f'{{"q":"{k}"}}'
    return UserAsked(
        run_id=run_id,
        step=k,
        kind=AskKind.APPROVAL,
        action=f"search({k})",
        tool_name="search",
        arguments_json=arguments_json,
        arguments_sha256=hashlib.sha256(arguments_json.encode()).hexdigest(),
        schema_sha256=hashlib.sha256(b"{}").hexdigest(),
        description_sha256=hashlib.sha256(
            AWKWARD_TEXT.encode("utf-8", "surrogatepass")
        ).hexdigest(),
        policy_name=f"policy of {run_id}",
        question=None,
        asked_at="2026-01-02T03:04:05+00:00",
    )


def user_answered(
    ask: UserAsked, verdict: Verdict = Verdict.APPROVE, **fields: str
) -> UserAnswered:
    """A decision on ``ask``, by a person named after the run (``fields`` override)."""
    decision = UserAnswered(
        run_id=ask.run_id,
        step=ask.step,
        verdict=Verdict.APPROVE,
        arguments_sha256=ask.arguments_sha256,
        arguments_json=None,
        reason=None,
        answer=None,
        decided_by=f"reviewer of {ask.run_id}: {AWKWARD_TEXT}",
        decided_at="2026-01-02T04:05:06+00:00",
    )
    return replace(decision, verdict=verdict, **fields)  # type: ignore[arg-type]


def approved_writes(run_id: str, k: int) -> list[LogRecord]:
    """Step ``k`` of :func:`action_writes`, asked about and approved before its action intent."""
    records = list(action_writes(run_id, k).records)
    ask = user_asked(run_id, k)
    return [*records[:2], ask, user_answered(ask), *records[2:]]


def step_writes(run_id: str, k: int) -> StepWrites:
    """The writes of step ``k`` of a run that goes on; the pattern varies with ``k``."""
    return (action_writes, parse_failure_writes, code_writes)[k % 3](run_id, k)


def run_started(run_id: str, **extra: str) -> RunStarted:
    """A RunStarted whose snapshot names the run; ``extra`` adds (or changes) entries."""
    snapshot = {
        "model_client.model": "contract-model",
        "request.budget.max_steps": "20",
        "request.observation_template": "Observation: {observation}",
        "store.kind": "under-test",
        "request.run": run_id,
        **extra,
    }
    return started_record(run_id, snapshot)


def run_finished(
    run_id: str,
    steps: tuple[StepRecord, ...] = (),
    reason: StopReason = StopReason.STEP_BUDGET,
) -> RunFinished:
    """A RunFinished with ``steps`` (and one event delivery failure, so the count round-trips)."""
    return finished_record(run_id, steps, reason, event_delivery_failures=1)


def full_run(run_id: str, steps: int, *, finish: bool = True) -> list[LogRecord]:
    """Every write of a run of ``steps`` steps, in the order the loop makes them.

    A finished run stops on its step budget, which its snapshot sets to ``steps``.
    """
    writes: list[LogRecord] = [run_started(run_id, **{"request.budget.max_steps": str(steps)})]
    made = [step_writes(run_id, k) for k in range(steps)]
    for step in made:
        writes.extend(step.records)
    if finish:
        writes.append(run_finished(run_id, tuple(step.step for step in made)))
    return writes


async def write(store: RunStore, record: LogRecord) -> None:
    """Hand ``record`` to the store method for its kind."""
    await write_records(store, (record,))


def method_for(record: LogRecord) -> str:
    """The name of the store method that writes ``record``."""
    return {
        RunStarted: "write_run_started",
        Intent: "write_intent",
        ModelCallResult: "write_model_call_result",
        StepCompleted: "write_step_completed",
        RunFinished: "write_run_finished",
        UserAsked: "write_user_asked",
        UserAnswered: "write_user_answered",
    }[type(record)]


def expected_log(records: list[LogRecord]) -> RunLog:
    """What a correct store reads back after ``records`` were written, in order."""
    return run_log_from(records)


@dataclass
class LogModel:
    """The plain model of one run log: the records written, in order."""

    records: list[LogRecord] = field(default_factory=list)

    def add(self, record: LogRecord) -> None:
        self.records.append(record)

    @property
    def finished(self) -> bool:
        return any(isinstance(record, RunFinished) for record in self.records)

    def log(self) -> RunLog:
        return run_log_from(self.records)
