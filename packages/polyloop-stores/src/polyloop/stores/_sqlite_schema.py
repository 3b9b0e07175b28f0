"""The SQLite layout of run logs, and opening a connection that is safe to use.

One table of records, one row per write, in write order (``seq``). Partial unique indexes
allow one ``run_started`` and one ``run_finished`` row per run: the database itself refuses
the second, so of two processes racing to start a run exactly one commits.

``polyloop_schema`` holds one row ``(major, minor)``. A minor bump only adds (columns,
indexes) and stays readable; a file whose major is newer than this library's is refused.
"""

from __future__ import annotations

import os
import sqlite3

from polyloop.errors import StoreError

__all__ = ["SCHEMA_MAJOR", "SCHEMA_MINOR", "check_schema", "connect", "create_schema"]

SCHEMA_MAJOR = 1
SCHEMA_MINOR = 0

_CREATE = (
    """CREATE TABLE IF NOT EXISTS polyloop_schema (
        id INTEGER PRIMARY KEY CHECK (id = 1),
        major INTEGER NOT NULL,
        minor INTEGER NOT NULL
    )""",
    """CREATE TABLE IF NOT EXISTS run_records (
        seq INTEGER PRIMARY KEY,
        run_id TEXT NOT NULL,
        kind TEXT NOT NULL,
        body TEXT NOT NULL
    )""",
    "CREATE INDEX IF NOT EXISTS run_records_by_run ON run_records (run_id, seq)",
    """CREATE UNIQUE INDEX IF NOT EXISTS run_records_one_started
        ON run_records (run_id) WHERE kind = 'run_started'""",
    """CREATE UNIQUE INDEX IF NOT EXISTS run_records_one_finished
        ON run_records (run_id) WHERE kind = 'run_finished'""",
)


def connect(path: str, *, busy_timeout_ms: int) -> sqlite3.Connection:
    """A connection in autocommit mode (transactions are explicit), usable from any thread."""
    connection = sqlite3.connect(
        path,
        timeout=busy_timeout_ms / 1000,
        isolation_level=None,
        check_same_thread=False,
    )
    connection.execute(f"PRAGMA busy_timeout = {int(busy_timeout_ms)}")
    return connection


def check_schema(connection: sqlite3.Connection, path: str) -> bool:
    """``True`` when the schema is present and readable, ``False`` when it is not there yet.

    Raises :class:`StoreError` for a file written by a newer major version.
    """
    try:
        row = connection.execute("SELECT major, minor FROM polyloop_schema WHERE id = 1").fetchone()
    except sqlite3.OperationalError as error:
        if "no such table" in str(error):
            return False
        raise
    if row is None:
        return False
    major, minor = row
    if major != SCHEMA_MAJOR:
        raise StoreError(
            f"{path} holds PolyLoop run logs in schema {major}.{minor}; this polyloop-stores "
            f"reads schema {SCHEMA_MAJOR}.x only. Open it with the PolyLoop version that wrote "
            "it (or a newer one), or point this store at another file."
        )
    return True


def create_schema(connection: sqlite3.Connection, path: str, synchronous: str) -> None:
    """Switch the file to WAL and create the tables if they are missing (idempotent)."""
    mode = connection.execute("PRAGMA journal_mode = WAL").fetchone()[0]
    if str(mode).lower() != "wal":
        raise StoreError(
            f"{path}: SQLite refused WAL mode (journal_mode is {mode!r}). The file may be on a "
            "network or read-only file system; put the database on a local disk."
        )
    connection.execute(f"PRAGMA synchronous = {synchronous}")
    if check_schema(connection, path):
        return
    connection.execute("BEGIN IMMEDIATE")
    try:
        if not check_schema(connection, path):
            for statement in _CREATE:
                connection.execute(statement)
            connection.execute(
                "INSERT INTO polyloop_schema (id, major, minor) VALUES (1, ?, ?)",
                (SCHEMA_MAJOR, SCHEMA_MINOR),
            )
        connection.execute("COMMIT")
    except BaseException:
        connection.execute("ROLLBACK")
        raise
    directory = os.path.dirname(path) or "."
    fd = os.open(directory, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    try:
        os.fsync(fd)  # the database file's own directory entry must survive a crash too
    finally:
        os.close(fd)
