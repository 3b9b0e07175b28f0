"""Reading the shipped file stores' storage directly: what a tool can still read of a store
that refuses to read itself, and whether a path holds such a store at all.

A store reads a log whole or not at all: one undecodable record, or one damaged database page,
and ``read_log`` raises; one unreadable run file, and the JSON Lines store's
``list_run_ids`` raises. This module then reads the stores' on-disk layout unit by unit,
read-only, keeps what decodes and names what does not (design 0034). It lives beside the
stores because it is built on their layout's constants (the SQLite schema's table and index,
the JSON Lines file-name rule): a change to the layout changes its reader with it.

- recognising (:func:`starts_like_sqlite`, :func:`has_records_table`, :func:`is_run_file_name`);
- listing (:func:`list_from_layout`, when the store's own ``list_run_ids`` failed): the run_ids
  of the records table through each of its two access paths, the covering index and the table
  itself, for SQLite; the first line of every run file, for JSON Lines;
- a damaged run's records (:func:`salvage_sqlite`, :func:`salvage_jsonl`): the rows of the
  records table one ``seq`` at a time; the lines of the run's file.
"""

from __future__ import annotations

import os
import sqlite3
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from polyloop.asking import (
    UserAnswered,
    UserAsked,
)
from polyloop.errors import PolyLoopError
from polyloop.ports import RunLog
from polyloop.serialization import LogRecord
from polyloop.stores._naming import is_run_file_name
from polyloop.stores._sqlite_schema import RECORDS_BY_RUN_INDEX, RECORDS_TABLE
from polyloop.stores._stored_form import decode_stored
from polyloop.types import (
    Intent,
    ModelCallResult,
    RunFinished,
    RunStarted,
    StepCompleted,
    StepRecord,
)

__all__ = [
    "RECORDS_TABLE",
    "SQLITE_HEADER",
    "LayoutUnreadable",
    "Listing",
    "Salvage",
    "assemble",
    "has_records_table",
    "is_run_file_name",
    "list_from_layout",
    "salvage_jsonl",
    "salvage_sqlite",
    "starts_like_sqlite",
]

#: The first bytes of every SQLite database file.
SQLITE_HEADER = b"SQLite format 3\x00"

#: The run_ids of a SQLite store through the covering index alone, then through the table
#: alone: a damaged page of one leaves the other readable.
_SQLITE_LISTINGS = (
    f"SELECT run_id FROM {RECORDS_TABLE} INDEXED BY {RECORDS_BY_RUN_INDEX} GROUP BY run_id "
    "ORDER BY MIN(seq)",
    f"SELECT run_id FROM {RECORDS_TABLE} NOT INDEXED GROUP BY run_id ORDER BY MIN(seq)",
)
_SQLITE_SEQS = f"SELECT seq FROM {RECORDS_TABLE} WHERE run_id = ? ORDER BY seq"
_SQLITE_BODY = f"SELECT body FROM {RECORDS_TABLE} WHERE seq = ?"
_SQLITE_HAS_TABLE = "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?"


def starts_like_sqlite(path: Path) -> bool:
    """Whether the file at ``path`` begins with SQLite's header (``False`` if unreadable)."""
    try:
        with open(path, "rb") as handle:
            return handle.read(len(SQLITE_HEADER)) == SQLITE_HEADER
    except OSError:
        return False


def _open_read_only(path: Path) -> sqlite3.Connection:
    return sqlite3.connect(f"{path.absolute().as_uri()}?mode=ro", uri=True)


def has_records_table(path: Path) -> bool:
    """Whether the SQLite database at ``path`` has the store's records table; ``True`` when
    that cannot be read (the store itself then says what is wrong with the file)."""
    try:
        connection = _open_read_only(path)
    except sqlite3.Error:
        return True
    try:
        row = connection.execute(_SQLITE_HAS_TABLE, (RECORDS_TABLE,)).fetchone()
    except sqlite3.Error:
        return True
    finally:
        connection.close()
    return row is not None


@dataclass(frozen=True, slots=True)
class Listing:
    """The run ids a store holds, and what could not even be attributed to a run."""

    run_ids: Sequence[str]
    #: Storage units (files) whose run_id cannot be read: each a one-line description.
    unreadable: Sequence[str] = ()


class LayoutUnreadable(Exception):
    """Nothing of the store could be read; the message says what the storage answered."""


@dataclass(frozen=True, slots=True)
class Salvage:
    """The records that could be read, as a log, and one line per record that could not."""

    log: RunLog
    unreadable: tuple[str, ...]


def _decode(
    text: str | bytes, steps: dict[int, StepRecord] | None = None, where: str = "the log"
) -> LogRecord:
    """The record, with what the store wrote by reference put back from the ``steps`` read so
    far (``_stored_form``); without ``steps``, only its run_id and key are exact."""
    record = decode_stored(text.decode("utf-8") if isinstance(text, bytes) else text, steps, where)
    if steps is not None and isinstance(record, StepCompleted):
        steps.setdefault(record.step.step_idx, record.step)
    return record


def _one_line(error: BaseException) -> str:
    return " ".join(str(error).split()) or type(error).__name__


def assemble(records: Iterable[LogRecord]) -> RunLog:
    """The log of ``records`` in storage order (the first ``RunStarted``/``RunFinished`` win)."""
    started: RunStarted | None = None
    finished: RunFinished | None = None
    intents: list[Intent] = []
    results: list[ModelCallResult] = []
    steps: list[StepCompleted] = []
    asks: list[UserAsked] = []
    answers: list[UserAnswered] = []
    for record in records:
        if isinstance(record, RunStarted):
            started = started or record
        elif isinstance(record, Intent):
            intents.append(record)
        elif isinstance(record, ModelCallResult):
            results.append(record)
        elif isinstance(record, StepCompleted):
            steps.append(record)
        elif isinstance(record, UserAsked):
            asks.append(record)
        elif isinstance(record, UserAnswered):
            answers.append(record)
        else:
            finished = finished or record
    return RunLog(
        started,
        tuple(intents),
        tuple(results),
        tuple(steps),
        finished,
        tuple(asks),
        tuple(answers),
    )


def _keep(
    run_id: str, where: str, items: Iterable[tuple[str | bytes | None, str]], problems: list[str]
) -> Iterator[LogRecord]:
    """Decoded records of ``run_id`` from (text or ``None`` when unreadable, position) pairs."""
    steps: dict[int, StepRecord] = {}
    for text, position in items:
        if text is None:
            continue
        try:
            record = _decode(text, steps, f"{where}, {position}")
        except (PolyLoopError, UnicodeDecodeError, ValueError) as error:
            problems.append(f"{where}, {position}: {_one_line(error)}")
            continue
        if record.run_id != run_id:
            problems.append(f"{where}, {position}: a record of another run ({record.run_id!r})")
            continue
        yield record


def salvage_sqlite(path: Path, run_id: str) -> Salvage:
    """Every readable row of ``run_id`` in the SQLite store at ``path``."""
    problems: list[str] = []
    where = str(path)
    try:
        connection = _open_read_only(path)
    except sqlite3.Error as error:
        return Salvage(RunLog(), (f"{where}: {_one_line(error)}",))
    try:
        try:
            seqs = [row[0] for row in connection.execute(_SQLITE_SEQS, (run_id,))]
        except sqlite3.Error as error:
            return Salvage(RunLog(), (f"{where}: the rows of the run: {_one_line(error)}",))

        def rows() -> Iterator[tuple[str | None, str]]:
            for seq in seqs:
                try:
                    row = connection.execute(_SQLITE_BODY, (seq,)).fetchone()
                except sqlite3.Error as error:
                    problems.append(f"{where}, row seq={seq}: {_one_line(error)}")
                    yield None, ""
                    continue
                yield (None if row is None else str(row[0])), f"row seq={seq}"

        log = assemble(_keep(run_id, where, rows(), problems))
    finally:
        connection.close()
    return Salvage(log, tuple(problems))


def salvage_jsonl(path: Path, run_id: str) -> Salvage:
    """Every decodable line of the run file at ``path`` (a torn last line is no record)."""
    try:
        data = path.read_bytes()
    except OSError as error:
        return Salvage(RunLog(), (f"{path}: cannot be read ({error.strerror})",))
    lines = data.split(b"\n")
    complete = lines[:-1]  # what follows the last newline is a torn write, or nothing
    problems: list[str] = []
    numbered = ((line, f"line {number}") for number, line in enumerate(complete, 1) if line)
    log = assemble(_keep(run_id, os.fspath(path), numbered, problems))
    return Salvage(log, tuple(problems))


def list_from_layout(kind: str, path: Path) -> Listing:
    """The run_ids of the ``kind`` (``sqlite`` or ``jsonl``) store at ``path``, read from its
    layout; raises :class:`LayoutUnreadable` when nothing can be read."""
    if kind == "jsonl":
        return _list_jsonl_directory(path)
    return _list_sqlite_file(path)


def _list_sqlite_file(path: Path) -> Listing:
    try:
        connection = _open_read_only(path)
    except sqlite3.Error as error:
        raise LayoutUnreadable(_one_line(error)) from None
    failure: sqlite3.Error | None = None
    try:
        for query in _SQLITE_LISTINGS:
            try:
                rows = connection.execute(query).fetchall()
            except sqlite3.Error as error:
                failure = failure or error
                continue
            return Listing(tuple(str(row[0]) for row in rows))
    finally:
        connection.close()
    assert failure is not None
    raise LayoutUnreadable(_one_line(failure))


def _list_jsonl_directory(path: Path) -> Listing:
    ids: list[str] = []
    unreadable: list[str] = []
    try:
        names = sorted(entry for entry in os.listdir(path) if is_run_file_name(entry))
    except OSError as error:
        raise LayoutUnreadable(f"{path}: cannot be listed ({error.strerror})") from None
    for name in names:
        try:
            with open(path / name, "rb") as handle:
                first = handle.readline()
        except OSError as error:
            unreadable.append(f"{name}: cannot be read ({error.strerror})")
            continue
        if not first.endswith(b"\n"):
            continue  # empty, or one torn line: the run's first write was never acknowledged
        try:
            record = _decode(first)
        except (PolyLoopError, UnicodeDecodeError, ValueError) as error:
            unreadable.append(f"{name}, line 1: {_one_line(error)}")
            continue
        if record.run_id not in ids:
            ids.append(record.run_id)
    return Listing(tuple(ids), tuple(unreadable))
