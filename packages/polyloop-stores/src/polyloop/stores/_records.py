"""Shared by the durable stores: encoding one record, and assembling decoded records into a log.

Both durable stores keep every record as the one-line tagged JSON of
:func:`polyloop.serialization.dumps_log_record`, so a run log reads back through the strict
decoder whichever store holds it.
"""

from __future__ import annotations

from polyloop.errors import CorruptLogError
from polyloop.ports import RunLog
from polyloop.serialization import LogRecord
from polyloop.types import Intent, ModelCallResult, RunFinished, RunStarted, StepCompleted

__all__ = ["LogBuilder"]


class LogBuilder:
    """Collects the decoded records of one run, in storage order, into a :class:`RunLog`.

    Refuses (with :class:`CorruptLogError`) what no store would ever write: a record of another
    run_id, and a second ``RunStarted`` or ``RunFinished``. ``where`` names the storage (file,
    database) in those messages.
    """

    __slots__ = ("_finished", "_intents", "_results", "_run_id", "_started", "_steps", "_where")

    def __init__(self, run_id: str, where: str) -> None:
        self._run_id = run_id
        self._where = where
        self._started: RunStarted | None = None
        self._intents: list[Intent] = []
        self._results: list[ModelCallResult] = []
        self._steps: list[StepCompleted] = []
        self._finished: RunFinished | None = None

    def add(self, record: LogRecord, unit: str, number: int) -> None:
        """Add the record found at ``unit`` ``number`` (e.g. ``"line"``, 7) of the storage."""
        if record.run_id != self._run_id:
            raise CorruptLogError(
                f"{self._where}, {unit} {number}: holds a record of run {record.run_id!r} where "
                f"only records of run {self._run_id!r} belong. The storage was edited or copied "
                "by hand; restore it from a backup or move the foreign record out."
            )
        if isinstance(record, Intent):
            self._intents.append(record)
        elif isinstance(record, ModelCallResult):
            self._results.append(record)
        elif isinstance(record, StepCompleted):
            self._steps.append(record)
        elif isinstance(record, RunStarted):
            if self._started is not None:
                raise self._duplicate("RunStarted", f"{unit} {number}")
            self._started = record
        else:
            if self._finished is not None:
                raise self._duplicate("RunFinished", f"{unit} {number}")
            self._finished = record

    def _duplicate(self, kind: str, position: str) -> CorruptLogError:
        return CorruptLogError(
            f"{self._where}, {position}: a second {kind} for run {self._run_id!r}; the store "
            "never writes two, so the storage was altered. Inspect it before resuming."
        )

    def build(self) -> RunLog:
        """The log, or ``RunLog()`` when no record was added."""
        return RunLog(
            started=self._started,
            intents=tuple(self._intents),
            model_results=tuple(self._results),
            steps=tuple(self._steps),
            finished=self._finished,
        )
