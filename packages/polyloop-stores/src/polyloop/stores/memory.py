"""An in-process RunStore: for tests, examples and short-lived harness runs.

Nothing survives the process. Records are immutable values (frozen dataclasses whose mappings
are private read-only copies), so the store keeps the objects it is given and hands the same
objects back: there is nothing a caller could mutate through them.

It lists its runs (:class:`polyloop.ports.RunListing`), holds the records of runs that ask a
person (:class:`polyloop.ports.UserAsking`), takes several records of a run in one write
(:class:`polyloop.ports.RecordBatching`, like the durable stores, so runs on it take the same
path through the loop) and can be closed like the durable stores
(:class:`polyloop.ports.StoreClosing`), which releases nothing.

Its storage is the store object, so run leases (:class:`polyloop.ports.RunLeasing`) are per
object: at most one holder of a run's lease across every task and thread using the object. A
child forked from the process holds none of them.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from polyloop.asking import (
    UserAnswered,
    UserAsked,
)
from polyloop.leasing import LeaseTable, ReleasedOnce, forget_in_forked_child
from polyloop.ports import LeaseHolder, RunLog
from polyloop.serialization import LogRecord
from polyloop.stores._copying import moved_record
from polyloop.stores._durable import batch_run_id
from polyloop.stores._records import KeySet, RecordKey, duplicate_error, record_key
from polyloop.types import (
    Intent,
    ModelCallResult,
    RunFinished,
    RunStarted,
    StepCompleted,
)

__all__ = ["MemoryRunStore"]

_WHERE = "this MemoryRunStore"


@dataclass(slots=True)
class _Log:
    started: RunStarted | None = None
    intents: list[Intent] = field(default_factory=list)
    model_results: list[ModelCallResult] = field(default_factory=list)
    steps: list[StepCompleted] = field(default_factory=list)
    finished: RunFinished | None = None
    asks: list[UserAsked] = field(default_factory=list)
    answers: list[UserAnswered] = field(default_factory=list)
    #: The keys of every record above: a log holds each at most once.
    keys: KeySet = field(default_factory=KeySet)


class _MemoryLease(ReleasedOnce):
    """A run's lease on one :class:`MemoryRunStore`."""

    __slots__ = ("_store",)

    def __init__(self, store: MemoryRunStore, run_id: str) -> None:
        super().__init__(run_id)
        self._store = store

    async def _give_back(self) -> None:
        self._store._leases.give_back(self.run_id, self)


class MemoryRunStore:
    """Run logs of many runs in a dict keyed by run_id. Safe across tasks and threads."""

    __slots__ = ("__weakref__", "_leases", "_lock", "_logs")

    def __init__(self) -> None:
        self._logs: dict[str, _Log] = {}
        self._lock = threading.Lock()
        self._leases: LeaseTable[_MemoryLease] = LeaseTable()
        forget_in_forked_child(self)

    def _log(self, run_id: str) -> _Log:
        log = self._logs.get(run_id)
        if log is None:
            log = self._logs[run_id] = _Log()
        return log

    def _add(self, record: LogRecord, log: _Log) -> None:
        """Count ``record`` in ``log`` (the caller holds the lock), refusing a second one."""
        key = record_key(record)
        if key in log.keys:
            raise duplicate_error(record.run_id, key, _WHERE)
        log.keys.add(key)

    async def write_run_started(self, record: RunStarted) -> None:
        with self._lock:
            log = self._log(record.run_id)
            self._add(record, log)
            log.started = record

    async def write_intent(self, record: Intent) -> None:
        with self._lock:
            log = self._log(record.run_id)
            self._add(record, log)
            log.intents.append(record)

    async def write_model_call_result(self, record: ModelCallResult) -> None:
        with self._lock:
            log = self._log(record.run_id)
            self._add(record, log)
            log.model_results.append(record)

    async def write_step_completed(self, record: StepCompleted) -> None:
        with self._lock:
            log = self._log(record.run_id)
            self._add(record, log)
            log.steps.append(record)

    async def write_run_finished(self, record: RunFinished) -> None:
        with self._lock:
            log = self._log(record.run_id)
            self._add(record, log)
            log.finished = record

    async def write_user_asked(self, record: UserAsked) -> None:
        """Record an ask (:class:`polyloop.ports.UserAsking`)."""
        with self._lock:
            log = self._log(record.run_id)
            self._add(record, log)
            log.asks.append(record)

    async def write_user_answered(self, record: UserAnswered) -> None:
        """Record a decision, once per ask (:class:`polyloop.ports.UserAsking`)."""
        with self._lock:
            log = self._log(record.run_id)
            self._add(record, log)
            log.answers.append(record)

    async def write_records(self, records: Sequence[LogRecord]) -> None:
        """Store ``records``, all of one run, in order, or none of them when one is refused
        (:class:`polyloop.ports.RecordBatching`)."""
        if not records:
            return
        run_id = records[0].run_id
        keys = []
        for record in records:
            if record.run_id != run_id:
                batch_run_id(records, "MemoryRunStore")  # raises, naming both runs
            keys.append(record_key(record))
        with self._lock:
            log = self._log(run_id)
            held = log.keys
            # A set of the batch's earlier keys: a fork's copy is one batch of thousands.
            earlier: set[RecordKey] = set()
            for key in keys:
                if key in held or key in earlier:
                    raise duplicate_error(run_id, key, _WHERE)
                earlier.add(key)
            for record, key in zip(records, keys, strict=True):
                held.add(key)
                _APPEND[type(record)](log, record)

    async def copy_records(
        self, started: RunStarted, source_run_id: str, records: Sequence[LogRecord]
    ) -> bool:
        """Store ``started`` and ``records`` under its run id on an empty log
        (:class:`polyloop.ports.RecordCopying`); each copy shares every field but the run id
        with its record (immutable values). ``False``, storing nothing, when the log of
        ``started`` is not empty or a record is not the source's: then the caller writes them
        one way or another and the usual refusals apply."""
        run_id = started.run_id
        with self._lock:
            if self._logs.get(source_run_id) is None or run_id in self._logs:
                return False
        moved: dict[type, list[Any]] = {
            Intent: [],
            ModelCallResult: [],
            StepCompleted: [],
            UserAsked: [],
            UserAnswered: [],
        }
        for record in records:
            bucket = moved.get(type(record))
            if bucket is None or record.run_id != source_run_id:
                return False  # a head or tail record, or another run's, is not copied
            bucket.append(moved_record(record, run_id))
        intents: list[Intent] = moved[Intent]
        results: list[ModelCallResult] = moved[ModelCallResult]
        steps: list[StepCompleted] = moved[StepCompleted]
        asks: list[UserAsked] = moved[UserAsked]
        answers: list[UserAnswered] = moved[UserAnswered]
        log = _Log(started, intents, results, steps, None, asks, answers)
        # The keys of record_key, a kind at a time (a copy of one run's records repeats none).
        keys = log.keys
        keys.add(record_key(started))
        heads: dict[RecordKey, set[str | int]] = {}
        for intent in intents:
            heads.setdefault(("intent", intent.kind), set()).add(intent.result_id)
        heads[("result",)] = {result.result_id for result in results}
        heads[("step",)] = {completed.step.step_idx for completed in steps}
        heads[("asked",)] = {ask.step for ask in asks}
        heads[("answered",)] = {answered.step for answered in answers}
        if sum(map(len, heads.values())) != len(records):
            return False
        for head, lasts in heads.items():
            keys.add_bucket(head, lasts)
        with self._lock:
            if run_id in self._logs:
                return False
            self._logs[run_id] = log
        return True

    async def read_log(self, run_id: str) -> RunLog:
        with self._lock:
            log = self._logs.get(run_id)
            if log is None:
                return RunLog()
            return RunLog(
                started=log.started,
                intents=tuple(log.intents),
                model_results=tuple(log.model_results),
                steps=tuple(log.steps),
                finished=log.finished,
                asks=tuple(log.asks),
                answers=tuple(log.answers),
            )

    async def list_run_ids(self) -> tuple[str, ...]:
        """Every run_id with at least one record, in first-write order
        (:class:`polyloop.ports.RunListing`)."""
        with self._lock:
            return tuple(self._logs)

    async def change_marker(self, run_id: str) -> str:
        """How many records the run holds (:class:`polyloop.watching.ChangeMarking`): records
        are only ever added."""
        with self._lock:
            log = self._logs.get(run_id)
            return "0" if log is None else str(_count(log))

    async def change_markers(self, run_ids: Iterable[str] | None = None) -> Mapping[str, str]:
        """Every run's record count, or those of ``run_ids``
        (:class:`polyloop.watching.ChangeMarking`)."""
        with self._lock:
            logs = self._logs
            chosen = list(logs) if run_ids is None else [r for r in run_ids if r in logs]
            return {run_id: str(_count(logs[run_id])) for run_id in chosen}

    def close(self) -> None:
        """Nothing to release (:class:`polyloop.ports.StoreClosing`): the logs live as long as
        the object, and stay readable."""

    async def aclose(self) -> None:
        """The same as :meth:`close`."""

    async def acquire_run_lease(self, run_id: str) -> _MemoryLease:
        """Take the lease of ``run_id`` on this store object, or raise ``RunLeaseHeldError``."""
        return self._leases.take(run_id, _MemoryLease(self, run_id))

    async def run_lease_holder(self, run_id: str) -> LeaseHolder | None:
        """Who holds the lease of ``run_id`` on this store object, or ``None``."""
        return self._leases.holder(run_id)

    def forget_after_fork(self) -> None:
        """In a forked child: hold no lease, and a fresh lock (another thread may have held
        it at the fork) — :func:`polyloop.leasing.forget_in_forked_child`."""
        self._lock = threading.Lock()
        self._leases.forget_after_fork()

    def parameters(self) -> Mapping[str, str]:
        return {"kind": "memory"}


def _count(log: _Log) -> int:
    return (
        (log.started is not None)
        + len(log.intents)
        + len(log.model_results)
        + len(log.steps)
        + (log.finished is not None)
        + len(log.asks)
        + len(log.answers)
    )


def _set_started(log: _Log, record: RunStarted) -> None:
    log.started = record


def _set_finished(log: _Log, record: RunFinished) -> None:
    log.finished = record


#: Where each kind of record goes in a log.
_APPEND: Mapping[type[object], Callable[[_Log, Any], None]] = {
    RunStarted: _set_started,
    Intent: lambda log, record: log.intents.append(record),
    ModelCallResult: lambda log, record: log.model_results.append(record),
    StepCompleted: lambda log, record: log.steps.append(record),
    RunFinished: _set_finished,
    UserAsked: lambda log, record: log.asks.append(record),
    UserAnswered: lambda log, record: log.answers.append(record),
}
