"""What can still be read of a run log the store refuses to read (``show`` of a damaged run).

A store reads a log whole or not at all: one undecodable record, or one damaged database page,
and ``read_log`` raises. To show what is left, this reads the documented on-disk layout record
by record, read-only, and keeps every record that decodes (design 0015 couples the CLI to that
layout for listing already): the rows of ``run_records`` one ``seq`` at a time for SQLite, the
lines of the run's file for JSON Lines. What it skips is listed, one line per unreadable record.
"""

from __future__ import annotations

import os
import sqlite3
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

from polyloop.errors import PolyLoopError
from polyloop.ports import RunLog
from polyloop.serialization import LogRecord, loads_log_record
from polyloop.types import Intent, ModelCallResult, RunFinished, RunStarted, StepCompleted

__all__ = ["Salvage", "salvage_jsonl", "salvage_sqlite"]


@dataclass(frozen=True, slots=True)
class Salvage:
    """The records that could be read, as a log, and one line per record that could not."""

    log: RunLog
    unreadable: tuple[str, ...]


def _decode(text: str | bytes) -> LogRecord:
    return loads_log_record(text.decode("utf-8") if isinstance(text, bytes) else text)


def _one_line(error: BaseException) -> str:
    return " ".join(str(error).split()) or type(error).__name__


def assemble(records: Iterable[LogRecord]) -> RunLog:
    """The log of ``records`` in storage order (the first ``RunStarted``/``RunFinished`` win)."""
    started: RunStarted | None = None
    finished: RunFinished | None = None
    intents: list[Intent] = []
    results: list[ModelCallResult] = []
    steps: list[StepCompleted] = []
    for record in records:
        if isinstance(record, RunStarted):
            started = started or record
        elif isinstance(record, Intent):
            intents.append(record)
        elif isinstance(record, ModelCallResult):
            results.append(record)
        elif isinstance(record, StepCompleted):
            steps.append(record)
        else:
            finished = finished or record
    return RunLog(started, tuple(intents), tuple(results), tuple(steps), finished)


def _keep(
    run_id: str, where: str, items: Iterable[tuple[str | bytes | None, str]], problems: list[str]
) -> Iterator[LogRecord]:
    """Decoded records of ``run_id`` from (text or ``None`` when unreadable, position) pairs."""
    for text, position in items:
        if text is None:
            continue
        try:
            record = _decode(text)
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
        connection = sqlite3.connect(f"{path.absolute().as_uri()}?mode=ro", uri=True)
    except sqlite3.Error as error:
        return Salvage(RunLog(), (f"{where}: {_one_line(error)}",))
    try:
        try:
            seqs = [
                row[0]
                for row in connection.execute(
                    "SELECT seq FROM run_records WHERE run_id = ? ORDER BY seq", (run_id,)
                )
            ]
        except sqlite3.Error as error:
            return Salvage(RunLog(), (f"{where}: the rows of the run: {_one_line(error)}",))

        def rows() -> Iterator[tuple[str | None, str]]:
            for seq in seqs:
                try:
                    row = connection.execute(
                        "SELECT body FROM run_records WHERE seq = ?", (seq,)
                    ).fetchone()
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
