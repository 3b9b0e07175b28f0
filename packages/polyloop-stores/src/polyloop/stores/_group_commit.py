"""Group commit: one writer thread turns the writes pending at a moment into one transaction.

While a commit is syncing, new writes queue up; the next transaction takes all of them (up to
``max_batch``) and pays one sync for the lot. Each write still:

- is applied on its own (a refused insert, e.g. a second ``RunStarted`` or a second record of a
  ``record_key``, fails only that write: SQLite undoes just the failing statement, the rest of
  the transaction stands);
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
import threading
from collections.abc import Callable

from polyloop.errors import PolyLoopError, StoreError
from polyloop.stores._records import RecordKey, duplicate_error
from polyloop.stores._threads import DEFAULT_IDLE_WAIT_SECONDS, Completion, settle_all

__all__ = ["GroupCommitWriter", "PendingWrite"]

_INSERT = "INSERT INTO run_records (run_id, kind, body, record_key) VALUES (?, ?, ?, ?)"


class PendingWrite:
    """One record waiting for the writer thread."""

    __slots__ = ("body", "completion", "key", "key_text", "kind", "run_id")

    def __init__(
        self,
        completion: Completion,
        run_id: str,
        kind: str,
        body: str,
        key: RecordKey,
        key_text: str | None,
    ) -> None:
        self.completion = completion
        self.run_id = run_id
        self.kind = kind
        self.body = body
        self.key = key
        self.key_text = key_text


#: ``None`` stops the thread; a bare :class:`Completion` asks it to open the connection (to
#: surface errors early) and do nothing else.
_Item = PendingWrite | Completion | None


class GroupCommitWriter:
    """The single writer of one database file in this store."""

    def __init__(
        self,
        name: str,
        open_connection: Callable[[], sqlite3.Connection],
        *,
        max_batch: int = 256,
        idle_wait: float = DEFAULT_IDLE_WAIT_SECONDS,
    ) -> None:
        self._name = name
        self._idle_wait = idle_wait
        self._open_connection = open_connection
        self._max_batch = max_batch
        self._queue: queue.SimpleQueue[_Item] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._closed = False
        self._connection: sqlite3.Connection | None = None
        #: Transactions committed so far (for tests and the benchmark).
        self.commits = 0

    def _put(self, item: _Item) -> None:
        with self._lock:
            if self._closed:
                raise StoreError(
                    f"{self._name} is closed; open a new store on the same file to continue."
                )
            if self._thread is None:
                self._thread = threading.Thread(target=self._work, name=self._name, daemon=True)
                self._thread.start()
            self._queue.put(item)

    async def write(
        self, run_id: str, kind: str, body: str, key: RecordKey, key_text: str | None
    ) -> None:
        """Store one record (``key_text``: its ``record_key`` column); return once committed."""
        completion = Completion()
        self._put(PendingWrite(completion, run_id, kind, body, key, key_text))
        await completion.wait(self._idle_wait)

    async def open(self) -> None:
        """Open the connection now (creating the schema), raising what opening raises."""
        completion = Completion()
        self._put(completion)
        await completion.wait(self._idle_wait)

    def close(self) -> None:
        """Commit what is queued, stop the thread and close the connection. Blocks."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            thread = self._thread
        if thread is not None:
            self._queue.put(None)
            thread.join()
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
        try:
            connection.execute(_INSERT, (write.run_id, write.kind, write.body, write.key_text))
        except sqlite3.IntegrityError as error:
            # SQLite undoes only the failed statement; the rest of the batch goes on.
            if getattr(error, "sqlite_errorname", "") == "SQLITE_CONSTRAINT_UNIQUE":
                return duplicate_error(write.run_id, write.key, self._name)
            return _as_store_error(error, self._name, f"storing a {write.kind} record")
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
