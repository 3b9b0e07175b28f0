"""``run`` and ``resume`` hold the run's lease from before reading the log until they return."""

from __future__ import annotations

import asyncio
import gc
import math
import os
import time
import weakref
from collections.abc import Mapping
from typing import Any

import pytest

from polyloop.errors import (
    ConfigurationError,
    CorruptLogError,
    RunAlreadyStartedError,
    RunLeaseHeldError,
    RunNotFoundError,
    SnapshotMismatchError,
)
from polyloop.ports import LeaseHolder, ModelCall, RunLease, RunLog
from polyloop.session import AgentDefinition, _lease, resume, run
from polyloop.stores.memory import MemoryRunStore
from polyloop.testing import LineDecisionParser, reply
from polyloop.types import IntentKind, ModelReply, RunStarted, StepCompleted, StopReason
from tests.loop_kit import (
    Effects,
    RecordingStore,
    make_definition,
    make_request,
    replies,
    scenario_tools,
)
from tests.stores._helpers import step

FINISH = replies("CALL noop {}", "FINAL: done")


class GatedModel:
    """Answers ``CALL noop`` then a final answer; call 1 waits until ``gate`` is set."""

    def __init__(self) -> None:
        self.gate = asyncio.Event()
        self.waiting = asyncio.Event()

    async def call(self, call: ModelCall) -> ModelReply:
        if call.call_index == 0:
            return reply("CALL noop {}", call_id="c0")
        self.waiting.set()
        await self.gate.wait()
        return reply("FINAL: done", call_id="c1")

    def parameters(self) -> Mapping[str, str]:
        return {"kind": "gated"}


class Spy:
    """Records every call of a method of the wrapped object (seam calls, ``parameters()``)."""

    def __init__(self, inner: object, name: str, calls: list[str]) -> None:
        self._inner = inner
        self._name = name
        self._calls = calls

    def __getattr__(self, attribute: str) -> Any:
        value = getattr(self._inner, attribute)
        if not callable(value):
            return value

        def called(*args: Any, **kwargs: Any) -> Any:
            self._calls.append(f"{self._name}.{attribute}")
            return value(*args, **kwargs)

        return called


def _tools_request(run_id: str, **options: Any) -> Any:
    return make_request(run_id, tools=scenario_tools(Effects()), **options)


def _definition(store: Any, **seams: Any) -> AgentDefinition:
    plain = make_definition(FINISH, store)
    parts = {
        "model_client": plain.model_client,
        "decision_parser": plain.decision_parser,
        "store": store,
        "event_sink": plain.event_sink,
        "synthetic_observations": plain.synthetic_observations,
    }
    return AgentDefinition(**{**parts, **seams})


async def _hold(store: Any, run_id: str) -> tuple[asyncio.Task[Any], GatedModel]:
    """Start ``run_id`` on ``store`` and let it wait in its second model call."""
    model = GatedModel()
    task = asyncio.create_task(run(_definition(store, model_client=model), _tools_request(run_id)))
    await model.waiting.wait()
    return task, model


def _spied_definition(store: object, calls: list[str]) -> AgentDefinition:
    plain = make_definition(FINISH, store)
    return AgentDefinition(
        model_client=Spy(plain.model_client, "model_client", calls),  # type: ignore[arg-type]
        decision_parser=Spy(plain.decision_parser, "decision_parser", calls),  # type: ignore[arg-type]
        store=Spy(store, "store", calls),  # type: ignore[arg-type]
        event_sink=Spy(plain.event_sink, "event_sink", calls),  # type: ignore[arg-type]
        synthetic_observations=plain.synthetic_observations,
    )


@pytest.mark.parametrize("second", ["run", "resume"])
async def test_a_second_driver_is_refused_at_once_calling_no_seam(second: str) -> None:
    """While one invocation drives a run, a second ``run``/``resume`` of it raises
    RunLeaseHeldError naming the run and this process, having touched nothing but the lease
    (no read, no write, no model call, no parse, no event, not even ``parameters()``)."""
    store = MemoryRunStore()
    task, model = await _hold(store, "busy")
    calls: list[str] = []
    definition = _spied_definition(store, calls)
    with pytest.raises(
        RunLeaseHeldError, match=rf"Run 'busy' is being driven .*{os.getpid()}"
    ) as refused:
        await (run if second == "run" else resume)(definition, _tools_request("busy"))
    assert "busy" == refused.value.run_id
    assert isinstance(refused.value.holder, LeaseHolder)
    assert os.getpid() == refused.value.holder.process_id
    assert ["store.acquire_run_lease"] == calls
    model.gate.set()
    assert StopReason.AGENT_FINISHED == (await task).stop_reason


async def test_the_lease_is_taken_before_the_log_is_read_and_held_to_the_end() -> None:
    """``resume`` takes the lease first, reads after, and gives it back last."""
    store = MemoryRunStore()
    await run(make_definition(FINISH, store), _tools_request("r"))
    calls: list[str] = []
    await resume(_spied_definition(store, calls), _tools_request("r"))
    assert ["store.acquire_run_lease", "store.read_log"] == calls[:2]
    assert await store.run_lease_holder("r") is None


async def test_without_run_leasing_a_second_driver_on_the_same_store_object_is_refused() -> None:
    """A store that does not implement RunLeasing still gets one driver per run on the same
    store object in this process; the registry forgets the run once it is released."""
    store = RecordingStore(MemoryRunStore())
    task, model = await _hold(store, "plain")
    with pytest.raises(RunLeaseHeldError, match="Run 'plain' is being driven"):
        await resume(_definition(store), _tools_request("plain"))
    # Another run on the same store object is not affected.
    assert (
        StopReason.AGENT_FINISHED
        == (await run(make_definition(FINISH, store), _tools_request("other"))).stop_reason
    )
    model.gate.set()
    await task
    assert {} == _lease._local.entries


class Unreferenceable:
    """A store wrapper without ``__weakref__``: the registry must hold it only while leased."""

    __slots__ = ("inner",)

    def __init__(self, inner: MemoryRunStore) -> None:
        self.inner = inner

    def __getattr__(self, attribute: str) -> Any:
        if attribute in ("acquire_run_lease", "run_lease_holder"):
            raise AttributeError(attribute)  # this store does not offer leases
        return getattr(self.inner, attribute)


async def test_the_fallback_registry_keeps_no_store_alive() -> None:
    """After their runs, neither a weakly referenceable store nor one that is not is left in
    the in-process registry; a lease never given back does not keep its store alive."""
    for store in (RecordingStore(MemoryRunStore()), Unreferenceable(MemoryRunStore())):
        await run(make_definition(FINISH, store), _tools_request("r"))
        assert {} == _lease._local.entries
    forgotten = RecordingStore(MemoryRunStore())
    _lease._local.take(forgotten, "never-released")  # as if its driver vanished
    alive = weakref.ref(forgotten)
    del forgotten
    gc.collect()
    assert alive() is None
    await run(make_definition(FINISH, RecordingStore(MemoryRunStore())), _tools_request("r"))
    assert {} == _lease._local.entries


async def _corrupt_log(store: MemoryRunStore, run_id: str, definition: Any) -> None:
    """A log whose step 0 has no model-call intent (resume must refuse it)."""
    from polyloop.session import run_snapshot

    await store.write_run_started(
        RunStarted(run_id, run_snapshot(definition, _tools_request(run_id)))
    )
    await store.write_step_completed(StepCompleted(run_id, None, None, step(0)))


class RaisingParser(LineDecisionParser):
    def parse(self, reply: ModelReply) -> Any:
        raise RuntimeError("parser bug")


class OtherParser(LineDecisionParser):
    def parameters(self) -> Mapping[str, str]:
        return {"kind": "another parser"}


PATHS = [
    "finished",
    "recorded result",
    "run already started",
    "run not found",
    "corrupt log",
    "snapshot mismatch",
    "seam raised",
]


@pytest.mark.parametrize("path", PATHS)
async def test_the_lease_is_given_back_on_every_path(path: str) -> None:
    """Whether the invocation returns or raises, the run's lease is free afterwards."""
    store = MemoryRunStore()
    definition = make_definition(FINISH, store)
    expected: type[BaseException] | None = None
    call = resume
    if path == "finished":
        call = run
    elif path == "recorded result":
        await run(make_definition(FINISH, store), _tools_request("r"))
    elif path == "run already started":
        await run(make_definition(FINISH, store), _tools_request("r"))
        call, expected = run, RunAlreadyStartedError
    elif path == "run not found":
        expected = RunNotFoundError
    elif path == "corrupt log":
        await _corrupt_log(store, "r", definition)
        expected = CorruptLogError
    elif path == "snapshot mismatch":
        await run(make_definition(FINISH, store), _tools_request("r"))
        definition = make_definition(FINISH, store, parser=OtherParser())
        expected = SnapshotMismatchError
    else:
        definition = make_definition(FINISH, store, parser=RaisingParser())
        call, expected = run, RuntimeError
    if expected is None:
        await call(definition, _tools_request("r"))
    else:
        with pytest.raises(expected):
            await call(definition, _tools_request("r"))
    assert await store.run_lease_holder("r") is None


class SlowFinishStore(MemoryRunStore):
    """Records whether the run's lease was held while its RunFinished was being written."""

    __slots__ = ("finish_started", "held_while_finishing")

    def __init__(self) -> None:
        super().__init__()
        self.finish_started = asyncio.Event()
        self.held_while_finishing: list[bool] = []

    async def write_run_finished(self, record: Any) -> None:
        self.finish_started.set()
        await asyncio.sleep(0.05)
        self.held_while_finishing.append(await self.run_lease_holder(record.run_id) is not None)
        await super().write_run_finished(record)


async def test_a_cancelled_run_keeps_its_lease_through_the_shielded_finish_write() -> None:
    """Cancelled mid-model-call: the lease is held while RunFinished(cancelled) is written under
    the shield, and free once the cancellation has propagated."""
    store = SlowFinishStore()
    task, _model = await _hold(store, "c")
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert [True] == store.held_while_finishing
    assert StopReason.CANCELLED == (await store.read_log("c")).finished.result.stop_reason  # type: ignore[union-attr]
    assert await store.run_lease_holder("c") is None


class SlowLeaseStore(MemoryRunStore):
    """A store whose lease is slow to grant and slow to give back (like a server's)."""

    __slots__ = ("acquired", "grant_delay", "released", "releasing")

    def __init__(self, grant_delay: float = 0.0) -> None:
        super().__init__()
        self.grant_delay = grant_delay
        self.acquired = asyncio.Event()
        self.releasing = asyncio.Event()
        self.released = asyncio.Event()

    async def acquire_run_lease(self, run_id: str) -> Any:
        self.acquired.set()
        await asyncio.sleep(self.grant_delay)
        inner = await super().acquire_run_lease(run_id)
        return _SlowRelease(inner, self)


class _SlowRelease:
    def __init__(self, inner: RunLease, store: SlowLeaseStore) -> None:
        self.inner = inner
        self.store = store

    @property
    def run_id(self) -> str:
        return self.inner.run_id

    async def release(self) -> None:
        self.store.releasing.set()
        await asyncio.sleep(0.05)
        await self.inner.release()
        self.store.released.set()


async def test_a_release_interrupted_by_cancellation_runs_to_its_end() -> None:
    """A task cancelled while giving its lease back still gives it back, then ends cancelled."""
    store = SlowLeaseStore()
    task = asyncio.create_task(run(make_definition(FINISH, store), _tools_request("r")))
    await store.releasing.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert store.released.is_set()
    assert await store.run_lease_holder("r") is None
    assert StopReason.AGENT_FINISHED == (await store.read_log("r")).finished.result.stop_reason  # type: ignore[union-attr]


async def test_a_lease_granted_to_a_cancelled_taker_is_given_back() -> None:
    """Cancelled while the store was granting the lease: nothing is read, and the lease the
    store then grants is released at once."""
    store = SlowLeaseStore(grant_delay=0.05)
    task = asyncio.create_task(run(make_definition(FINISH, store), _tools_request("r")))
    await store.acquired.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    await asyncio.wait_for(store.released.wait(), timeout=5)
    assert await store.run_lease_holder("r") is None
    assert RunLog() == await store.read_log("r")


async def test_lease_wait_seconds_waits_for_the_holder_to_finish() -> None:
    """With a wait, a second resume retries until the first driver is done, then returns the
    recorded result."""
    store = MemoryRunStore()
    task, model = await _hold(store, "w")
    same_model = _definition(store, model_client=GatedModel())  # never called: run is done
    waiting = asyncio.create_task(resume(same_model, _tools_request("w"), lease_wait_seconds=30))
    await asyncio.sleep(0.05)
    assert not waiting.done()
    model.gate.set()
    first = await task
    assert first == await waiting


async def test_lease_wait_seconds_gives_up_when_the_wait_is_over() -> None:
    """A wait that ends before the holder does raises RunLeaseHeldError, not before the wait."""
    store = MemoryRunStore()
    task, model = await _hold(store, "w")
    began = time.monotonic()
    with pytest.raises(RunLeaseHeldError):
        await resume(make_definition(FINISH, store), _tools_request("w"), lease_wait_seconds=0.2)
    assert time.monotonic() - began >= 0.2
    model.gate.set()
    await task


@pytest.mark.parametrize("value", [-1, -0.001, math.nan, math.inf, True, "1", None])
@pytest.mark.parametrize("call", ["run", "resume"])
async def test_lease_wait_seconds_must_be_a_finite_number_of_seconds(call: str, value: Any) -> None:
    """A negative, infinite or non-numeric wait is refused before the lease is taken."""
    store = MemoryRunStore()
    with pytest.raises(ConfigurationError, match="lease_wait_seconds"):
        await (run if call == "run" else resume)(
            make_definition(FINISH, store), _tools_request("v"), lease_wait_seconds=value
        )
    assert await store.run_lease_holder("v") is None


@pytest.mark.race
async def test_run_and_resume_racing_over_a_new_run_never_both_drive() -> None:
    """``run`` and ``resume`` of a new run started together on one store: when ``run`` takes
    the lease first it drives and ``resume`` is refused; when ``resume`` does, it finds no run
    while ``run`` is refused, so nobody drives, unless ``run`` was given a wait."""
    store = MemoryRunStore()
    outcomes = await asyncio.gather(
        run(make_definition(FINISH, store), _tools_request("a")),
        resume(make_definition(FINISH, store), _tools_request("a")),
        return_exceptions=True,
    )
    assert StopReason.AGENT_FINISHED == outcomes[0].stop_reason  # type: ignore[union-attr]
    assert isinstance(outcomes[1], RunLeaseHeldError)

    outcomes = await asyncio.gather(
        resume(make_definition(FINISH, store), _tools_request("b")),
        run(make_definition(FINISH, store), _tools_request("b")),
        return_exceptions=True,
    )
    assert [RunNotFoundError, RunLeaseHeldError] == [type(o) for o in outcomes]
    assert RunLog() == await store.read_log("b")

    outcomes = await asyncio.gather(
        resume(make_definition(FINISH, store), _tools_request("c")),
        run(make_definition(FINISH, store), _tools_request("c"), lease_wait_seconds=5),
        return_exceptions=True,
    )
    assert isinstance(outcomes[0], RunNotFoundError)
    assert StopReason.AGENT_FINISHED == outcomes[1].stop_reason  # type: ignore[union-attr]
    log = await store.read_log("c")
    assert 1 == sum(1 for i in log.intents if i.kind is IntentKind.MODEL_CALL and i.call_index == 0)
