"""A durable store's caller may wait for its thread on the event-loop thread, briefly, and only
while the loop has nothing else to do (design 0017)."""

from __future__ import annotations

import asyncio
import os
import threading
from typing import Any

import pytest

from polyloop.errors import ConfigurationError
from polyloop.ports import RunStore
from polyloop.stores import _threads
from polyloop.stores.jsonl import JsonlRunStore
from polyloop.stores.sqlite import SqliteRunStore
from polyloop.types import IntentKind
from tests.stores._helpers import (
    DURABLE_KINDS,
    Ticker,
    close_store,
    intent,
    open_store,
    stall_disk,
    started,
)


def _store(kind: str, where: str, **options: Any) -> RunStore:
    return open_store(kind, where, **options)


async def _wake_ups_for_20_writes(store: RunStore, monkeypatch: pytest.MonkeyPatch) -> int:
    """Write 20 intents; count the cross-thread wake-ups of the loop (``call_soon_threadsafe``)
    they caused."""
    loop = asyncio.get_running_loop()
    count = 0
    real = loop.call_soon_threadsafe

    def counting(*args: Any, **kwargs: Any) -> Any:
        nonlocal count
        count += 1
        return real(*args, **kwargs)

    try:
        await store.write_run_started(started("w"))
        with monkeypatch.context() as patch:
            patch.setattr(loop, "call_soon_threadsafe", counting)
            for k in range(20):
                await store.write_intent(intent("w", IntentKind.MODEL_CALL, k))
        assert len((await store.read_log("w")).intents) == 20
        return count
    finally:
        await close_store(store)


@pytest.mark.parametrize("kind", DURABLE_KINDS)
@pytest.mark.parametrize(
    ("idle_wait_ms", "beside_a_ticker", "wake_ups"),
    [
        # the largest bound, so that a slow disk (CI) still answers within it
        pytest.param(100, False, 0, id="idle-loop-no-wake-up"),
        pytest.param(0, False, 20, id="idle-wait-0-always-awaits"),
        pytest.param(100, True, 20, id="other-task-ready-awaits"),
    ],
)
async def test_which_writes_wake_the_loop(
    kind: str,
    idle_wait_ms: int,
    beside_a_ticker: bool,
    wake_ups: int,
    tmp_path: object,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """On an idle loop no write wakes the event loop from a thread; with idle_wait_ms=0, or another
    task ready to run, every write does."""
    store = _store(kind, str(tmp_path), idle_wait_ms=idle_wait_ms)
    if not beside_a_ticker:
        assert await _wake_ups_for_20_writes(store, monkeypatch) == wake_ups
        return
    async with Ticker().running() as ticker:
        assert await _wake_ups_for_20_writes(store, monkeypatch) == wake_ups
    assert ticker.ticks >= 20


@pytest.mark.parametrize("kind", DURABLE_KINDS)
async def test_a_stalled_disk_holds_an_idle_loop_only_for_the_bound(
    kind: str, tmp_path: object, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The disk step waits for a timer 50 ms away. Waiting for it on the loop thread without a
    bound would deadlock (the test then fails after 10 s); with the 1 ms bound the caller gives
    up waiting there, the loop runs the timer, and the write completes."""
    store = _store(kind, str(tmp_path))
    try:
        await store.write_run_started(started("stall"))
        released = threading.Event()
        stall_disk(kind, monkeypatch, released)
        loop = asyncio.get_running_loop()
        loop.call_later(0.05, released.set)
        began = loop.time()
        await store.write_intent(intent("stall", IntentKind.MODEL_CALL, 0))
        assert loop.time() - began >= 0.04
        assert (await store.read_log("stall")).intents == (
            intent("stall", IntentKind.MODEL_CALL, 0),
        )
    finally:
        await close_store(store)


async def test_the_loop_is_idle_only_with_nothing_ready_and_no_timer_due() -> None:
    """The loop counts as idle only with no callback ready and no timer due within the bound."""
    loop = asyncio.get_running_loop()
    assert _threads._loop_is_idle(loop, 0.001)
    handle = loop.call_soon(lambda: None)
    assert not _threads._loop_is_idle(loop, 0.001)
    handle.cancel()
    await asyncio.sleep(0)
    assert _threads._loop_is_idle(loop, 0.001)
    soon = loop.call_later(0.0005, lambda: None)
    assert not _threads._loop_is_idle(loop, 0.001)
    soon.cancel()
    later = loop.call_later(10, lambda: None)
    await asyncio.sleep(0)
    assert _threads._loop_is_idle(loop, 0.001)
    later.cancel()


def test_a_loop_of_another_implementation_is_never_idle() -> None:
    """A loop that is not asyncio's own is never idle, so callers there always await."""

    class Foreign:
        def time(self) -> float:
            return 0.0

    assert not _threads._loop_is_idle(Foreign(), 0.001)  # type: ignore[arg-type]


@pytest.mark.parametrize("store_class", [JsonlRunStore, SqliteRunStore])
@pytest.mark.parametrize("bad", [-1, 101, "1", True, float("nan")])
def test_a_bad_idle_wait_is_refused_with_what_to_pass(
    store_class: type, bad: object, tmp_path: object
) -> None:
    """An idle_wait_ms outside 0..100, or not a number, is refused saying what to pass."""
    with pytest.raises(ConfigurationError, match=r"idle_wait_ms must be a number from 0 to 100"):
        store_class(os.path.join(str(tmp_path), "x"), idle_wait_ms=bad)
