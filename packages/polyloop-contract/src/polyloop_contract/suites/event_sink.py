"""EventSink contract: parameters rules; a healthy sink takes every kind of event unchanged."""

from __future__ import annotations

import inspect
from collections.abc import Awaitable
from typing import cast

import pytest

from polyloop.ports import Event, EventKind, EventSink
from polyloop.types import RunResult, StepRecord, StopReason
from polyloop_contract._checks import (
    Rule,
    check_parameters_no_io,
    check_parameters_shape,
    check_parameters_stable_no_secrets,
)
from polyloop_contract._records import action_writes, parse_failure_writes
from polyloop_contract.suites._cancel import check_cancellation_passes_through

SEAM = "EventSink"
aio = pytest.mark.asyncio


def sample_events() -> list[Event]:
    """One event of each kind, as a two-step run emits them."""
    run_id = "polyloop-contract"
    steps: tuple[StepRecord, ...] = (
        action_writes(run_id, 0).step,
        parse_failure_writes(run_id, 1).step,
    )
    return [
        Event(
            EventKind.RUN_STARTED,
            run_id,
            0,
            injection_entry_ids={"skills": ("skill-a", "skill-b"), "notes": ()},
        ),
        Event(EventKind.STEP_STARTED, run_id, 0),
        Event(EventKind.STEP_COMPLETED, run_id, 0, step=steps[0]),
        Event(EventKind.STEP_STARTED, run_id, 1),
        Event(EventKind.STEP_COMPLETED, run_id, 1, step=steps[1]),
        Event(
            EventKind.RUN_FINISHED,
            run_id,
            2,
            result=RunResult(run_id, StopReason.AGENT_FINISHED, "done", steps),
        ),
    ]


@aio
async def test_emit_accepts_every_kind_of_event(polyloop_event_sink: EventSink) -> None:
    """A healthy sink's emit is a coroutine method that takes each kind of event and returns None."""
    rule = Rule(SEAM, "emit accepts every kind of event")
    rule.check(
        inspect.iscoroutinefunction(polyloop_event_sink.emit),
        "emit is not declared `async def`; the loop awaits it",
    )
    for event in sample_events():
        result = await rule.call(
            f"emit({event.kind.value} event of step {event.step_idx})",
            cast("Awaitable[object]", polyloop_event_sink.emit(event)),
        )
        rule.check(result is None, f"emit returned {result!r}; it returns nothing")


@aio
async def test_emit_leaves_the_event_unchanged(polyloop_event_sink: EventSink) -> None:
    """emit does not alter the event it is given (other sinks and the run still hold it)."""
    rule = Rule(SEAM, "emit leaves the event unchanged")
    for event, before in zip(sample_events(), sample_events(), strict=True):
        await rule.call(f"emit({event.kind.value} event)", polyloop_event_sink.emit(event))
        rule.check(event == before, f"emit changed the {event.kind.value} event to {event!r}")


@aio
async def test_cancellation_passes_through(polyloop_event_sink: EventSink) -> None:
    """Cancelling an emit in flight ends it with CancelledError."""
    await check_cancellation_passes_through(
        SEAM, "emit(run_started event)", polyloop_event_sink.emit(sample_events()[0])
    )


def test_parameters_are_synchronous_and_str_valued(polyloop_event_sink: EventSink) -> None:
    """parameters() is a plain method returning a mapping of str to str."""
    check_parameters_shape(SEAM, polyloop_event_sink)


def test_parameters_do_no_io_and_are_cheap(polyloop_event_sink: EventSink) -> None:
    """parameters() opens no file, socket or process, does not sleep, and returns at once."""
    check_parameters_no_io(SEAM, polyloop_event_sink)


def test_parameters_are_stable_and_hold_no_secrets(polyloop_event_sink: EventSink) -> None:
    """parameters() answers the same twice and names no credential."""
    check_parameters_stable_no_secrets(SEAM, polyloop_event_sink)
