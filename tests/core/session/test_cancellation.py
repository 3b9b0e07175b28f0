"""Cancellation passes through model calls and actions; the finish record is bounded by grace."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping

import pytest

from polyloop.ports import Action, ModelCall
from polyloop.session import run
from polyloop.stores.memory import MemoryRunStore
from polyloop.types import ActionOutcome, ActionStatus, ModelReply, RunFinished, StopReason
from tests.loop_kit import RecordingStore, make_definition, make_request, replies


class _Gate:
    def __init__(self) -> None:
        self.entered = asyncio.Event()

    async def wait_forever(self) -> None:
        self.entered.set()
        await asyncio.Event().wait()


async def test_cancel_during_model_call_records_cancelled() -> None:
    """Cancelling inside the model call writes RunFinished(cancelled) and propagates."""
    gate = _Gate()

    class HangingModel:
        async def call(self, call: ModelCall) -> ModelReply:
            await gate.wait_forever()
            raise AssertionError("unreachable")

        def parameters(self) -> Mapping[str, str]:
            return {"kind": "hanging"}

    store = MemoryRunStore()
    definition = make_definition([], store)
    object.__setattr__(definition, "model_client", HangingModel())
    task = asyncio.create_task(run(definition, make_request("r")))
    await asyncio.wait_for(gate.entered.wait(), 5)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    log = await store.read_log("r")
    assert log.finished is not None
    assert StopReason.CANCELLED == log.finished.result.stop_reason
    assert () == log.model_results  # the interrupted call has no result: resume decides by policy


async def test_cancel_during_action_keeps_earlier_steps_in_result() -> None:
    """A run cancelled in step 1's action records step 0 in its cancelled result."""
    gate = _Gate()

    class SlowSecond:
        def __init__(self) -> None:
            self.count = 0

        async def execute(self, action: Action) -> ActionOutcome:
            self.count += 1
            if self.count == 2:
                await gate.wait_forever()
            return ActionOutcome(ActionStatus.EXECUTED, "fine", False, False, 0)

        def parameters(self) -> Mapping[str, str]:
            return {"kind": "slow"}

    store = MemoryRunStore()
    task = asyncio.create_task(
        run(
            make_definition(replies("RUN: a", "RUN: b"), store),
            make_request("r", executor=SlowSecond()),
        )
    )
    await asyncio.wait_for(gate.entered.wait(), 5)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    log = await store.read_log("r")
    assert log.finished is not None
    assert [0] == [s.step_idx for s in log.finished.result.steps]


async def test_grace_bound_holds_when_the_store_hangs() -> None:
    """With a store that never finishes the finish write, cancellation returns within grace."""
    gate = _Gate()

    class HangingFinishStore(RecordingStore):
        async def write_run_finished(self, record: RunFinished) -> None:
            await asyncio.Event().wait()

    class HangingExecutor:
        async def execute(self, action: Action) -> ActionOutcome:
            await gate.wait_forever()
            raise AssertionError("unreachable")

        def parameters(self) -> Mapping[str, str]:
            return {"kind": "hanging"}

    store = HangingFinishStore(MemoryRunStore())
    request = make_request("r", executor=HangingExecutor(), cancel_grace_seconds=0.2)
    task = asyncio.create_task(run(make_definition(replies("RUN: x"), store), request))
    await asyncio.wait_for(gate.entered.wait(), 5)
    began = time.monotonic()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    waited = time.monotonic() - began
    # Correctness bound, not a speed target: it must give up (grace 0.2 s), not hang forever.
    assert 0.15 <= waited < 5.0
    assert (await store.read_log("r")).finished is None


async def test_cancel_while_announcing_the_end_keeps_the_recorded_result() -> None:
    """Cancellation during the run-finished event does not try to finish the run a second time."""
    from polyloop.ports import Event, EventKind

    entered = asyncio.Event()

    class SlowFinishSink:
        async def emit(self, event: Event) -> None:
            if event.kind is EventKind.RUN_FINISHED:
                entered.set()
                await asyncio.Event().wait()

        def parameters(self) -> Mapping[str, str]:
            return {"kind": "slow-finish"}

    store = RecordingStore(MemoryRunStore())
    definition = make_definition(replies("FINAL: x"), store, sink=SlowFinishSink())
    task = asyncio.create_task(run(definition, make_request("r"), event_timeout_seconds=30))
    await asyncio.wait_for(entered.wait(), 5)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    finishes = [r for name, r in store.writes if name == "write_run_finished"]
    assert 1 == len(finishes)
    assert StopReason.AGENT_FINISHED == finishes[0].result.stop_reason  # type: ignore[attr-defined]
