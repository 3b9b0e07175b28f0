"""The SQLite layout of run logs, and opening a connection that is safe to use.

One table of records, one row per write, in write order (``seq``). Partial unique indexes
allow one ``run_started`` and one ``run_finished`` row per run, and (schema 1.1) one row per
``record_key`` of a run — the intent of a (kind, result_id), the result of a result_id, the
step of an index: the database itself refuses the second, so of two processes racing to start
a run exactly one commits, and no record is ever stored twice.

``polyloop_schema`` holds one row ``(major, minor)``. A minor bump only adds (columns,
indexes) and stays readable; a file whose major is newer than this library's is refused.

Schema 1.0 → 1.1 (design 0021) adds the ``record_key`` column and its unique index, in one
``BEGIN IMMEDIATE`` transaction that the first writer to open the file runs (the others wait
for it, then see 1.1). Rows written before get their key, except rows that already repeat a
key: those keep ``NULL``, so the index can be built, and the reader reports the run corrupt
naming both rows.
"""

from __future__ import annotations

import os
import sqlite3

from polyloop.errors import StoreError
from polyloop.stores._files import sync_directory
from polyloop.stores._records import RecordKey, record_key
from polyloop.stores._stored_form import decode_stored

__all__ = [
    "RECORDS_BY_RUN_INDEX",
    "RECORDS_TABLE",
    "SCHEMA_MAJOR",
    "SCHEMA_MINOR",
    "check_schema",
    "connect",
    "create_schema",
    "stored_key",
]

SCHEMA_MAJOR = 1
SCHEMA_MINOR = 1

#: The table of records and its (run_id, seq) index: the names a layout reader
#: (:mod:`polyloop.stores.salvage`) queries by. This module is their only copy.
RECORDS_TABLE = "run_records"
RECORDS_BY_RUN_INDEX = "run_records_by_run"

_UNIQUE_KEY = """CREATE UNIQUE INDEX IF NOT EXISTS run_records_one_key
    ON run_records (run_id, record_key) WHERE record_key IS NOT NULL"""

_CREATE = (
    """CREATE TABLE IF NOT EXISTS polyloop_schema (
        id INTEGER PRIMARY KEY CHECK (id = 1),
        major INTEGER NOT NULL,
        minor INTEGER NOT NULL
    )""",
    f"""CREATE TABLE IF NOT EXISTS {RECORDS_TABLE} (
        seq INTEGER PRIMARY KEY,
        run_id TEXT NOT NULL,
        kind TEXT NOT NULL,
        body TEXT NOT NULL,
        record_key TEXT
    )""",
    f"CREATE INDEX IF NOT EXISTS {RECORDS_BY_RUN_INDEX} ON {RECORDS_TABLE} (run_id, seq)",
    """CREATE UNIQUE INDEX IF NOT EXISTS run_records_one_started
        ON run_records (run_id) WHERE kind = 'run_started'""",
    """CREATE UNIQUE INDEX IF NOT EXISTS run_records_one_finished
        ON run_records (run_id) WHERE kind = 'run_finished'""",
    _UNIQUE_KEY,
)

#: Schema 1.0 → 1.1, run in one transaction. ``polyloop_stored_key`` is :func:`stored_key`.
_MIGRATE_1_1 = (
    "ALTER TABLE run_records ADD COLUMN record_key TEXT",
    "UPDATE run_records SET record_key = polyloop_stored_key(body) "
    "WHERE kind IN ('intent', 'model_call_result', 'step_completed')",
    # Rows that already repeat a key were written before the database refused them: they keep
    # no key (so the index can be built) and the reader refuses their run, naming both rows.
    """UPDATE run_records SET record_key = NULL WHERE record_key IS NOT NULL
        AND (run_id, record_key) IN (
            SELECT run_id, record_key FROM run_records WHERE record_key IS NOT NULL
            GROUP BY run_id, record_key HAVING COUNT(*) > 1)""",
    _UNIQUE_KEY,
    "UPDATE polyloop_schema SET minor = 1 WHERE id = 1",
)


def key_text(key: RecordKey) -> str | None:
    """The ``record_key`` column of a row holding the record of ``key``: ``i:<kind>:<result_id>``,
    ``r:<result_id>``, ``s:<step>``, ``a:<step>`` (an ask) or ``d:<step>`` (its decision)
    (short: it is stored twice, in the row and the index);
    ``NULL`` for the head and tail records, which their own indexes keep unique."""
    tag = key[0]
    if tag == "intent":
        return f"i:{key[1]}:{key[2]}"
    if tag == "result":
        return f"r:{key[1]}"
    if tag == "step":
        return f"s:{key[1]}"
    if tag == "asked":
        return f"a:{key[1]}"
    if tag == "answered":
        return f"d:{key[1]}"
    return None


def stored_key(body: str) -> str | None:
    """The ``record_key`` of a stored row, or ``NULL`` for a body that does not decode (the
    reader reports that row)."""
    try:
        return key_text(record_key(decode_stored(body, None)))
    except Exception:  # any failure of a stored row is the reader's to report
        return None


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
    return _schema_minor(connection, path) is not None


def _schema_minor(connection: sqlite3.Connection, path: str) -> int | None:
    """The minor version of a readable schema, ``None`` when there is no schema yet."""
    try:
        row = connection.execute("SELECT major, minor FROM polyloop_schema WHERE id = 1").fetchone()
    except sqlite3.OperationalError as error:
        if "no such table" in str(error):
            return None
        raise
    if row is None:
        return None
    major, minor = row
    if major != SCHEMA_MAJOR:
        raise StoreError(
            f"{path} holds PolyLoop run logs in schema {major}.{minor}; this polyloop-stores "
            f"reads schema {SCHEMA_MAJOR}.x only. Open it with the PolyLoop version that wrote "
            "it (or a newer one), or point this store at another file."
        )
    return int(minor)


def create_schema(connection: sqlite3.Connection, path: str, synchronous: str) -> None:
    """Switch the file to WAL, create the tables if they are missing, and bring an older
    schema 1.x up to this one (idempotent; safe when several processes do it at once)."""
    mode = connection.execute("PRAGMA journal_mode = WAL").fetchone()[0]
    if str(mode).lower() != "wal":
        raise StoreError(
            f"{path}: SQLite refused WAL mode (journal_mode is {mode!r}). The file may be on a "
            "network or read-only file system; put the database on a local disk."
        )
    connection.execute(f"PRAGMA synchronous = {synchronous}")
    minor = _schema_minor(connection, path)
    if minor is not None and minor >= SCHEMA_MINOR:
        return
    connection.create_function("polyloop_stored_key", 1, stored_key, deterministic=True)
    connection.execute("BEGIN IMMEDIATE")
    try:
        # Looked at again under the write lock: another process may have done it meanwhile.
        minor = _schema_minor(connection, path)
        if minor is None:
            for statement in _CREATE:
                connection.execute(statement)
            connection.execute(
                "INSERT INTO polyloop_schema (id, major, minor) VALUES (1, ?, ?)",
                (SCHEMA_MAJOR, SCHEMA_MINOR),
            )
        elif minor < 1:
            for statement in _MIGRATE_1_1:
                connection.execute(statement)
        connection.execute("COMMIT")
    except BaseException:
        if connection.in_transaction:
            connection.execute("ROLLBACK")
        raise
    # The database file's own directory entry must survive a crash too.
    sync_directory(os.path.dirname(path) or ".")
