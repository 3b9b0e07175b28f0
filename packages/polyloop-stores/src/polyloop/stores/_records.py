"""Shared by the stores: which records a log holds at most once, and assembling a read log.

The durable stores keep every record as the one-line tagged JSON of
:func:`polyloop.serialization.dumps_log_record`, with repeated text written by reference
(:mod:`polyloop.stores._stored_form`), so a run log reads back through the strict decoder
whichever store holds it.

A log holds at most one ``RunStarted``, one ``RunFinished``, one intent per (kind, result_id),
one ``ModelCallResult`` per result_id and one ``StepCompleted`` per step index. The loop never
writes a second one (a replay does not write its intent again), so a store refuses it on write
(:func:`duplicate_error`) and a reader refuses a log that holds one (:class:`LogBuilder`):
duplicates are never dropped, merged or kept.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from polyloop.asking import (
    UserAnswered,
    UserAsked,
)
from polyloop.errors import CorruptLogError, DuplicateRecordError, RunAlreadyStartedError
from polyloop.ports import RunLog
from polyloop.recovery import WriteOrderCheck
from polyloop.serialization import LogRecord
from polyloop.types import (
    Intent,
    ModelCallResult,
    RunFinished,
    RunStarted,
    StepCompleted,
    StepRecord,
)

__all__ = ["KeySet", "LogBuilder", "RecordKey", "describe_key", "duplicate_error", "record_key"]

#: What a log holds at most once of: ``("intent", kind, result_id)``, ``("result",
#: result_id)``, ``("step", step_idx)``, ``("asked", step)``, ``("answered", step)`` (one
#: ask per step and one decision per ask, design 0037), ``("run_started",)`` or
#: ``("run_finished",)``.
RecordKey = tuple[str | int, ...]


_STARTED: RecordKey = ("run_started",)
_FINISHED: RecordKey = ("run_finished",)


def record_key(record: LogRecord) -> RecordKey:
    """The key under which ``record``'s run may hold it only once.

    Called for every record read: an intent's kind stays the enum member (a ``StrEnum``, which
    hashes and compares as its string value) rather than paying for ``.value``.
    """
    if isinstance(record, Intent):
        return ("intent", record.kind, record.result_id)
    if isinstance(record, ModelCallResult):
        return ("result", record.result_id)
    if isinstance(record, StepCompleted):
        return ("step", record.step.step_idx)
    if isinstance(record, UserAsked):
        return ("asked", record.step)
    if isinstance(record, UserAnswered):
        return ("answered", record.step)
    return _STARTED if isinstance(record, RunStarted) else _FINISHED


class KeySet:
    """The keys of one run's records, kept by a store for as long as it writes the run.

    Stored as buckets of each key's last part (a result_id or a step index the records already
    hold), so a long run costs a set slot per record rather than a tuple per record.
    """

    __slots__ = ("_buckets",)

    def __init__(self, keys: Iterable[RecordKey] = ()) -> None:
        self._buckets: dict[RecordKey, set[str | int]] = {}
        for key in keys:
            self.add(key)

    def __contains__(self, key: RecordKey) -> bool:
        bucket = self._buckets.get(key[:-1])
        return bucket is not None and key[-1] in bucket

    def add(self, key: RecordKey) -> None:
        bucket = self._buckets.get(key[:-1])
        if bucket is None:
            bucket = self._buckets[key[:-1]] = set()
        bucket.add(key[-1])

    def add_bucket(self, head: RecordKey, lasts: set[str | int]) -> None:
        """Add the keys ``head + (last,)`` for each of ``lasts`` (owned from now on), to a set
        that holds none with that head: a fork's copy adds thousands at once."""
        assert head not in self._buckets
        self._buckets[head] = lasts


def describe_key(key: RecordKey) -> str:
    """``"model_call intent with result_id 'model-3'"``, ``"StepCompleted of step 3"``, ..."""
    if key[0] == "intent":
        return f"{key[1]} intent with result_id {key[2]!r}"
    if key[0] == "result":
        return f"ModelCallResult with result_id {key[1]!r}"
    if key[0] == "step":
        return f"StepCompleted of step {key[1]}"
    if key[0] == "asked":
        return f"UserAsked of step {key[1]}"
    if key[0] == "answered":
        return f"UserAnswered (a decision) of step {key[1]}"
    return "RunStarted" if key[0] == "run_started" else "RunFinished"


def duplicate_error(run_id: str, key: RecordKey, where: str) -> DuplicateRecordError:
    """The refusal of a second record under ``key`` (``where``: the storage, for the message)."""
    what = describe_key(key)
    if key[0] == "run_started":
        return RunAlreadyStartedError(
            f"Run {run_id!r} already has a RunStarted record in {where}; a run is started once. "
            "Use resume() to continue it, or pick a new run_id."
        )
    if key[0] == "run_finished":
        return RunAlreadyStartedError(
            f"Run {run_id!r} already has a RunFinished record in {where}; its recorded result "
            "stands and cannot be replaced."
        )
    return DuplicateRecordError(
        f"Run {run_id!r} already has a {what} in {where}; the store refuses a second one and "
        "stored nothing. The loop never writes one: something else drives this run; check it "
        "with `polyloop verify`."
    )


class LogBuilder:
    """Collects the decoded records of one run, in storage order, into a :class:`RunLog`.

    Refuses (with :class:`CorruptLogError`) what no store would ever write: a record of another
    run_id, a second record of a key (:func:`record_key`), and a record that stands where the
    loop cannot have written it (:class:`~polyloop.recovery.WriteOrderCheck`). ``where`` names
    the storage (file, database) in those messages, and each refusal names the stored position.
    """

    __slots__ = (
        "_answers",
        "_asks",
        "_finished",
        "_intents",
        "_order",
        "_results",
        "_run_id",
        "_seen",
        "_started",
        "_step_records",
        "_steps",
        "_where",
    )

    def __init__(self, run_id: str, where: str) -> None:
        self._run_id = run_id
        self._where = where
        self._started: RunStarted | None = None
        self._intents: list[Intent] = []
        self._results: list[ModelCallResult] = []
        self._steps: list[StepCompleted] = []
        self._step_records: dict[int, StepRecord] = {}
        self._finished: RunFinished | None = None
        self._asks: list[UserAsked] = []
        self._answers: list[UserAnswered] = []
        #: Every key added so far, with the number of the unit it was found at.
        self._seen: dict[RecordKey, int] = {}
        self._order = WriteOrderCheck(where)

    @property
    def keys(self) -> frozenset[RecordKey]:
        """The keys of the records added so far."""
        return frozenset(self._seen)

    @property
    def steps(self) -> Mapping[int, StepRecord]:
        """The step records added so far, by step index (what a ``RunFinished`` stored by
        reference refers to, see ``_stored_form``)."""
        return self._step_records

    def add(self, record: LogRecord, unit: str, number: int) -> None:
        """Add the record found at ``unit`` ``number`` (e.g. ``"line"``, 7) of the storage."""
        if record.run_id != self._run_id:
            raise CorruptLogError(
                f"{self._where}, {unit} {number}: holds a record of run {record.run_id!r} where "
                f"only records of run {self._run_id!r} belong. The storage was edited or copied "
                "by hand; restore it from a backup or move the foreign record out."
            )
        key = record_key(record)
        seen = self._seen
        if key in seen:
            raise CorruptLogError(
                f"{self._where}, {unit} {number}: a second {describe_key(key)} for run "
                f"{self._run_id!r} (the first is at {unit} {seen[key]}); the store never writes "
                "one, so two drivers or a hand edit wrote it. Inspect the log before resuming."
            )
        self._order.add(record, unit, number)
        seen[key] = number
        tag = key[0]
        if tag == "intent":
            self._intents.append(record)  # type: ignore[arg-type]
        elif tag == "result":
            self._results.append(record)  # type: ignore[arg-type]
        elif tag == "step":
            assert isinstance(record, StepCompleted)
            self._steps.append(record)
            self._step_records[record.step.step_idx] = record.step
        elif tag == "run_started":
            self._started = record  # type: ignore[assignment]
        elif tag == "asked":
            self._asks.append(record)  # type: ignore[arg-type]
        elif tag == "answered":
            self._answers.append(record)  # type: ignore[arg-type]
        else:
            self._finished = record  # type: ignore[assignment]

    def build(self) -> RunLog:
        """The log, or ``RunLog()`` when no record was added."""
        return RunLog(
            started=self._started,
            intents=tuple(self._intents),
            model_results=tuple(self._results),
            steps=tuple(self._steps),
            finished=self._finished,
            asks=tuple(self._asks),
            answers=tuple(self._answers),
        )
