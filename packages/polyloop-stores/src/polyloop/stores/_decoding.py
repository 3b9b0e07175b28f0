"""Decoding stored log records, with ``orjson`` doing the JSON parsing.

Reading a run decodes every record of it, and the standard library's parser was the largest
single cost of ``resume`` on a long run (design 0011). ``orjson`` parses the same text about
three times faster. It differs from :mod:`json` only at the edges: it refuses ``NaN``, lone
surrogate escapes and deep nesting, and reads an integer beyond 64 bits as a float. So any text
it refuses, and any payload that does not decode into a record, goes to
:func:`polyloop.serialization.loads_log_record` as well, which decides: the result is always
exactly that function's (no record field takes a float, so a number read differently can only
make the first attempt fail, never succeed with another value).
"""

from __future__ import annotations

import gc
import threading
from collections.abc import Iterator
from contextlib import contextmanager

import orjson

from polyloop.serialization import LogRecord, loads_log_record, log_record_from_dict

__all__ = ["decode_log_record", "paused_collection"]


def decode_log_record(line: str | bytes) -> LogRecord:
    """The record stored as ``line`` (one JSON text), as :func:`loads_log_record` decodes it.

    Raises :class:`~polyloop.errors.SerializationError`, or :class:`UnicodeDecodeError` for
    bytes that are not UTF-8.
    """
    try:
        return log_record_from_dict(orjson.loads(line))
    except ValueError:  # orjson's JSONDecodeError and SerializationError are both ValueErrors
        return loads_log_record(line if isinstance(line, str) else line.decode("utf-8"))


_pause_lock = threading.Lock()
_pausing = 0  # reads inside paused_collection() now
_resume_collection = False  # whether the first of them found the collector enabled


@contextmanager
def paused_collection() -> Iterator[None]:
    """The cyclic garbage collector off while a whole log is decoded.

    Decoding a long run creates tens of thousands of objects that all live on (the log), and
    every 700 of them start a collection that scans them again; in a fresh process the last
    of those is a full one over every object the imports made (measured on a 1,000-step run:
    half of the decoding time). Nothing decoded is garbage, so pausing changes no result: the
    collector is switched back on when the last concurrent read leaves, if the first found it
    on (a collector the application switched off stays off).
    """
    global _pausing, _resume_collection
    with _pause_lock:
        if _pausing == 0:
            _resume_collection = gc.isenabled()
            gc.disable()
        _pausing += 1
    try:
        yield
    finally:
        with _pause_lock:
            _pausing -= 1
            if _pausing == 0 and _resume_collection:
                gc.enable()
