"""How the shipped stores write a record: its tagged JSON, with text the log already holds left
out (design 0041).

A step's observation was stored three times: in the action outcome, in the ``StepRecord``, and
again in ``RunFinished.result.steps``. A store keeps what it writes to itself, as long as every
record reads back exactly as written, so two cases are written by reference:

- a ``StepCompleted`` whose step's observation is the action outcome's (and at least
  :data:`SHARED_FROM` characters long): the step's ``observation`` is written empty and the
  line says ``"same_observation":true``;
- a ``RunFinished`` each of whose steps is the step of a ``StepCompleted`` of the same index
  that this store object knows is stored in the run's log (it wrote or read it): the result's
  ``steps`` are written empty and the line lists their indices, ``"steps_of_log":[0,1,...]``.

Every other record, and these ones when the condition does not hold, is the line of
:func:`polyloop.serialization.dumps_log_record`, byte for byte; so a line without either key
is read as before, and logs written before this form read unchanged. A reader puts the text
back: the observation from the outcome, the steps from the log's step records (the log holds
each step index at most once, and a step a ``RunFinished`` refers to is stored before it).
"""

from __future__ import annotations

import json
import threading
from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import replace
from json.encoder import encode_basestring as _quote
from typing import Any

import orjson

from polyloop.errors import CorruptLogError, SerializationError
from polyloop.serialization import LogRecord, dumps_log_record, loads_log_record
from polyloop.serialization import log_record_from_dict as _from_dict
from polyloop.types import RunFinished, StepCompleted, StepRecord

__all__ = ["SHARED_FROM", "StoredSteps", "decode_stored", "stored_line"]

_SAME_OBSERVATION = "same_observation"
#: The shortest observation written once: below it the mark would cost more than it saves.
SHARED_FROM = 64
_STEPS_OF_LOG = "steps_of_log"


def stored_line(record: LogRecord, stored: Mapping[int, StepRecord] | None = None) -> str:
    """The line a store writes for ``record`` (no line break); ``stored``: the step records of
    the run that this store object knows are in its log, by step index."""
    if type(record) is StepCompleted:
        outcome, step = record.action_outcome, record.step
        shared = step.observation
        if outcome is not None and len(shared) >= SHARED_FROM and shared == outcome.observation:
            return _without_step_observation(record)
    elif type(record) is RunFinished and stored:
        steps = record.result.steps
        if steps and all(stored.get(step.step_idx) == step for step in steps):
            slim_result = replace(record.result, steps=())
            indices = ",".join(str(step.step_idx) for step in steps)
            line = dumps_log_record(RunFinished(record.run_id, slim_result))
            return f'{line[:-1]},"{_STEPS_OF_LOG}":[{indices}]}}'
    return dumps_log_record(record)


def _without_step_observation(record: StepCompleted) -> str:
    """The line of ``record`` with its step's observation written empty, and the mark.

    Cut out of the full line's text: the step is the last field of the record and its
    ``"observation"`` key the last one in the line (a key's quotes are never escaped, a string
    value's always are), so the last occurrence of the key with that very text is the step's.
    Text the encoder escapes further (lone surrogates, line separators) is not found that way;
    such a record is encoded again without the step's observation instead.
    """
    line = dumps_log_record(record)
    text = _quote(record.step.observation)
    needle = f',"observation":{text},"observation_is_synthetic":'
    at = line.rfind(needle)
    if at < 0:
        slim = replace(record, step=replace(record.step, observation=""))
        return f'{dumps_log_record(slim)[:-1]},"{_SAME_OBSERVATION}":true}}'
    cut = at + len(',"observation":')
    return f'{line[:cut]}""{line[cut + len(text) : -1]},"{_SAME_OBSERVATION}":true}}'


def _marked(payload: object) -> bool:
    """Whether ``payload`` is a line :func:`stored_line` wrote with text left out."""
    return (
        type(payload) is dict
        and len(payload) == 3
        and (payload.get(_SAME_OBSERVATION) is True or type(payload.get(_STEPS_OF_LOG)) is list)
    )


def _strict(line: str | bytes) -> LogRecord:
    """The strict reader decides (and explains a refusal), on the text as written."""
    return loads_log_record(line if isinstance(line, str) else line.decode("utf-8"))


def decode_stored(
    line: str | bytes, steps: Mapping[int, StepRecord] | None, where: str = "the log"
) -> LogRecord:
    """The record a store wrote as ``line`` with :func:`stored_line`.

    ``steps``: the run's step records stored before this line, by index (``None`` when only
    the record's run_id and key are wanted: a ``RunFinished`` that refers to steps then comes
    back without them). Raises what :func:`polyloop.serialization.loads_log_record` raises,
    and :class:`CorruptLogError` for a ``RunFinished`` that refers to a step the log does not
    hold before it (``where`` names the place in messages). ``orjson`` parses; whatever it
    refuses or reads differently (a huge integer becomes a float) goes to the standard
    library's reader, as in ``_decoding``.
    """
    try:
        payload = orjson.loads(line)
    except ValueError:
        payload = None
    if payload is not None and not _marked(payload):
        try:
            return _from_dict(payload)
        except ValueError:
            return _strict(line)
    if payload is not None:
        try:
            return _expand(payload, steps, where)
        except ValueError:
            pass
    try:
        payload = json.loads(line.decode("utf-8") if isinstance(line, bytes) else line)
    except ValueError:  # UnicodeDecodeError is one
        return _strict(line)
    if not _marked(payload):
        return _strict(line)
    return _expand(payload, steps, where)


def _expand(
    payload: dict[str, Any], steps: Mapping[int, StepRecord] | None, where: str
) -> LogRecord:
    if _SAME_OBSERVATION in payload:
        return _with_observation(payload)
    return _with_steps(payload, steps, where)


def _slim(payload: dict[str, Any], key: str) -> LogRecord:
    del payload[key]
    return _from_dict(payload)  # raises what the strict reader says of the record


def _not_written_here(key: str) -> SerializationError:
    return SerializationError(
        f"a stored line marked {key!r} (text left out, see design 0041) holds a record that "
        "does not have the shape the mark needs; no PolyLoop store writes it. The log was "
        "edited by hand."
    )


def _with_observation(payload: dict[str, Any]) -> LogRecord:
    """Put the outcome's observation back into the step, then decode the record once."""
    del payload[_SAME_OBSERVATION]
    body = payload.get("record")
    step = body.get("step") if type(body) is dict else None
    outcome = body.get("action_outcome") if type(body) is dict else None
    if (
        payload.get("type") != "step_completed"
        or type(step) is not dict
        or type(outcome) is not dict
        or step.get("observation") != ""
        or type(outcome.get("observation")) is not str
        or not outcome["observation"]
    ):
        raise _not_written_here(_SAME_OBSERVATION)
    step["observation"] = outcome["observation"]
    return _from_dict(payload)  # raises what the strict reader says of the record


def _with_steps(
    payload: dict[str, Any], steps: Mapping[int, StepRecord] | None, where: str
) -> LogRecord:
    indices = payload[_STEPS_OF_LOG]
    record = _slim(payload, _STEPS_OF_LOG)
    if (
        type(record) is not RunFinished
        or record.result.steps
        or not indices
        or not all(type(index) is int for index in indices)
    ):
        raise _not_written_here(_STEPS_OF_LOG)
    if steps is None:
        return record
    missing = [index for index in indices if index not in steps]
    if missing:
        raise CorruptLogError(
            f"{where}: the RunFinished of run {record.run_id!r} refers to the StepCompleted of "
            f"step {missing[0]}, which the log does not hold before it. Rows or lines were "
            "removed by hand; restore the log from a backup."
        )
    result = replace(record.result, steps=tuple(steps[index] for index in indices))
    return RunFinished(record.run_id, result)


class StoredSteps:
    """The step records a store object knows are in each run's log (it wrote or read them),
    for :func:`stored_line`; runs it has not touched lately are forgotten (then their
    ``RunFinished`` is written in full, which is only longer)."""

    __slots__ = ("_limit", "_lock", "_runs")

    def __init__(self, limit: int = 256) -> None:
        self._limit = limit
        self._lock = threading.Lock()
        self._runs: OrderedDict[str, dict[int, StepRecord]] = OrderedDict()

    def of(self, run_id: str) -> Mapping[int, StepRecord] | None:
        with self._lock:
            return self._runs.get(run_id)

    def stored(self, record: LogRecord) -> None:
        """``record`` is durably in its run's log now."""
        if type(record) is StepCompleted:
            self._add(record.run_id, {record.step.step_idx: record.step})
        elif type(record) is RunFinished:
            self.forget(record.run_id)

    def read(self, run_id: str, log_steps: tuple[StepCompleted, ...]) -> None:
        """The run's log was read and holds ``log_steps``."""
        self._add(run_id, {s.step.step_idx: s.step for s in log_steps}, replace_all=True)

    def forget(self, run_id: str) -> None:
        with self._lock:
            self._runs.pop(run_id, None)

    def _add(self, run_id: str, steps: dict[int, StepRecord], replace_all: bool = False) -> None:
        with self._lock:
            known = None if replace_all else self._runs.get(run_id)
            if known is None:
                self._runs[run_id] = steps
            else:
                known.update(steps)
            self._runs.move_to_end(run_id)
            while len(self._runs) > self._limit:
                self._runs.popitem(last=False)
