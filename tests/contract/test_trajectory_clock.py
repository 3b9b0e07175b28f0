"""The kit's test clock makes ``step_wall_ms`` and ``started_at`` the same on every run, whatever
the tool does."""

from __future__ import annotations

import asyncio
import random
from collections.abc import Mapping

import pytest
from hypothesis import given
from hypothesis import strategies as st

from polyloop.ports import RunLog
from polyloop.session import run
from polyloop.stores.memory import MemoryRunStore
from polyloop.tools import Tool, ToolRegistry, ToolSpec
from polyloop.types import RunResult
from polyloop_contract.clock import TickingClock
from polyloop_contract.trajectory_json import trajectory_json
from tests.loop_kit import OBJECT_SCHEMA, make_definition, make_request, replies


@given(st.integers(min_value=0, max_value=10_000), st.integers(min_value=0, max_value=5_000))
def test_any_two_consecutive_readings_are_one_tick_apart(tick_ms: int, earlier_calls: int) -> None:
    """However often the clock was read before, two consecutive readings measure one tick."""
    clock = TickingClock(tick_ms)
    for _ in range(earlier_calls):
        clock()
    started = clock()
    assert tick_ms == max(0, round((clock() - started) * 1000))
    assert earlier_calls + 2 == clock.calls


@pytest.mark.parametrize("tick_ms", [-1, 1.5, True, "1"])
def test_a_tick_must_be_whole_non_negative_milliseconds(tick_ms: object) -> None:
    """A negative, fractional, boolean or text tick is refused, saying what a tick must be."""
    with pytest.raises(ValueError, match="whole, non-negative number of milliseconds"):
        TickingClock(tick_ms)  # type: ignore[arg-type]


async def _lookup(arguments: Mapping[str, object]) -> str:
    await asyncio.sleep(random.uniform(0.002, 0.009))
    return f"order {arguments['order']} shipped"


async def _run_once(clock: TickingClock | None) -> tuple[RunResult, RunLog]:
    """A scripted two-step run whose tool sleeps 2-9 ms: its result and its log."""
    spec = ToolSpec("lookup", "Look an order up.", OBJECT_SCHEMA)
    tools = ToolRegistry([Tool(spec, _lookup)])
    store = MemoryRunStore()
    definition = make_definition(replies('CALL lookup {"order": "A-17"}', "FINAL: shipped"), store)
    request = make_request("order-run", tools=tools)
    if clock is None:
        result = await run(definition, request)
    else:
        result = await run(definition, request, clock=clock)
    return result, await store.read_log("order-run")


async def test_runs_with_a_ticking_clock_have_identical_snapshots() -> None:
    """Two runs whose tool sleeps a random few milliseconds give the same snapshots, every step
    recording one tick, while the real clock sees the sleep."""
    first_result, first_log = await _run_once(TickingClock())
    second_result, second_log = await _run_once(TickingClock())
    assert trajectory_json(first_result) == trajectory_json(second_result)
    assert trajectory_json(first_log) == trajectory_json(second_log)
    assert [1, 1] == [step.step_wall_ms for step in first_result.steps]
    assert first_log.started is not None
    assert TickingClock.UTC_ISO == first_log.started.started_at
    real_clock_result, real_clock_log = await _run_once(None)
    assert real_clock_result.steps[0].step_wall_ms >= 2
    assert real_clock_log.started is not None
    assert TickingClock.UTC_ISO != real_clock_log.started.started_at


def test_reading_the_utc_time_is_not_a_call() -> None:
    """utc_iso() is fixed and leaves the count of readings (hence step_wall_ms) alone."""
    clock = TickingClock()
    clock()
    assert ("2000-01-01T00:00:00+00:00", 1) == (clock.utc_iso(), clock.calls)
