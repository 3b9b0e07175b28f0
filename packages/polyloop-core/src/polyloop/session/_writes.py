"""The loop's store writes, and the one rule of which records share a durable write (design 0055).

The loop *holds* a record when, from that record to its next write, it only computes: it calls
no seam (model client, action executor, ask handler), delivers no event and awaits nothing. A
held record goes down with the next write, in one :meth:`RecordBatching.write_records` call, so
it is durable before anything happens that the record's durability could matter to:

- a model call's result is held: parsing the reply, checking the tool call and deciding whether
  to ask a person are computation, and the next write (the action intent, the ``UserAsked``, or
  the ``StepCompleted`` of a step without an action) precedes the next side effect;
- a ``StepCompleted`` is held: the stop decision and the next step's budget checks are
  computation, and the next write (the next step's model intent) precedes the model call.
  A run that stops instead writes it on its own (:meth:`Writes.flush`) and delivers its events
  before the ``RunFinished``, whose result counts every failed delivery before it.

Every intent is therefore still durable before the side effect it announces, and the records
reach the store in the order the individual writes would give. An event reports a record only
once it is durable: :meth:`Writes.announce` delivers it at once when nothing is held, else right
after the write that makes the held records durable, in announcement order. A store without
:class:`~polyloop.ports.RecordBatching` holds nothing: each record is written on its own,
exactly as before.
"""

from __future__ import annotations

from polyloop.asking import UserAnswered, UserAsked
from polyloop.ports import BatchedRecord, Event, RecordBatching, RunStore, UserAsking
from polyloop.session._events import EventChannel
from polyloop.types import Intent, ModelCallResult, RunFinished, RunStarted, StepCompleted

__all__ = ["Writes", "write_one"]


class Writes:
    """The writes of one invocation of one run, and the events waiting for them."""

    __slots__ = ("_batcher", "_events", "_held", "_store", "_waiting")

    def __init__(self, store: RunStore, events: EventChannel) -> None:
        self._store = store
        self._events = events
        self._batcher = store if isinstance(store, RecordBatching) else None
        self._held: list[BatchedRecord] = []
        self._waiting: list[Event] = []

    async def hold(self, record: BatchedRecord) -> None:
        """``record`` goes down with the next write; the caller promises only computation
        until then (see the module's rule). Written at once on a store that cannot batch."""
        if self._batcher is not None:
            self._held.append(record)
        else:
            await write_one(self._store, record)

    async def write(self, record: BatchedRecord) -> None:
        """Make the held records and ``record`` durable (one write), then deliver the events
        that waited for them."""
        held = self._held
        if not held:
            await write_one(self._store, record)
            return
        self._held = []
        held.append(record)
        assert self._batcher is not None  # only a batching store holds records
        await self._batcher.write_records(held)
        await self._deliver_waiting()

    async def announce(self, event: Event) -> None:
        """Deliver ``event`` once every record held before it is durable."""
        if self._held:
            self._waiting.append(event)
        else:
            await self._events.emit(event)

    async def flush(self) -> None:
        """Write what is held now, and deliver the events waiting for it (the run stops, or
        the loop failed)."""
        held = self._held
        if held:
            self._held = []
            assert self._batcher is not None  # only a batching store holds records
            await self._batcher.write_records(held)
            await self._deliver_waiting()

    async def _deliver_waiting(self) -> None:
        waiting = self._waiting
        if waiting:
            self._waiting = []
            for event in waiting:
                await self._events.emit(event)


async def write_one(store: RunStore, record: BatchedRecord) -> None:
    """``record`` through the store method of its kind."""
    if isinstance(record, Intent):
        await store.write_intent(record)
    elif isinstance(record, ModelCallResult):
        await store.write_model_call_result(record)
    elif isinstance(record, StepCompleted):
        await store.write_step_completed(record)
    elif isinstance(record, RunFinished):
        await store.write_run_finished(record)
    elif isinstance(record, RunStarted):
        await store.write_run_started(record)
    else:
        assert isinstance(store, UserAsking)  # a gated run is refused at start otherwise
        if isinstance(record, UserAsked):
            await store.write_user_asked(record)
        else:
            assert isinstance(record, UserAnswered)
            await store.write_user_answered(record)
