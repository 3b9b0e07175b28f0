"""Corrupted copies of real run logs, planted as is in each kind of store.

The logs are the writes of real runs of the crash-matrix agent (``tests.loop_kit``); a
mutation deletes, duplicates, swaps or edits one record of such a log. Planting writes the
mutated records into a store's own storage in the order given: jsonl lines and sqlite rows are
written directly (the way a hand edit or an old writer leaves them, so a file can hold a
duplicate), the memory and postgres stores get them through their write methods (their storage
cannot hold a duplicate at all: they refuse it on write).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import os
import sqlite3
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from types import MappingProxyType
from typing import Any

from polyloop.errors import DuplicateRecordError
from polyloop.ports import RunLog
from polyloop.serialization import LogRecord, dumps_log_record, log_record_tag
from polyloop.session import AgentDefinition, RunRequest, resume, run
from polyloop.stores._records import record_key
from polyloop.stores._sqlite_schema import key_text
from polyloop.stores.jsonl import JsonlRunStore
from polyloop.stores.memory import MemoryRunStore
from polyloop.stores.sqlite import SqliteRunStore
from polyloop.testing import run_log_from
from polyloop.types import (
    ActionOutcome,
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
    SCENARIO,
    Crash,
    CrashingStore,
    Effects,
    MixedExecutor,
    RecordingStore,
    make_definition,
    make_request,
    replies,
    scenario_tools,
)
from tests.stores._helpers import close_store, open_store, write_bytes

RUN_ID = "r"


@dataclass(frozen=True)
class Scenario:
    """A real run of the crash-matrix agent, and the stop reasons its records allow."""

    name: str
    script: tuple[object, ...]
    budget: Budget
    model_replay_policy: ReplayPolicy
    #: Writes the first driver makes before it dies (``None``: it runs to its end).
    crash_after: int | None
    #: Whether a second driver resumes the run to its end after the crash.
    resumed: bool
    #: The stop reason its (finished) log records; a log's records allow it and ``cancelled``.
    reason: StopReason | None

    def request(self) -> RunRequest:
        effects = Effects()
        tools = scenario_tools(effects)
        return make_request(
            RUN_ID,
            tools=tools,
            executor=MixedExecutor(tools, effects),
            budget=self.budget,
            model_replay_policy=self.model_replay_policy,
        )

    def definition(self, store: object) -> AgentDefinition:
        return make_definition(self.script, store)


_BUDGET = Budget(
    max_steps=20, max_actions=20, max_consecutive_parse_failures=3, max_prompt_chars=10**6
)

SCENARIOS = (
    # write (never), read (safe), code, a rejected call, a parse failure, submit (completes).
    Scenario(
        "completed",
        tuple(replies(*SCENARIO)),
        _BUDGET,
        ReplayPolicy.SAFE,
        None,
        False,
        StopReason.TASK_COMPLETED,
    ),
    Scenario(
        "step budget",
        tuple(replies(*SCENARIO)),
        replace(_BUDGET, max_steps=3),
        ReplayPolicy.NEVER,
        None,
        False,
        StopReason.STEP_BUDGET,
    ),
    Scenario(
        "failed model call",
        (*replies(*SCENARIO[:2]), RuntimeError("the model is gone")),
        _BUDGET,
        ReplayPolicy.SAFE,
        None,
        False,
        StopReason.LLM_ERROR,
    ),
    # Died inside the safe `read` action of step 1: unfinished, the action in doubt.
    Scenario(
        "read in doubt",
        tuple(replies(*SCENARIO)),
        _BUDGET,
        ReplayPolicy.SAFE,
        8,
        False,
        None,
    ),
    # Died inside the never `write` action of step 0, then resumed: resume_state_unknown.
    Scenario(
        "write in doubt, resumed",
        tuple(replies(*SCENARIO)),
        _BUDGET,
        ReplayPolicy.SAFE,
        4,
        True,
        StopReason.RESUME_STATE_UNKNOWN,
    ),
    # Died with a model call in doubt, never to be repeated: unfinished.
    Scenario(
        "model call in doubt",
        tuple(replies(*SCENARIO)),
        _BUDGET,
        ReplayPolicy.NEVER,
        10,
        False,
        None,
    ),
)


async def _record(scenario: Scenario) -> tuple[LogRecord, ...]:
    memory = MemoryRunStore()
    first: RecordingStore = (
        RecordingStore(memory)
        if scenario.crash_after is None
        else CrashingStore(memory, scenario.crash_after)
    )
    with contextlib.suppress(Crash):
        await run(scenario.definition(first), scenario.request())
    writes = [record for _, record in first.writes]
    if scenario.resumed:
        second = RecordingStore(memory)
        await resume(scenario.definition(second), scenario.request())
        writes += [record for _, record in second.writes]
    return tuple(writes)  # type: ignore[arg-type]


@functools.cache
def recorded(name: str) -> tuple[LogRecord, ...]:
    """The writes of scenario ``name``'s real run(s), in the order they were made."""
    scenario = next(each for each in SCENARIOS if each.name == name)
    return asyncio.run(_record(scenario))


def grouped(records: Sequence[LogRecord]) -> RunLog:
    """The run log these records make, grouped by kind as ``RunLog`` holds them."""
    return run_log_from(records)


# ---------------------------------------------------------------------------
# Edits of one record
# ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Edit:
    """One way to change one record, and what the library must make of it."""

    name: str
    applies: Callable[[LogRecord], bool]
    change: Callable[[LogRecord], LogRecord]
    #: ``True``: the edited log must be refused; ``None``: nothing in the log can tell.
    detected: Callable[[LogRecord, Sequence[LogRecord]], bool | None]
    #: ``True`` when only ``resume`` (which has the decision parser) can see the edit.
    needs_parser: Callable[[LogRecord, Sequence[LogRecord]], bool] = lambda record, log: False


def _always(record: LogRecord, log: Sequence[LogRecord]) -> bool:
    return True


def _never_told(record: LogRecord, log: Sequence[LogRecord]) -> None:
    return None


def _forced(record: Any, **changes: Any) -> Any:
    """A copy with ``changes``, bypassing checks made at construction (as a hand edit would)."""
    clone = replace(record)
    for name, value in changes.items():
        object.__setattr__(clone, name, value)
    return clone


def _is_finished(log: Sequence[LogRecord]) -> bool:
    return isinstance(log[-1], RunFinished)


def _steps_of(log: Sequence[LogRecord]) -> int:
    return sum(1 for record in log if isinstance(record, StepCompleted))


def _is_tail_action(record: LogRecord, log: Sequence[LogRecord]) -> bool:
    """An action intent of the step in progress (no StepCompleted settles it)."""
    return (
        isinstance(record, Intent)
        and record.kind is IntentKind.ACTION
        and record.call_index == _steps_of(log)
    )


def _has_step(result: LogRecord, log: Sequence[LogRecord]) -> bool:
    return isinstance(result, ModelCallResult) and any(
        isinstance(record, StepCompleted) and f"model-{record.step.step_idx}" == result.result_id
        for record in log
    )


def _replied(record: LogRecord) -> bool:
    return isinstance(record, ModelCallResult) and record.reply is not None


def _same_length_change(text: str) -> str:
    return text[:-1] + ("x" if text[-1:] != "x" else "y") if text else text


def _reply_with(record: Any, content: str) -> Any:
    reply: ModelReply = record.reply
    return replace(record, reply=replace(reply, content=content))


def _result_with(record: Any, **changes: Any) -> Any:
    return RunFinished(record.run_id, _forced(record.result, **changes))


def _other_observation(record: Any) -> Any:
    steps = list(record.result.steps)
    steps[0] = replace(steps[0], observation=steps[0].observation + " (edited)")
    return _result_with(record, steps=tuple(steps))


def _step_observation(record: Any) -> Any:
    return replace(record, step=replace(record.step, observation=record.step.observation + "!"))


def _outcome_observation(record: Any) -> Any:
    outcome: ActionOutcome = record.action_outcome
    return replace(record, action_outcome=replace(outcome, observation=outcome.observation + "!"))


def _flip_policy(record: Any) -> Any:
    flipped = (
        ReplayPolicy.SAFE if record.replay_policy is ReplayPolicy.NEVER else ReplayPolicy.NEVER
    )
    return replace(record, replay_policy=flipped)


def _flip_kind(record: Any) -> Any:
    flipped = IntentKind.ACTION if record.kind is IntentKind.MODEL_CALL else IntentKind.MODEL_CALL
    return replace(record, kind=flipped)


def _stop_reason_edit(reason: StopReason) -> Edit:
    # Each scenario's records allow its own reason and cancelled only, and the edit changes the
    # recorded reason: every other reason must be refused.
    return Edit(
        f"stop_reason -> {reason.value}",
        lambda record: isinstance(record, RunFinished) and record.result.stop_reason is not reason,
        lambda record: _result_with(record, stop_reason=reason),
        lambda record, log: reason is not StopReason.CANCELLED,
    )


EDITS: tuple[Edit, ...] = (
    Edit(
        "run_id",
        lambda record: True,
        lambda record: (
            RunFinished("someone-else", replace(record.result, run_id="someone-else"))
            if isinstance(record, RunFinished)
            else replace(record, run_id="someone-else")  # type: ignore[type-var]
        ),
        _always,
    ),
    Edit(
        "step_idx + 1",
        lambda record: isinstance(record, StepCompleted),
        lambda record: replace(
            record, step=replace(record.step, step_idx=record.step.step_idx + 1)
        ),  # type: ignore[union-attr, type-var]
        _always,
    ),
    Edit(
        "call_index + 1",
        lambda record: isinstance(record, Intent),
        lambda record: replace(record, call_index=record.call_index + 1),  # type: ignore[union-attr, type-var]
        _always,
    ),
    Edit(
        "result_id",
        lambda record: (
            isinstance(record, Intent | ModelCallResult)
            or (isinstance(record, StepCompleted) and record.result_id is not None)
        ),
        lambda record: replace(record, result_id="edited-id"),  # type: ignore[type-var]
        _always,
    ),
    Edit("intent kind", lambda record: isinstance(record, Intent), _flip_kind, _always),
    Edit(
        "replay_policy",
        lambda record: isinstance(record, Intent),
        _flip_policy,
        lambda record, log: None if _is_tail_action(record, log) else True,
        _is_tail_action,
    ),
    *(_stop_reason_edit(reason) for reason in StopReason),
    Edit(
        "result without its last step",
        lambda record: isinstance(record, RunFinished) and bool(record.result.steps),
        lambda record: _result_with(record, steps=record.result.steps[:-1]),  # type: ignore[union-attr]
        _always,
    ),
    Edit(
        "result's first observation",
        lambda record: isinstance(record, RunFinished) and bool(record.result.steps),
        _other_observation,
        _always,
    ),
    Edit(
        "step's observation",
        lambda record: isinstance(record, StepCompleted),
        _step_observation,
        lambda record, log: record.action_outcome is not None or _is_finished(log),  # type: ignore[union-attr]
    ),
    Edit(
        "outcome's observation",
        lambda record: isinstance(record, StepCompleted) and record.action_outcome is not None,
        _outcome_observation,
        _always,
    ),
    Edit(
        "reply text, same length",
        _replied,
        lambda record: _reply_with(record, _same_length_change(record.reply.content)),  # type: ignore[union-attr]
        _never_told,
        lambda record, log: not _has_step(record, log),
    ),
    Edit(
        "reply text, longer",
        _replied,
        lambda record: _reply_with(record, record.reply.content + " (edited)"),  # type: ignore[union-attr]
        lambda record, log: True if _has_step(record, log) else None,
        lambda record, log: not _has_step(record, log),
    ),
    Edit(
        "failure text",
        lambda record: isinstance(record, ModelCallResult) and record.failure is not None,
        lambda record: replace(record, failure="RuntimeError: edited"),  # type: ignore[type-var]
        _never_told,
    ),
    Edit(
        "a snapshot value",
        lambda record: isinstance(record, RunStarted),
        lambda record: RunStarted(
            record.run_id,
            {**record.parameter_snapshot, "request.observation_template": "Seen: {observation}"},  # type: ignore[union-attr]
        ),
        _never_told,
    ),
    Edit(
        "schema_version",
        lambda record: isinstance(record, RunStarted | StepCompleted | RunFinished),
        lambda record: (
            _forced(record, schema_version=2)
            if isinstance(record, RunStarted)
            else replace(record, step=_forced(record.step, schema_version=2))  # type: ignore[union-attr, type-var]
            if isinstance(record, StepCompleted)
            else _result_with(record, schema_version=2)
        ),
        _always,
    ),
)


# ---------------------------------------------------------------------------
# Planting and reading
# ---------------------------------------------------------------------------


async def store_parameters(kind: str, where: str) -> dict[str, str]:
    """What a store on this storage reports as its parameters (and so a run's snapshot holds)."""
    store = open_store(kind, where)
    try:
        return dict(store.parameters())
    finally:
        await close_store(store)


def recorded_here(
    records: Sequence[LogRecord], parameters: dict[str, str]
) -> tuple[LogRecord, ...]:
    """``records`` as the run would have written them on a store with these parameters: its
    snapshot names that store (a run resumed on another store is refused, rightly)."""
    moved: list[LogRecord] = []
    for record in records:
        if isinstance(record, RunStarted):
            snapshot = {
                key: value
                for key, value in record.parameter_snapshot.items()
                if not key.startswith("store.")
            }
            snapshot.update({f"store.{key}": value for key, value in parameters.items()})
            record = _forced(record, parameter_snapshot=MappingProxyType(snapshot))
        moved.append(record)
    return tuple(moved)


def storage_url(kind: str, where: str) -> str:
    """The ``polyloop --store`` URL of the storage ``open_store(kind, where)`` opens."""
    if kind == "jsonl":
        return f"jsonl://{os.path.join(where, 'runs')}"
    return f"sqlite://{os.path.join(where, 'runs.db')}"


async def plant(kind: str, where: str, records: Sequence[LogRecord]) -> list[LogRecord]:
    """Put ``records`` into the storage of ``kind`` at ``where`` in this order; return what it
    holds of run ``RUN_ID`` afterwards, in storage order."""
    if kind == "jsonl":
        store = JsonlRunStore(os.path.join(where, "runs"))
        path = store.path_for(RUN_ID)
        store.close()
        os.makedirs(os.path.dirname(path), exist_ok=True)
        write_bytes(path, b"".join((dumps_log_record(r) + "\n").encode() for r in records))
        return list(records)
    if kind == "sqlite":
        path = os.path.join(where, "runs.db")
        async with SqliteRunStore(path) as sqlite:  # creates the schema
            await sqlite.write_run_started(RunStarted("neighbour", {}))
        return _insert_rows(path, records)
    store = open_store(kind, where)
    if kind == "memory":
        _MEMORY[where] = store  # a memory store's storage is the object
    kept: list[LogRecord] = []
    try:
        for record in records:
            try:
                await _write(store, record)
            except DuplicateRecordError:
                continue  # this storage cannot hold a second one
            if record.run_id == RUN_ID:
                kept.append(record)
    finally:
        if kind != "memory":
            await close_store(store)
    return kept


def _insert_rows(path: str, records: Sequence[LogRecord]) -> list[LogRecord]:
    kept: list[LogRecord] = []
    keys: set[object] = set()
    connection = sqlite3.connect(path, isolation_level=None)
    try:
        for record in records:
            key = record_key(record)
            stored_key = None if key in keys else key_text(key)
            keys.add(key)
            try:
                connection.execute(
                    "INSERT INTO run_records (run_id, kind, body, record_key) VALUES (?, ?, ?, ?)",
                    (RUN_ID, log_record_tag(record), dumps_log_record(record), stored_key),
                )
            except sqlite3.IntegrityError:
                continue  # a second RunStarted/RunFinished: the file cannot hold one
            kept.append(record)
    finally:
        connection.close()
    return kept


#: The memory stores planted, by ``where``: the storage of a memory store is the object itself.
_MEMORY: dict[str, Any] = {}


def reopen(kind: str, where: str) -> Any:
    """A store object on the planted storage (for memory: the planted object itself)."""
    return _MEMORY[where] if kind == "memory" else open_store(kind, where)


async def release(kind: str, where: str, store: Any) -> None:
    if kind == "memory":
        return
    await close_store(store)


def forget(where: str) -> None:
    _MEMORY.pop(where, None)


async def _write(store: Any, record: LogRecord) -> None:
    method = {
        RunStarted: store.write_run_started,
        Intent: store.write_intent,
        ModelCallResult: store.write_model_call_result,
        StepCompleted: store.write_step_completed,
        RunFinished: store.write_run_finished,
    }[type(record)]
    await method(record)
