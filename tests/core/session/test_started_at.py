"""``RunStarted.started_at`` (design 0061): the loop dates every run it starts (``run`` and
``follow_up``), from the clock's ``utc_iso()`` when it has one, else the real UTC time; the
time is not in the parameter snapshot, so resume never compares it."""

from __future__ import annotations

import datetime
from dataclasses import replace

import pytest

from polyloop.ports import RunStore
from polyloop.session import follow_up, resume, run
from polyloop.stores.memory import MemoryRunStore
from polyloop.testing import write_records
from polyloop.types import StopReason
from tests.loop_kit import (
    Crash,
    CrashingStore,
    DatedClock,
    Effects,
    make_definition,
    make_request,
    replies,
    scenario_tools,
)


async def _started_at(store: RunStore, run_id: str) -> str | None:
    started = (await store.read_log(run_id)).started
    assert started is not None
    return started.started_at


async def test_a_run_records_the_utc_second_it_started() -> None:
    """With the default clock, started_at is the real UTC time to the second, taken between
    the call and its return, in the form asked_at has."""
    store = MemoryRunStore()
    before = datetime.datetime.now(datetime.UTC).replace(microsecond=0)
    await run(make_definition(replies("FINAL: ok"), store), make_request("r"))
    after = datetime.datetime.now(datetime.UTC)
    text = await _started_at(store, "r")
    assert text is not None
    parsed = datetime.datetime.fromisoformat(text)
    assert parsed.utcoffset() == datetime.timedelta(0)
    assert before <= parsed <= after
    assert text == parsed.isoformat(timespec="seconds")


async def test_a_clock_with_a_utc_time_dates_runs_and_follow_ups() -> None:
    """run and follow_up take the clock's utc_iso(); the parameter snapshot has no time."""
    store = MemoryRunStore()
    await run(
        make_definition(replies("FINAL: one"), store),
        make_request("t1"),
        clock=DatedClock("2001-02-03T04:05:06+00:00"),
    )
    await follow_up(
        make_definition(replies("FINAL: two"), store),
        "t1",
        make_request("t2"),
        "and?",
        clock=DatedClock("2001-02-03T04:05:07+00:00"),
    )
    assert "2001-02-03T04:05:06+00:00" == await _started_at(store, "t1")
    assert "2001-02-03T04:05:07+00:00" == await _started_at(store, "t2")
    started = (await store.read_log("t2")).started
    assert started is not None
    assert not [key for key in started.parameter_snapshot if "started" in key]


@pytest.mark.parametrize("stored", [None, "1999-12-31T23:59:59+00:00"])
async def test_resume_does_not_compare_the_start_time(stored: str | None) -> None:
    """A crashed run resumes whatever its RunStarted says about the time (none, as in a log
    written before the field existed, or another), and resume writes no second start."""
    crashed = MemoryRunStore()
    script = replies("CALL read {}", "FINAL: done")
    crashing = make_definition(script, CrashingStore(crashed, crash_after=5))
    with pytest.raises(Crash):
        await run(crashing, make_request("c", tools=scenario_tools(Effects())))
    log = await crashed.read_log("c")
    assert log.started is not None
    assert log.started.started_at is not None
    store = MemoryRunStore()
    await write_records(
        store,
        [
            replace(log.started, started_at=stored),
            *log.intents,
            *log.model_results,
            *log.steps,
        ],
    )
    resumed = make_definition(script, store)
    result = await resume(resumed, make_request("c", tools=scenario_tools(Effects())))
    assert StopReason.AGENT_FINISHED == result.stop_reason
    assert stored == await _started_at(store, "c")
