"""Event delivery drives a sink's coroutine by hand (``session._events``): a sink that finishes
without suspending needs no timer, and one that suspends gets the rest of its delivery bounded.
These tests hold the hand-driven path to what awaiting the coroutine would do.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping

import pytest

from polyloop.ports import Event, EventKind
from polyloop.session._events import EventChannel

EVENT = Event(EventKind.STEP_STARTED, "run-1", 0)


class _SuspendingSink:
    """Suspends on the event loop a few times, then keeps the event and what it awaited."""

    def __init__(self, *, fail: bool = False) -> None:
        self.fail = fail
        self.received: list[tuple[Event, str]] = []

    async def emit(self, event: Event) -> None:
        await asyncio.sleep(0)
        future: asyncio.Future[str] = asyncio.get_running_loop().create_future()
        asyncio.get_running_loop().call_soon(future.set_result, "awaited value")
        value = await future
        await asyncio.sleep(0.001)
        if self.fail:
            raise RuntimeError("sink backend went away")
        self.received.append((event, value))

    def parameters(self) -> Mapping[str, str]:
        return {"kind": "suspending"}


async def test_a_sink_that_suspends_is_delivered_with_the_values_it_awaited() -> None:
    """A sink that suspends several times receives what it awaited and counts as delivered."""
    sink = _SuspendingSink()
    channel = EventChannel(sink, "run-1", timeout=5.0)
    delivered = await channel.emit(EVENT)
    assert (True, 0) == (delivered, channel.failures)
    assert [(EVENT, "awaited value")] == sink.received


async def test_a_sink_that_raises_after_suspending_is_counted_and_logged(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """An exception raised after the sink suspended reaches the channel: logged, counted, not raised."""
    channel = EventChannel(_SuspendingSink(fail=True), "run-1", timeout=5.0)
    with caplog.at_level(logging.WARNING, logger="polyloop"):
        delivered = await channel.emit(EVENT)
    assert (False, 1) == (delivered, channel.failures)
    assert any("sink backend went away" in record.getMessage() for record in caplog.records)


async def test_a_suspended_delivery_that_finishes_resets_the_timeouts_in_a_row() -> None:
    """Two timeouts, a delivery that suspends and finishes, two more timeouts: the sink is never
    three timeouts in a row, so it is called every time."""

    class FlakySink:
        def __init__(self, hangs: list[bool]) -> None:
            self.hangs = hangs
            self.calls = 0

        async def emit(self, event: Event) -> None:
            hang = self.hangs[self.calls]
            self.calls += 1
            await asyncio.sleep(0)
            if hang:
                await asyncio.sleep(10)

        def parameters(self) -> Mapping[str, str]:
            return {"kind": "flaky"}

    pattern = [True, True, False, True, True, False]
    sink = FlakySink(pattern)
    channel = EventChannel(sink, "run-1", timeout=0.02)
    delivered = [await channel.emit(EVENT) for _ in pattern]
    assert [not hang for hang in pattern] == delivered
    assert (6, 4) == (sink.calls, channel.failures)
