"""A fork's copy of a source's stored lines under its own run id (design 0072).

Every stored line of a record is ``{"type":"<tag>","record":{"run_id":<run id>,...``
(:func:`polyloop.serialization.dumps_log_record` writes the run id first): the copy is the
line with the quoted run id replaced, which is the line encoding the moved record would give.
A line that does not start so is not copied this way (the caller encodes the records).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from json import JSONDecoder
from typing import Any, TypeVar

from polyloop.asking import UserAnswered, UserAsked
from polyloop.serialization import LogRecord, log_record_tag
from polyloop.types import Intent, ModelCallResult, StepCompleted

__all__ = ["copied_lines", "copyable", "moved_record", "quoted_run_id"]

_R = TypeVar("_R", bound=LogRecord)

_STEP_KINDS = frozenset({Intent, ModelCallResult, StepCompleted, UserAsked, UserAnswered})

_DECODER = JSONDecoder()
_STARTED_HEAD = '{"type":"run_started","record":{"run_id":'


def copyable(records: Sequence[LogRecord], source_run_id: str) -> bool:
    """Whether ``records`` can be a fork's copy of run ``source_run_id``: records of that run
    and of a step (no head or tail record), the last the ``StepCompleted`` of a step."""
    return (
        bool(records)
        and type(records[-1]) is StepCompleted
        and all(
            type(record) in _STEP_KINDS and record.run_id == source_run_id for record in records
        )
    )


def quoted_run_id(started_line: str) -> str | None:
    """The run id of a stored ``RunStarted`` line, as the line quotes it (``None``: no such line)."""
    if not started_line.startswith(_STARTED_HEAD):
        return None
    start = len(_STARTED_HEAD)
    if started_line[start : start + 1] != '"':
        return None
    try:
        _, end = _DECODER.raw_decode(started_line, start)
    except ValueError:
        return None
    return started_line[start:end]


def copied_lines(
    source_lines: Sequence[str], records: Sequence[LogRecord], new_started_line: str
) -> list[str] | None:
    """The stored lines of ``records`` under the run of ``new_started_line``, from
    ``source_lines`` (the source's stored lines from its ``RunStarted`` on, in order): ``None``
    when the source does not hold ``records`` as its lines after its ``RunStarted``."""
    if len(source_lines) < len(records) + 1:
        return None
    old = quoted_run_id(source_lines[0])
    new = quoted_run_id(new_started_line)
    if old is None or new is None:
        return None
    heads: dict[type, tuple[str, str]] = {}
    out: list[str] = []
    for line, record in zip(source_lines[1:], records, strict=False):
        kind = type(record)
        pair = heads.get(kind)
        if pair is None:
            head = f'{{"type":"{log_record_tag(record)}","record":{{"run_id":'
            pair = heads[kind] = (f"{head}{old},", f"{head}{new},")
        if not line.startswith(pair[0]):
            return None
        out.append(pair[1] + line[len(pair[0]) :])
    return out


_MOVERS: dict[type, Callable[[Any, str], Any]] = {}


def moved_record(record: _R, run_id: str) -> _R:
    """``record`` under ``run_id``, every other field the same object (the records are
    immutable values). Built without running ``__init__`` again, through the slots' own
    setters: the record was checked when it was made, and a fork copies thousands."""
    kind = type(record)
    mover = _MOVERS.get(kind)
    if mover is None:
        mover = _MOVERS[kind] = _mover(kind)
    moved: _R = mover(record, run_id)
    return moved


def _mover(kind: type) -> Callable[[Any, str], Any]:
    """A function that copies a ``kind`` under another run id, one line per field."""
    names = [field.name for field in dataclasses.fields(kind)]
    scope: dict[str, Any] = {"new": object.__new__, "kind": kind}
    lines = ["def move(record, run_id):", "    copy = new(kind)"]
    for number, name in enumerate(names):
        slot = getattr(kind, name)
        scope[f"set{number}"] = slot.__set__
        value = "run_id" if name == "run_id" else f"record.{name}"
        lines.append(f"    set{number}(copy, {value})")
    lines.append("    return copy")
    exec("\n".join(lines), scope)
    move: Callable[[Any, str], Any] = scope["move"]
    return move
