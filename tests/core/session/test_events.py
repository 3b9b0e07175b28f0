"""Events: the set, their order and fields, and that a failing or hanging sink never stops a run."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping

import pytest

from polyloop.ports import Event, EventKind
from polyloop.session import resume, run
from polyloop.session._events import HUNG_AFTER_TIMEOUTS
from polyloop.stores.memory import MemoryRunStore
from polyloop.testing import ScriptedExecutor
from polyloop.types import StopReason
from tests.loop_kit import Crash, CrashingStore, make_definition, make_request, replies


async def test_event_sequence_and_fields() -> None:
    """run_started, (step_started, step_completed)*, run_finished — with run_id and indexes."""
    definition = make_definition(replies("RUN: a", "FINAL: b"))
    result = await run(definition, make_request("r", executor=ScriptedExecutor()))
    events: list[Event] = definition.event_sink.events  # type: ignore[attr-defined]
    assert [
        (EventKind.RUN_STARTED, 0),
        (EventKind.STEP_STARTED, 0),
        (EventKind.STEP_COMPLETED, 0),
        (EventKind.STEP_STARTED, 1),
        (EventKind.STEP_COMPLETED, 1),
        (EventKind.RUN_FINISHED, 2),
    ] == [(e.kind, e.step_idx) for e in events]
    assert {"r"} == {e.run_id for e in events}
    assert list(result.steps) == [e.step for e in events if e.kind is EventKind.STEP_COMPLETED]
    assert result == events[-1].result
    assert events[0].resumed is False


async def test_resume_emits_run_started_marked_resumed() -> None:
    """A resumed invocation announces itself with resumed=True and the next step index."""
    memory = MemoryRunStore()
    request = make_request("r", executor=ScriptedExecutor())
    with pytest.raises(Crash):
        await run(make_definition(replies("RUN: a", "FINAL: b"), CrashingStore(memory, 5)), request)
    definition = make_definition(replies("RUN: a", "FINAL: b"), memory)
    await resume(definition, request)
    first = definition.event_sink.events[0]  # type: ignore[attr-defined]
    assert (EventKind.RUN_STARTED, True, 1) == (first.kind, first.resumed, first.step_idx)


async def test_events_carry_the_snapshot_the_model_results_and_the_resume_move() -> None:
    """run_started carries the recorded parameter snapshot; each step_completed the step's
    recorded model result; a resumed run_started the recovery move and the intent in doubt
    (design 0050)."""
    memory = MemoryRunStore()
    request = make_request("r", executor=ScriptedExecutor())
    definition = make_definition(replies("RUN: a", "FINAL: b"), memory)
    await run(definition, request)
    log = await memory.read_log("r")
    assert log.started is not None
    events: list[Event] = definition.event_sink.events  # type: ignore[attr-defined]
    assert dict(log.started.parameter_snapshot) == dict(events[0].parameter_snapshot)
    assert (None, None) == (events[0].resume_move, events[0].intent_in_doubt)
    completed = [e.model_result for e in events if e.kind is EventKind.STEP_COMPLETED]
    assert list(log.model_results) == completed

    memory = MemoryRunStore()
    with pytest.raises(Crash):
        await run(make_definition(replies("RUN: a", "FINAL: b"), CrashingStore(memory, 4)), request)
    definition = make_definition(replies("RUN: a", "FINAL: b"), memory)
    await resume(definition, request)
    started: Event = definition.event_sink.events[0]  # type: ignore[attr-defined]
    assert "stop_state_unknown" == started.resume_move  # a tool-less action is never replayed
    assert started.intent_in_doubt is not None
    assert ("action-0", 0) == (
        started.intent_in_doubt.result_id,
        started.intent_in_doubt.call_index,
    )
    assert dict(log.started.parameter_snapshot) == dict(started.parameter_snapshot)


class _RaisingSink:
    def __init__(self) -> None:
        self.calls = 0

    async def emit(self, event: Event) -> None:
        self.calls += 1
        raise OSError("progress database unreachable")

    def parameters(self) -> Mapping[str, str]:
        return {"kind": "raising"}


async def test_raising_sink_never_stops_the_run_and_is_counted(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Every failed delivery is logged and counted, except the run-finished one (after the record)."""
    sink = _RaisingSink()
    definition = make_definition(replies("RUN: a", "FINAL: b"), sink=sink)
    with caplog.at_level(logging.WARNING, logger="polyloop"):
        result = await run(definition, make_request("r", executor=ScriptedExecutor()))
    assert StopReason.AGENT_FINISHED == result.stop_reason
    assert 6 == sink.calls  # each event tried once: never re-emitted
    assert 5 == result.event_delivery_failures  # run_finished cannot count itself
    recorded = (await definition.store.read_log("r")).finished
    assert recorded is not None
    assert result == recorded.result
    assert any("progress database unreachable" in r.getMessage() for r in caplog.records)


async def test_hanging_sink_is_bounded_then_given_up() -> None:
    """A sink that never returns costs each delivery the timeout, and after three timeouts in a
    row it is no longer called for the rest of the invocation."""

    class HangingSink:
        def __init__(self) -> None:
            self.calls = 0

        async def emit(self, event: Event) -> None:
            self.calls += 1
            await asyncio.Event().wait()

        def parameters(self) -> Mapping[str, str]:
            return {"kind": "hanging"}

    sink = HangingSink()
    script = replies(*(["RUN: x"] * 5), "FINAL: done")
    definition = make_definition(script, sink=sink)
    result = await run(
        definition, make_request("r", executor=ScriptedExecutor()), event_timeout_seconds=0.05
    )
    assert StopReason.AGENT_FINISHED == result.stop_reason
    assert HUNG_AFTER_TIMEOUTS == sink.calls
    assert 1 + 2 * 6 == result.event_delivery_failures


async def test_event_timeout_must_be_positive() -> None:
    """A non-positive event timeout is refused before anything is written."""
    from polyloop.errors import ConfigurationError

    definition = make_definition(replies("FINAL: x"))
    with pytest.raises(ConfigurationError, match="event_timeout_seconds"):
        await run(definition, make_request("r"), event_timeout_seconds=0)
    assert (await definition.store.read_log("r")).started is None
