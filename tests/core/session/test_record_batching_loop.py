"""The loop's batching rule (design 0055): which records share a durable write, and that a run
on a batching store writes exactly the log, and emits exactly the events, of a run writing
each record on its own."""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from dataclasses import replace

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from polyloop.asking import UserAnswered, UserAsked
from polyloop.ports import Event, EventKind, supports_record_batching
from polyloop.recovery import validate_log
from polyloop.serialization import LogRecord
from polyloop.session import UserDecision, resume_or_park, run, run_or_park
from polyloop.stores.memory import MemoryRunStore
from polyloop.testing import RecordingEventSink
from polyloop.types import RunResult
from tests.asking_kit import AboveLimit, gated_request
from tests.loop_kit import (
    SCENARIO,
    Crash,
    Effects,
    MixedExecutor,
    RecordingStore,
    make_definition,
    make_request,
    replies,
    scenario_tools,
    ticking_clock,
)


class AskingStore(RecordingStore):
    """A recording store that writes every record on its own (no batching)."""

    async def write_user_asked(self, record: UserAsked) -> None:
        await self._write("write_user_asked", record)

    async def write_user_answered(self, record: UserAnswered) -> None:
        await self._write("write_user_answered", record)

    def records(self) -> list[object]:
        """Every record written, in order; the wall-clock stamps of asks and answers blanked
        (two runs of the same script ask at different moments)."""
        out: list[object] = []
        for name, record in self.writes:
            out.extend(record if name == "write_records" else [record])  # type: ignore[call-overload]
        return [_unstamped(record) for record in out]


def _unstamped(record: object) -> object:
    if isinstance(record, UserAsked):
        return replace(record, asked_at="")
    if isinstance(record, UserAnswered):
        return replace(record, decided_at="")
    return record


class BatchingStore(AskingStore):
    """The same, with :class:`polyloop.ports.RecordBatching`."""

    async def write_records(self, records: Sequence[LogRecord]) -> None:
        await self._write("write_records", tuple(records))


class CrashingBatchingStore(BatchingStore):
    """Dies (a BaseException, as a process would) once ``crash_after`` writes are durable."""

    def __init__(self, inner: object, crash_after: int) -> None:
        super().__init__(inner)
        self.crash_after = crash_after

    async def _write(self, name: str, record: object) -> None:
        await super()._write(name, record)
        if len(self.writes) >= self.crash_after:
            raise Crash(f"after write #{len(self.writes)}")


def _shape(store: AskingStore) -> list[str]:
    def kind(record: object) -> str:
        name = type(record).__name__
        return f"{name}:{record.kind.value}" if name == "Intent" else name  # type: ignore[attr-defined]

    return [
        "+".join(kind(r) for r in record) if name == "write_records" else kind(record)  # type: ignore[attr-defined]
        for name, record in store.writes
    ]


async def _scenario(store: AskingStore) -> list[Event]:
    effects = Effects()
    tools = scenario_tools(effects)
    sink = RecordingEventSink()
    definition = make_definition(replies(*SCENARIO), store, sink=sink)
    request = make_request("s", tools=tools, executor=MixedExecutor(tools, effects))
    await run(definition, request, clock=ticking_clock())
    return list(sink.events)


def test_the_stores_of_the_library_batch() -> None:
    assert supports_record_batching(MemoryRunStore())
    assert supports_record_batching(BatchingStore(MemoryRunStore()))
    assert not supports_record_batching(AskingStore(MemoryRunStore()))


async def test_a_step_makes_two_writes_and_nothing_else_changes() -> None:
    """A result goes with the action intent, a step with the next model intent; the log and
    the events are those of the same run writing record by record."""
    plain, batched = AskingStore(MemoryRunStore()), BatchingStore(MemoryRunStore())
    plain_events = await _scenario(plain)
    batched_events = await _scenario(batched)
    assert plain_events == batched_events
    assert plain.records() == batched.records()
    assert await plain.inner.read_log("s") == await batched.inner.read_log("s")  # type: ignore[attr-defined]
    assert _shape(batched) == [
        "RunStarted",
        "Intent:model_call",
        "ModelCallResult+Intent:action",  # CALL write
        "StepCompleted+Intent:model_call",
        "ModelCallResult+Intent:action",  # CALL read
        "StepCompleted+Intent:model_call",
        "ModelCallResult+Intent:action",  # RUN: print(6 * 7)
        "StepCompleted+Intent:model_call",
        "ModelCallResult+StepCompleted+Intent:model_call",  # a call the registry rejects
        "ModelCallResult+StepCompleted+Intent:model_call",  # a reply that does not parse
        "ModelCallResult+Intent:action",  # CALL submit, which completes the run
        "StepCompleted",  # the run stops: its step alone, then the finish
        "RunFinished",
    ]
    assert len(plain.writes) == 1 + 6 * 4 - 2 + 1  # two steps attempted no action


async def test_an_event_comes_after_its_record_is_durable() -> None:
    """At every STEP_COMPLETED the inner store already holds the step, and at STEP_STARTED the
    step's model intent is there too when the step before it was held."""
    inner = MemoryRunStore()
    store = BatchingStore(inner)
    seen: list[tuple[str, int, int, int]] = []

    class Looking(RecordingEventSink):
        async def emit(self, event: Event) -> None:
            log = await inner.read_log("s")
            seen.append((event.kind.value, event.step_idx, len(log.steps), len(log.intents)))
            await super().emit(event)

    effects = Effects()
    tools = scenario_tools(effects)
    definition = make_definition(replies(*SCENARIO), store, sink=Looking())
    await run(definition, make_request("s", tools=tools, executor=MixedExecutor(tools, effects)))
    for kind, step, steps, _ in seen:
        if kind == EventKind.STEP_COMPLETED.value:
            assert steps >= step + 1
        if kind == EventKind.RUN_FINISHED.value:
            assert steps == step
    assert [k for k, *_ in seen].count("step_completed") == len(SCENARIO)


async def test_a_parser_that_raises_still_finds_the_result_written() -> None:
    """A held result is written before a failure of the loop propagates."""

    class Raising:
        def parse(self, reply: object) -> object:
            raise RuntimeError("parser bug")

        def parameters(self) -> dict[str, str]:
            return {"kind": "raising"}

    logs = []
    for store in (AskingStore(MemoryRunStore()), BatchingStore(MemoryRunStore())):
        definition = make_definition(replies("RUN: x"), store, parser=Raising())
        with pytest.raises(RuntimeError, match="parser bug"):
            await run(definition, make_request("p"))
        logs.append(await store.inner.read_log("p"))  # type: ignore[attr-defined]
    assert logs[0] == logs[1]
    assert len(logs[1].model_results) == 1


REPLIES = st.sampled_from(
    [
        'CALL refund {"amount": 80}',
        'CALL refund {"amount": 5}',
        'CALL ask_user {"question": "Which?"}',
        "CALL read {}",
        "RUN: print(1)",
        "CALL nope {}",
        "gibberish",
        "FINAL: done",
        "CALL submit {}",
    ]
)
DECISIONS = st.sampled_from(["approve", "reject", "answer"])


def _handler(decisions: list[str]):  # type: ignore[no-untyped-def]
    made = iter(decisions * 20)

    async def ask_now(asked: UserAsked) -> UserDecision:
        choice = next(made)
        if asked.kind.value == "question":
            return UserDecision.answer("the blue one")
        if choice == "reject":
            return UserDecision.reject("not now")
        return UserDecision.approve()

    return ask_now


async def _gated(store: AskingStore, script: list[str], decisions: list[str]) -> object:
    request = gated_request("h", Effects(), max_steps=len(script))
    definition = make_definition(replies(*script), store)
    return await run_or_park(
        definition,
        request,
        approval_policy=AboveLimit(),
        ask_now=_handler(decisions),
        clock=ticking_clock(),
    )


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    script=st.lists(REPLIES, min_size=1, max_size=8),
    decisions=st.lists(DECISIONS, min_size=1, max_size=4),
    crash_at=st.integers(min_value=1, max_value=30),
)
async def test_batching_writes_the_same_log_and_a_crash_leaves_a_prefix(
    script: list[str], decisions: list[str], crash_at: int
) -> None:
    """Random gated runs: the log with batching equals the log without, record by record;
    killed after any durable write, the batching run's log is a prefix of the records, passes
    validate_log, and resuming it finishes the run."""
    plain, batched = AskingStore(MemoryRunStore()), BatchingStore(MemoryRunStore())
    assert await _gated(plain, script, decisions) == await _gated(batched, script, decisions)
    assert plain.records() == batched.records()
    plain_log = await plain.inner.read_log("h")  # type: ignore[attr-defined]
    batched_log = await batched.inner.read_log("h")  # type: ignore[attr-defined]
    assert [_unstamped(a) for a in plain_log.asks] == [_unstamped(a) for a in batched_log.asks]
    assert plain_log.steps == batched_log.steps
    assert plain_log.intents == batched_log.intents

    inner = MemoryRunStore()
    crashing = CrashingBatchingStore(inner, crash_at)
    with contextlib.suppress(Crash):
        await _gated(crashing, script, decisions)
    survived = crashing.records()
    assert survived == plain.records()[: len(survived)]
    log = await inner.read_log("h")
    validate_log(log, "h")
    if log.finished is None:
        outcome = await resume_or_park(
            make_definition(replies(*script), inner),
            gated_request("h", Effects(), max_steps=len(script)),
            approval_policy=AboveLimit(),
            ask_now=_handler(decisions),
            clock=ticking_clock(),
        )
        assert isinstance(outcome, RunResult)
    resumed = await inner.read_log("h")
    validate_log(resumed, "h")
    assert resumed.finished is not None
