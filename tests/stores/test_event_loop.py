"""Neither durable store blocks the event loop while it writes."""

from __future__ import annotations

import asyncio
import threading

import pytest

from polyloop.types import IntentKind
from tests.stores._helpers import Opened, Ticker, intent, stall_disk, started, write_run


async def test_the_event_loop_keeps_running_during_a_burst_of_writes(durable: Opened) -> None:
    """A ticker that yields with sleep(0) is always ready: if a write blocked the loop (did
    its I/O on it), the ticker could not run while that write was in flight."""
    store = durable.store
    seen: list[int] = []
    async with Ticker().running() as ticker:
        await asyncio.sleep(0)
        await store.write_run_started(started("t"))
        for k in range(200):
            before = ticker.ticks
            await store.write_intent(intent("t", IntentKind.MODEL_CALL, k))
            seen.append(ticker.ticks - before)
        before = ticker.ticks
        await asyncio.gather(
            *(write_run(store, f"burst-{i}", 3) for i in range(20)), return_exceptions=False
        )
        seen.append(ticker.ticks - before)
    assert min(seen) >= 1


async def test_a_write_stalled_on_disk_leaves_the_loop_free(
    durable: Opened, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The disk step of a write is made to wait until the event loop has ticked 5 more
    times. If that step ran on the event loop thread, the ticker could never tick and the
    write would fail after the 10 s guard instead of completing."""
    await durable.store.write_run_started(started("stall"))
    ticked = threading.Event()
    ticks = 0

    async def ticker() -> None:
        nonlocal ticks
        while True:
            ticks += 1
            if ticks >= 5:
                ticked.set()
            await asyncio.sleep(0)

    stall_disk(durable.kind, monkeypatch, ticked)
    task = asyncio.create_task(ticker())
    try:
        await durable.store.write_intent(intent("stall", IntentKind.MODEL_CALL, 0))
    finally:
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
    assert ticks >= 5
    assert (await durable.store.read_log("stall")).intents == (
        intent("stall", IntentKind.MODEL_CALL, 0),
    )
