"""The snapshot form of a trajectory: the library's own JSON, pretty-printed.

:func:`trajectory_json` takes the JSON text :mod:`polyloop.serialization` writes and only lays
it out, one field per line: every key, string and number is copied character for character
(keys stay in the order the library writes them, escapes stay escapes), and only whitespace
between tokens is added. So the text decodes with ``polyloop.serialization.loads`` (a
``StepRecord``, ``RunResult`` or one log record) or :func:`run_log_from_json` (a ``RunLog``)
into the very records it was made from; a snapshot is the stored form itself, not a second
format.

A ``RunLog`` is written as a JSON array of tagged log records, each exactly what
``dumps_log_record`` writes (what a JSON Lines store appends as one line), in the order the
``RunLog`` holds them: the ``RunStarted``, every ``Intent``, every ``ModelCallResult``, every
``StepCompleted``, then the ``RunFinished``.

Masking is opt-in: every field whose name is masked keeps its key and shows :data:`MASKED` as
its value, at any depth (``"observation"`` masks the observation of every step and of every
action outcome; a key of the parameter snapshot can be masked too).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Collection

from polyloop.asking import UserAnswered, UserAsked
from polyloop.errors import SerializationError
from polyloop.ports import RunLog
from polyloop.serialization import (
    LOG_RECORD_TYPES,
    LogRecord,
    dumps,
    dumps_log_record,
    log_record_from_dict,
)
from polyloop.types import (
    Intent,
    ModelCallResult,
    RunFinished,
    RunResult,
    RunStarted,
    StepCompleted,
    StepRecord,
)

__all__ = [
    "MASKED",
    "MaskRule",
    "Trajectory",
    "compact_json",
    "run_log_from_json",
    "trajectory_json",
]

#: The value a masked field shows in a snapshot.
MASKED = "<masked>"

#: What a snapshot can hold.
Trajectory = StepRecord | RunResult | RunLog | LogRecord

#: Decides whether a field is masked, given its name and the keys/indices leading to the object
#: that holds it (``("steps", 2)`` for the third step of a ``RunResult``).
MaskRule = Callable[[str, tuple[str | int, ...]], bool]
_Path = tuple[str | int, ...]
#: Decides, given a scalar's decoded value and its full path, whether it shows as masked.
_ValueRule = Callable[[object, _Path], bool]

_SNAPSHOT_TYPES = (StepRecord, RunResult, *LOG_RECORD_TYPES.values())
_INDENT = "  "
_MASKED_TOKEN = json.dumps(MASKED)

# JSON tokens, matched where they start: a string (escapes included) and a bare scalar (number,
# true, false, null).
_STRING = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"', re.S)
_SCALAR = re.compile(r'[^\s{}\[\],:"]+')
_SPACE = re.compile(r"[ \t\n\r]*")


def compact_json(value: Trajectory) -> str:
    """The library's own compact JSON of ``value`` (for a ``RunLog``, the array of its records)."""
    if isinstance(value, RunLog):
        return "[" + ",".join(dumps_log_record(record) for record in _records(value)) + "]"
    if not isinstance(value, _SNAPSHOT_TYPES):
        raise TypeError(
            f"a trajectory snapshot holds a StepRecord, a RunResult, a RunLog or one log record, "
            f"not {type(value).__name__}; snapshot other values with syrupy's own serializer."
        )
    return dumps(value)


def trajectory_json(value: Trajectory, *, mask: Collection[str] | MaskRule = ()) -> str:
    """``value`` in the library's JSON, one field per line (two-space indent), ending in a newline.

    ``mask`` names the fields to mask (or is a :data:`MaskRule`); each keeps its key and shows
    :data:`MASKED`. Without a mask the text decodes back to ``value`` exactly.
    """
    if callable(mask):
        return _lay_out(compact_json(value), mask)
    names = frozenset(mask)
    return _lay_out(compact_json(value), lambda name, path: name in names)


def _lay_out(compact: str, mask: MaskRule, replaces: _ValueRule | None = None) -> str:
    """``compact`` laid out; ``replaces(value, path)`` may mask a scalar by its value too."""
    return _Layout(compact, mask, replaces).text() + "\n"


def run_log_from_json(text: str | bytes) -> RunLog:
    """The ``RunLog`` a run-log snapshot holds (each element read by ``log_record_from_dict``)."""
    try:
        payload = json.loads(text)
    except (ValueError, UnicodeDecodeError) as error:
        raise SerializationError(f"run log snapshot: not valid JSON ({error}).") from None
    if not isinstance(payload, list):
        raise SerializationError(
            "run log snapshot: expected a JSON array of tagged log records, got "
            f"{type(payload).__name__}; a StepRecord or RunResult snapshot reads with "
            "polyloop.serialization.loads."
        )
    records: list[LogRecord] = []
    for position, item in enumerate(payload):
        try:
            records.append(log_record_from_dict(item))
        except SerializationError as error:
            raise SerializationError(f"run log snapshot, record #{position}: {error}") from None
    return _log_of(records)


def _records(log: RunLog) -> list[LogRecord]:
    head: list[LogRecord] = [] if log.started is None else [log.started]
    tail: list[LogRecord] = [] if log.finished is None else [log.finished]
    # The records of asking (design 0037) come after the others; an ungated run has none,
    # so its snapshot is what it always was.
    return [
        *head,
        *log.intents,
        *log.model_results,
        *log.steps,
        *log.asks,
        *log.answers,
        *tail,
    ]


def _log_of(records: list[LogRecord]) -> RunLog:
    started = [r for r in records if isinstance(r, RunStarted)]
    finished = [r for r in records if isinstance(r, RunFinished)]
    if len(started) > 1 or len(finished) > 1:
        raise SerializationError(
            f"run log snapshot: {len(started)} run_started and {len(finished)} run_finished "
            "records; a run log holds at most one of each."
        )
    return RunLog(
        started=started[0] if started else None,
        intents=tuple(r for r in records if isinstance(r, Intent)),
        model_results=tuple(r for r in records if isinstance(r, ModelCallResult)),
        steps=tuple(r for r in records if isinstance(r, StepCompleted)),
        finished=finished[0] if finished else None,
        asks=tuple(r for r in records if isinstance(r, UserAsked)),
        answers=tuple(r for r in records if isinstance(r, UserAnswered)),
    )


class _Layout:
    """Lays out JSON text one member per line, copying every token as it is in the input."""

    __slots__ = ("_mask", "_replaces", "_source")

    def __init__(self, source: str, mask: MaskRule, replaces: _ValueRule | None) -> None:
        self._source = source
        self._mask = mask
        self._replaces = replaces

    def text(self) -> str:
        out: list[str] = []
        end = self._value(self._skip(0), 0, (), out)
        if self._skip(end) != len(self._source):
            raise self._malformed(end)
        return "".join(out)

    def _skip(self, position: int) -> int:
        match = _SPACE.match(self._source, position)
        assert match is not None  # the pattern matches the empty string
        return match.end()

    def _malformed(self, position: int) -> ValueError:
        return ValueError(f"not JSON text at offset {position}: {self._source[position:][:40]!r}")

    def _expect(self, position: int, character: str) -> int:
        if self._source.startswith(character, position):
            return self._skip(position + 1)
        raise self._malformed(position)

    def _value(self, position: int, depth: int, path: _Path, out: list[str]) -> int:
        source = self._source
        opener = source[position : position + 1]
        if opener == "{":
            return self._object(self._skip(position + 1), depth, path, out)
        if opener == "[":
            return self._array(self._skip(position + 1), depth, path, out)
        match = (_STRING if opener == '"' else _SCALAR).match(source, position)
        if match is None:
            raise self._malformed(position)
        token = match.group()
        if self._replaces is not None and self._replaces(json.loads(token), path):
            token = _MASKED_TOKEN
        out.append(token)
        return match.end()

    def _object(self, position: int, depth: int, path: _Path, out: list[str]) -> int:
        def member(position: int, index: int) -> int:
            key = _STRING.match(self._source, position)
            if key is None:
                raise self._malformed(position)
            name = json.loads(key.group())
            out.extend((key.group(), ": "))
            position = self._expect(self._skip(key.end()), ":")
            if not self._mask(name, path):
                return self._value(position, depth + 1, (*path, name), out)
            out.append(_MASKED_TOKEN)
            return self._value(position, depth + 1, (*path, name), [])

        return self._members(position, depth, "{}", member, out)

    def _array(self, position: int, depth: int, path: _Path, out: list[str]) -> int:
        def member(position: int, index: int) -> int:
            return self._value(position, depth + 1, (*path, index), out)

        return self._members(position, depth, "[]", member, out)

    def _members(
        self,
        position: int,
        depth: int,
        brackets: str,
        member: Callable[[int, int], int],
        out: list[str],
    ) -> int:
        """The members of an object or array, one per line; ``member(position, index)`` lays
        out one and returns where it ends."""
        opener, closer = brackets[0], brackets[1]
        if self._source.startswith(closer, position):
            out.append(brackets)
            return position + 1
        out.append(opener)
        inner = "\n" + _INDENT * (depth + 1)
        index = 0
        while True:
            out.append(inner)
            position = self._skip(member(position, index))
            if not self._source.startswith(",", position):
                break
            out.append(",")
            position = self._skip(position + 1)
            index += 1
        out.append("\n" + _INDENT * depth + closer)
        if not self._source.startswith(closer, position):
            raise self._malformed(position)
        return position + 1
