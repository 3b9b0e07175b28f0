"""Reading a run-log file: lines of tagged JSON, of which only the last may be torn.

A write appends one whole line (record + ``\\n``) and syncs it before it is acknowledged, so
after a crash only the last line can be incomplete: missing its newline, or, when the disk
kept the new size but not the new bytes, full of garbage. Such a tail is an unacknowledged
write: it is ignored on read and cut off before the next append. A line that does not decode
anywhere else cannot come from a crash, and is refused as corruption.
"""

from __future__ import annotations

from dataclasses import dataclass

from polyloop.errors import CorruptLogError, SerializationError
from polyloop.ports import RunLog
from polyloop.serialization import loads_log_record
from polyloop.stores._decoding import decode_log_record
from polyloop.stores._records import LogBuilder

__all__ = ["FileTail", "first_run_id", "parse_log", "scan_tail"]

_NEWLINE = b"\n"
_STARTED = b'{"type":"run_started"'
_FINISHED = b'{"type":"run_finished"'


@dataclass(frozen=True, slots=True)
class FileTail:
    """What a writer needs to know about a file before appending to it."""

    #: Bytes up to the end of the last good line; anything after it is a torn write.
    valid_end: int
    has_started: bool
    has_finished: bool


def _split(data: bytes) -> tuple[list[bytes], int]:
    """Complete lines (without newline) and the offset where the unterminated tail begins."""
    cut = data.rfind(_NEWLINE) + 1
    lines = data[:cut].split(_NEWLINE)[:-1] if cut else []
    return lines, cut


def parse_log(data: bytes, run_id: str, where: str) -> RunLog:
    """Decode a whole file. ``where`` (the path) and the line number name any bad line."""
    lines = data[: data.rfind(_NEWLINE) + 1].split(_NEWLINE)[:-1]
    builder = LogBuilder(run_id, where)
    last = len(lines) - 1
    for index, line in enumerate(lines):
        try:
            record = decode_log_record(line)
        except (SerializationError, UnicodeDecodeError) as error:
            if index == last:
                break  # garbage at EOF: a torn write, never acknowledged
            raise CorruptLogError(
                f"{where}, line {index + 1}: not a valid log record ({error}). Only the last "
                "line of a run log can be torn by a crash, so this file was altered or "
                "damaged; repair or remove that line (keep a copy) before reading this run."
            ) from None
        builder.add(record, "line", index + 1)
    return builder.build()


def _decodes(line: bytes) -> bool:
    try:
        loads_log_record(line.decode("utf-8"))
    except (SerializationError, UnicodeDecodeError):
        return False
    return True


def scan_tail(data: bytes) -> FileTail:
    """Where the good part of a file ends and whether it holds the head and tail records.

    Cheap on purpose (only the last line is decoded): the full check is :func:`parse_log`.
    """
    valid_end = data.rfind(_NEWLINE) + 1
    if valid_end:
        start = data.rfind(_NEWLINE, 0, valid_end - 1) + 1
        if not _decodes(data[start : valid_end - 1]):
            valid_end = start
    # A line of the good part starts with a prefix when the file does (and the first line is
    # good) or when a newline followed by it lies within the good part.
    return FileTail(
        valid_end=valid_end,
        has_started=_starts_a_line(data, _STARTED, valid_end),
        has_finished=_starts_a_line(data, _FINISHED, valid_end),
    )


def _starts_a_line(data: bytes, prefix: bytes, end: int) -> bool:
    if end and data.startswith(prefix):
        return True
    return data.find(_NEWLINE + prefix, 0, end) != -1


def first_run_id(data: bytes, where: str) -> str | None:
    """The run_id of the file's first record; ``None`` when it holds no complete record.

    ``data`` is the start of the file, long enough to hold the first line or the whole file.
    """
    lines, _ = _split(data)
    if not lines:
        return None
    try:
        return loads_log_record(lines[0].decode("utf-8")).run_id
    except (SerializationError, UnicodeDecodeError) as error:
        if len(lines) == 1:
            return None  # the only line is a torn write
        raise CorruptLogError(
            f"{where}, line 1: not a valid log record ({error}). The file was altered or "
            "damaged; repair or remove it (keep a copy)."
        ) from None
