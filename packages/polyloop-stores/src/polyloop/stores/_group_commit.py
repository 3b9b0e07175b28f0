"""Group commit: one writer thread turns the writes pending at a moment into one transaction.

While a commit is syncing, new writes queue up; the next transaction takes all of them (up to
``max_batch``) and pays one sync for the lot. Each write still:

- is applied on its own (a refused insert, e.g. a second ``RunStarted`` or a second record of a
  ``record_key``, fails only that write: SQLite undoes just the failing statement, the rest of
  the transaction stands; a write of several records, :class:`polyloop.ports.RecordBatching`,
  goes in under a savepoint, so a refused one undoes the others of that write only);
- returns only after the transaction holding it has committed, i.e. is durable;
- keeps its order: the queue is FIFO and a run awaits each write before its next one.

If the transaction or its commit fails (disk full, I/O error, lock timeout), every write in it
fails with a :class:`StoreError` and nothing of it is stored; the connection is reopened on the
next batch, so the store stays usable.
"""

from __future__ import annotations

import contextlib
import queue
import sqlite3
from collections.abc import Callable
from dataclasses import dataclass

from polyloop.errors import PolyLoopError, StoreError
from polyloop.stores._records import RecordKey, duplicate_error
from polyloop.stores._threads import (
    DEFAULT_IDLE_WAIT_SECONDS,
    Completion,
    QueueThread,
    settle_all,
)

__all__ = ["GroupCommitWriter", "NotCopiedError", "PendingWrite", "Row", "RowCopy"]

_INSERT = "INSERT INTO run_records (run_id, kind, body, record_key) VALUES (?, ?, ?, ?)"
#: The head of a stored line up to its run id, without the kind (``_copying``).
_HEAD = '{"type":"' + '","record":{"run_id":'
#: The record key of a run's row ``?2`` after its first.
_NTH_KEY = "SELECT record_key FROM run_records WHERE run_id = ? ORDER BY seq LIMIT 1 OFFSET ?"
#: The kinds of a run's first ``?2`` rows after its first, comma-separated, in order.
_KINDS = """SELECT group_concat(kind, ',') FROM (
    SELECT kind FROM run_records WHERE run_id = ? ORDER BY seq LIMIT ? OFFSET 1)"""
#: A fork's copy: a run's first rows after its RunStarted, the quoted run id replaced in each
#: body whose head is the source's (``rowcount`` says how many were).
_COPY = """INSERT INTO run_records (run_id, kind, body, record_key)
    SELECT :run_id, kind,
        '{"type":"' || kind || '","record":{"run_id":' || :quoted
            || substr(body, length(kind) + :fixed + 1),
        record_key
    FROM (SELECT seq, kind, body, record_key FROM run_records WHERE run_id = :source
        ORDER BY seq LIMIT :count OFFSET 1)
    WHERE substr(body, 1, length(kind) + :fixed)
        = '{"type":"' || kind || '","record":{"run_id":' || :source_quoted
    ORDER BY seq"""


@dataclass(frozen=True, slots=True)
class Row:
    """One record's row: its kind, its stored body and its key."""

    kind: str
    body: str
    key: RecordKey
    #: The ``record_key`` column (see ``_sqlite_schema.key_text``).
    key_text: str | None


@dataclass(frozen=True, slots=True)
class RowCopy:
    """A fork's copy (design 0072): the ``count`` rows of ``source_run_id`` after its
    ``RunStarted``, each body's quoted run id ``source_quoted`` replaced by ``quoted``; their
    kinds are ``kinds`` (comma-separated, in order) and the last of them holds ``last_key``
    (the ``StepCompleted`` of the step before the fork)."""

    source_run_id: str
    count: int
    source_quoted: str
    quoted: str
    last_key: str
    kinds: str


class NotCopiedError(Exception):
    """The source's rows are not the ones a :class:`RowCopy` names; nothing was stored."""


@dataclass(slots=True)
class PendingWrite:
    """One write waiting for the writer thread: the rows of one run, stored all or none (then
    the rows of ``copy``, in the same savepoint)."""

    completion: Completion
    run_id: str
    rows: tuple[Row, ...]
    copy: RowCopy | None = None


class GroupCommitWriter(QueueThread[PendingWrite]):
    """The single writer of one database file in this store.

    ``close`` commits what is queued, stops the thread and closes the connection.
    """

    def __init__(
        self,
        name: str,
        open_connection: Callable[[], sqlite3.Connection],
        *,
        max_batch: int = 256,
        idle_wait: float = DEFAULT_IDLE_WAIT_SECONDS,
    ) -> None:
        super().__init__(name, "; open a new store on the same file to continue.", idle_wait)
        self._open_connection = open_connection
        self._max_batch = max_batch
        self._connection: sqlite3.Connection | None = None
        #: Transactions committed so far (for tests and the benchmark).
        self.commits = 0

    async def write(self, run_id: str, rows: tuple[Row, ...], copy: RowCopy | None = None) -> None:
        """Store the rows of one run, in order, all or none; return once committed. With
        ``copy``, the copied rows follow ``rows`` in the same all or none (else
        :class:`NotCopiedError`)."""
        completion = Completion()
        await self._submit(PendingWrite(completion, run_id, rows, copy), completion)

    def _closed_down(self) -> None:
        if self._connection is not None:
            self._connection.close()
            self._connection = None

    # -- writer thread ---------------------------------------------------------------------

    def _work(self) -> None:
        stop = False
        while not stop:
            batch: list[PendingWrite] = []
            item = self._queue.get()
            while True:
                if item is None:
                    stop = True
                elif isinstance(item, PendingWrite):
                    batch.append(item)
                else:
                    self._answer_open(item)
                if stop or len(batch) >= self._max_batch:
                    break
                try:
                    item = self._queue.get_nowait()
                except queue.Empty:
                    break
            if batch:
                self._commit(batch)

    def _connect(self) -> sqlite3.Connection:
        if self._connection is None:
            self._connection = self._open_connection()
        return self._connection

    def _answer_open(self, completion: Completion) -> None:
        try:
            self._connect()
        except BaseException as error:
            completion.settle(None, _as_store_error(error, self._name, "opening"))
        else:
            completion.settle(None, None)

    def _commit(self, batch: list[PendingWrite]) -> None:
        outcomes: list[BaseException | None] = []
        try:
            connection = self._connect()
            connection.execute("BEGIN IMMEDIATE")
            try:
                for write in batch:
                    outcomes.append(self._insert(connection, write))
                connection.execute("COMMIT")
            except BaseException:
                if connection.in_transaction:
                    connection.execute("ROLLBACK")
                raise
        except BaseException as error:
            self._drop_connection()
            # One exception object per waiter: each caller gets its own traceback.
            settle_all(
                (w.completion, None, _as_store_error(error, self._name, "committing"))
                for w in batch
            )
            return
        self.commits += 1
        settle_all(
            (w.completion, None, outcome) for w, outcome in zip(batch, outcomes, strict=True)
        )

    def _insert(self, connection: sqlite3.Connection, write: PendingWrite) -> BaseException | None:
        rows = write.rows
        if len(rows) == 1 and write.copy is None:
            return self._insert_row(connection, write.run_id, rows[0])
        connection.execute("SAVEPOINT polyloop_records")
        for row in rows:
            refused = self._insert_row(connection, write.run_id, row)
            if refused is not None:
                connection.execute("ROLLBACK TO polyloop_records")
                connection.execute("RELEASE polyloop_records")
                return refused
        if write.copy is not None:
            refused = self._insert_copy(connection, write.run_id, write.copy)
            if refused is not None:
                connection.execute("ROLLBACK TO polyloop_records")
                connection.execute("RELEASE polyloop_records")
                return refused
        connection.execute("RELEASE polyloop_records")
        return None

    def _insert_copy(
        self, connection: sqlite3.Connection, run_id: str, copy: RowCopy
    ) -> BaseException | None:
        last = connection.execute(_NTH_KEY, (copy.source_run_id, copy.count)).fetchone()
        if last is None or last[0] != copy.last_key:
            return NotCopiedError(f"the {copy.count}th row after the RunStarted differs")
        kinds = connection.execute(_KINDS, (copy.source_run_id, copy.count)).fetchone()
        if kinds is None or kinds[0] != copy.kinds:
            return NotCopiedError("the kinds of the rows after the RunStarted differ")
        fixed = len(_HEAD) + len(copy.source_quoted)
        try:
            inserted = connection.execute(
                _COPY,
                {
                    "run_id": run_id,
                    "quoted": copy.quoted,
                    "source_quoted": copy.source_quoted,
                    "source": copy.source_run_id,
                    "count": copy.count,
                    "fixed": fixed,
                },
            ).rowcount
        except sqlite3.IntegrityError as error:
            return _as_store_error(error, self._name, "copying a fork's records")
        if inserted != copy.count:
            return NotCopiedError(f"{inserted} of {copy.count} rows had the source's run id")
        return None

    def _insert_row(
        self, connection: sqlite3.Connection, run_id: str, row: Row
    ) -> BaseException | None:
        try:
            connection.execute(_INSERT, (run_id, row.kind, row.body, row.key_text))
        except sqlite3.IntegrityError as error:
            # SQLite undoes only the failed statement; the rest of the batch goes on.
            if getattr(error, "sqlite_errorname", "") == "SQLITE_CONSTRAINT_UNIQUE":
                return duplicate_error(run_id, row.key, self._name)
            return _as_store_error(error, self._name, f"storing a {row.kind} record")
        return None

    def _drop_connection(self) -> None:
        if self._connection is not None:
            with contextlib.suppress(sqlite3.Error):
                self._connection.close()
            self._connection = None


def _as_store_error(error: BaseException, name: str, doing: str) -> BaseException:
    if isinstance(error, PolyLoopError) or not isinstance(error, Exception):
        return error
    return StoreError(
        f"{name}: {doing} failed ({type(error).__name__}: {error}). The records of this attempt "
        "are NOT stored; what was acknowledged before is intact. If the disk is full or "
        "read-only, fix it and resume the run; if the database is locked, raise busy_timeout_ms "
        "or reduce the number of writing processes."
    )
