"""Reading a run-log file: lines of tagged JSON, of which only the last may be torn.

A write appends one whole line (record + ``\\n``) and syncs it before it is acknowledged, so
after a crash only the last line can be incomplete: missing its newline, or, when the disk
kept the new size but not the new bytes, full of garbage — in either case not JSON text. Such
a tail is an unacknowledged write: it is ignored on read and cut off before the next append.

Any other line that is not a record cannot come from a crash, and is refused as corruption
naming the file and line, wherever it stands: a line in the middle, and also a complete last
line that is JSON but not a record of this run (another schema version, an unknown tag, a
missing field, another run_id). Such a line is never cut off: it may be an acknowledged
record someone edited, and only a person can tell.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from polyloop.errors import CorruptLogError, SerializationError
from polyloop.ports import RunLog
from polyloop.serialization import LogRecord
from polyloop.stores._records import LogBuilder, RecordKey, record_key
from polyloop.stores._stored_form import decode_stored

__all__ = [
    "FileTail",
    "ParsedFile",
    "first_run_id",
    "is_torn",
    "parse_file",
    "parse_log",
    "scan_tail",
]

_NEWLINE = b"\n"


@dataclass(frozen=True, slots=True)
class FileTail:
    """What a writer needs to know about a file before appending to it."""

    #: Bytes up to the end of the last good line; anything after it is a torn write.
    valid_end: int
    #: The keys of the records in the good part (a log holds each at most once).
    keys: frozenset[RecordKey]


@dataclass(frozen=True, slots=True)
class ParsedFile:
    """A whole file decoded: the log, and what a writer appending next would need."""

    log: RunLog
    valid_end: int
    keys: frozenset[RecordKey]


def _split(data: bytes) -> tuple[list[bytes], int]:
    """Complete lines (without newline) and the offset where the unterminated tail begins."""
    cut = data.rfind(_NEWLINE) + 1
    lines = data[:cut].split(_NEWLINE)[:-1] if cut else []
    return lines, cut


def parse_log(data: bytes, run_id: str, where: str) -> RunLog:
    """Decode a whole file. ``where`` (the path) and the line number name any bad line."""
    return parse_file(data, run_id, where).log


def is_torn(line: bytes) -> bool:
    """Whether a last line that holds no record is a torn write: not even JSON text."""
    try:
        json.loads(line.decode("utf-8"))
    except ValueError:  # UnicodeDecodeError is one
        return True
    return False


def _corrupt(where: str, number: int, error: Exception, *, last: bool) -> CorruptLogError:
    why = (
        "It is complete JSON, so not a write torn by a crash"
        if last
        else "Only the last line of a run log can be torn by a crash"
    )
    return CorruptLogError(
        f"{where}, line {number}: not a valid log record ({error}). {why}: the file was "
        "altered or damaged; repair or remove that line (keep a copy) before reading this run."
    )


def parse_file(data: bytes, run_id: str, where: str) -> ParsedFile:
    """:func:`parse_log`, also saying where the good part ends and which keys it holds."""
    valid_end = data.rfind(_NEWLINE) + 1
    lines = data[:valid_end].split(_NEWLINE)[:-1]
    builder = LogBuilder(run_id, where)
    last = len(lines) - 1
    for index, line in enumerate(lines):
        try:
            record = decode_stored(line, builder.steps, f"{where}, line {index + 1}")
        except (SerializationError, UnicodeDecodeError) as error:
            if index == last and is_torn(line):
                valid_end -= len(line) + 1
                break  # garbage at EOF: a torn write, never acknowledged
            raise _corrupt(where, index + 1, error, last=index == last) from None
        builder.add(record, "line", index + 1)
    return ParsedFile(builder.build(), valid_end, builder.keys)


def _decoded(line: bytes) -> LogRecord | None:
    try:
        return decode_stored(line, None)
    except (SerializationError, UnicodeDecodeError):
        return None


def scan_tail(data: bytes) -> FileTail:
    """Where the good part of a file ends, and the keys of the records in it.

    Tolerant on purpose: a line that holds no record is the reader's to report (with
    :func:`parse_log`); here it is skipped. Only a torn last line (:func:`is_torn`) ends the
    good part before the end of the file, to be cut off: a complete line never is.
    """
    valid_end = data.rfind(_NEWLINE) + 1
    lines = data[:valid_end].split(_NEWLINE)[:-1]
    keys: set[RecordKey] = set()
    for index, line in enumerate(lines):
        record = _decoded(line)
        if record is not None:
            keys.add(record_key(record))
        elif index == len(lines) - 1 and is_torn(line):
            valid_end -= len(line) + 1
    return FileTail(valid_end=valid_end, keys=frozenset(keys))


def first_run_id(data: bytes, where: str) -> str | None:
    """The run_id of the file's first record; ``None`` when it holds no complete record.

    ``data`` is the start of the file, long enough to hold the first line or the whole file.
    """
    lines, _ = _split(data)
    if not lines:
        return None
    try:
        return decode_stored(lines[0].decode("utf-8"), None).run_id
    except (SerializationError, UnicodeDecodeError) as error:
        if len(lines) == 1 and is_torn(lines[0]):
            return None  # the only line is a torn write
        raise _corrupt(where, 1, error, last=len(lines) == 1) from None
