"""The order of a run's writes across record kinds, checked while a store reads them.

A :class:`~polyloop.ports.RunLog` groups records by kind, so the order of writes across kinds
is not in it; a store that keeps that order (a file's lines, a table's sequence column) feeds
its records, in that order, to a :class:`WriteOrderCheck` while it reads.

The loop writes a run's records in one fixed order: ``RunStarted``; per step ``k`` its
model-call intent, the model result, its ``UserAsked`` and ``UserAnswered`` (a gated action
only), its action intent (if any), ``StepCompleted``; and ``RunFinished`` last. A record may be missing (a crash, or a rule :func:`validate_log` reports),
but none can stand before a record the loop writes earlier: each record has a rank in that
order, and the ranks of a log read in storage order only grow.
"""

from __future__ import annotations

from polyloop.asking import (
    UserAnswered,
    UserAsked,
)
from polyloop.errors import CorruptLogError
from polyloop.serialization import LogRecord
from polyloop.types import (
    Intent,
    IntentKind,
    ModelCallResult,
    RunStarted,
    StepCompleted,
)

__all__ = ["WriteOrderCheck"]

# The rank of a step's records is _PHASES * step + phase; RunStarted ranks below every step's.
_MODEL_INTENT, _MODEL_RESULT, _ASKED, _ANSWERED, _ACTION_INTENT, _STEP = range(6)
_PHASES = 6
_STARTED_RANK = -1
_MODEL_CALL = IntentKind.MODEL_CALL
_FINISHED_RANK = float("inf")


def _describe(record: LogRecord) -> str:
    if isinstance(record, Intent):
        kind = "model-call" if record.kind is IntentKind.MODEL_CALL else "action"
        return f"the {kind} intent of step {record.call_index} ({record.result_id!r})"
    if isinstance(record, ModelCallResult):
        return f"the ModelCallResult {record.result_id!r}"
    if isinstance(record, StepCompleted):
        return f"the StepCompleted of step {record.step.step_idx}"
    if isinstance(record, UserAsked | UserAnswered):
        return f"the {type(record).__name__} of step {record.step}"
    return type(record).__name__


class WriteOrderCheck:
    """Refuses, record by record in storage order, a record that stands where the loop could not
    have written it: a result before its intent, a step before its result, anything after
    ``RunFinished``, ``RunStarted`` after anything.

    ``where`` names the storage in messages; :meth:`add` takes each record with its position
    (``"line"``, 7). Records of other runs, duplicates and missing records are not its business
    (the store's reader and :func:`validate_log` refuse those).
    """

    __slots__ = ("_highest", "_highest_number", "_highest_record", "_latest_model_intent", "_where")

    def __init__(self, where: str) -> None:
        self._where = where
        #: The highest rank read so far, the record holding it and its position.
        self._highest: float = float("-inf")
        self._highest_record: LogRecord | None = None
        self._highest_number = 0
        #: The last model-call intent read: the one a model result must follow.
        self._latest_model_intent: Intent | None = None

    def add(self, record: LogRecord, unit: str, number: int) -> None:
        """Check the record found at ``unit`` ``number`` of the storage; raise
        :class:`CorruptLogError` naming it if the loop cannot have written it there."""
        # ``type(...) is``, not isinstance: records are final classes, and this runs per record.
        if type(record) is StepCompleted:
            rank: float = _PHASES * record.step.step_idx + _STEP
        elif type(record) is Intent:
            if record.kind is _MODEL_CALL:
                rank = _PHASES * record.call_index + _MODEL_INTENT
                self._latest_model_intent = record
            else:
                rank = _PHASES * record.call_index + _ACTION_INTENT
        elif type(record) is ModelCallResult:
            announced = self._latest_model_intent
            if announced is None or announced.result_id != record.result_id:
                raise self._misplaced(
                    record,
                    unit,
                    number,
                    "does not follow its model-call intent; the loop writes a model result "
                    "right after its intent",
                )
            rank = _PHASES * announced.call_index + _MODEL_RESULT
        elif type(record) is RunStarted:
            rank = _STARTED_RANK
        elif type(record) is UserAsked:
            rank = _PHASES * record.step + _ASKED
        elif type(record) is UserAnswered:
            rank = _PHASES * record.step + _ANSWERED
        else:
            rank = _FINISHED_RANK
        if rank <= self._highest:
            raise self._misplaced(record, unit, number, None)
        self._highest = rank
        self._highest_record = record
        self._highest_number = number

    def _misplaced(
        self, record: LogRecord, unit: str, number: int, why: str | None
    ) -> CorruptLogError:
        if why is None:
            earlier, at = self._highest_record, self._highest_number
            assert earlier is not None
            why = (
                f"stands after {_describe(earlier)} ({unit} {at}), where the loop cannot have "
                "written it"
            )
        return CorruptLogError(
            f"{self._where}, {unit} {number}: {_describe(record)} {why}. The records were "
            "reordered or edited; inspect the run (`polyloop verify`) and restore it from a copy."
        )
