"""A durable RunStore in one SQLite file: WAL, ``synchronous=FULL``, group commit.

Each record is one row holding the tagged JSON of
:func:`polyloop.serialization.dumps_log_record` (repeated text written by reference:
:mod:`polyloop.stores._stored_form`, design 0041); ``write_step_completed`` is therefore one row,
applied atomically. Writes go to one writer thread that commits whatever is pending in one
transaction (see :mod:`polyloop.stores._group_commit`): concurrent runs share syncs, while each
write returns only once its transaction has committed, so every acknowledged write and all
writes before it are durable (prefix durability: a run awaits each write before the next).

Reads use their own thread and connection (WAL lets them run beside the writer) and see
committed rows only. Several processes may share one file: SQLite's locks order their
transactions and ``busy_timeout_ms`` bounds how long one waits for another. The database
refuses a second ``RunStarted`` or ``RunFinished`` of a run, and a second record of one key
(intent of a kind and result_id, result of a result_id, step of an index) through partial
unique indexes: that decides races between processes, and nothing is stored twice.

Run leases (:class:`polyloop.ports.RunLeasing`) are POSIX record locks on one small file per
run in the directory ``<path>-leases`` beside the database (see
:mod:`polyloop.stores._leases`): freed by the kernel when the holder dies, never inherited by a
forked child. Every read is a fresh read transaction, so a driver that took the lease sees
every write committed before, by any process.

Several records of one run can be written as one (:class:`polyloop.ports.RecordBatching`,
design 0055): their rows, each the one its own write would insert, go into one transaction,
so they are stored all or none and share one commit.

Nothing here runs on the event loop: connecting, writing and reading all happen on the
store's threads.
"""

from __future__ import annotations

import os
import sqlite3
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import TypeVar

from polyloop import listing
from polyloop.errors import ConfigurationError, CorruptLogError, SerializationError, StoreError
from polyloop.ports import LeaseHolder, RunLog
from polyloop.serialization import LogRecord, log_record_tag
from polyloop.stores import _sqlite_overviews
from polyloop.stores._copying import copyable, quoted_run_id
from polyloop.stores._durable import DurableStore, batch_run_id, unstorable_run_id, utf8_of
from polyloop.stores._group_commit import GroupCommitWriter, NotCopiedError, Row, RowCopy
from polyloop.stores._leases import FileLease, FileLeases
from polyloop.stores._records import LogBuilder, record_key
from polyloop.stores._sqlite_schema import check_schema, connect, create_schema, key_text
from polyloop.stores._stored_form import StoredSteps, decode_stored, stored_line
from polyloop.stores._threads import DEFAULT_IDLE_WAIT_SECONDS, WorkerPool, check_idle_wait
from polyloop.types import RunStarted, StepCompleted, StepRecord

__all__ = ["SqliteRunStore"]

T = TypeVar("T")

#: ``synchronous`` levels that keep a WAL commit durable when it returns.
_DURABLE_LEVELS = frozenset({"FULL", "EXTRA"})
#: The body as bytes: a body that is not UTF-8 (written outside PolyLoop) must reach the decoder,
#: which names its row, instead of failing the whole fetch inside sqlite3.
_SELECT = "SELECT seq, CAST(body AS BLOB) FROM run_records WHERE run_id = ? ORDER BY seq"
#: Appended to the database path: the directory holding the run lease files.
LEASE_DIRECTORY_SUFFIX = "-leases"
_RUN_IDS = "SELECT run_id FROM run_records GROUP BY run_id ORDER BY MIN(seq)"
#: A run's change marker (design 0069): its row count and last seq, from the (run_id, seq)
#: index alone. Writes are serialized by the database, so a later write has a larger seq.
_MARKER = "SELECT COUNT(*), COALESCE(MAX(seq), 0) FROM run_records WHERE run_id = ?"
_MARKERS = "SELECT run_id, COUNT(*), MAX(seq) FROM run_records GROUP BY run_id ORDER BY MIN(seq)"
_MARKERS_OF = (
    "SELECT run_id, COUNT(*), MAX(seq) FROM run_records WHERE run_id IN ({}) GROUP BY run_id"
)
#: Run ids per query (SQLite allows 32,766 parameters; fewer keep each read short).
_MARKERS_AT_ONCE = 500


class SqliteRunStore(DurableStore):
    """Run logs of many runs in the SQLite database at ``path`` (created on first write).

    ``synchronous`` is ``"FULL"`` (default) or ``"EXTRA"``; weaker levels would let a commit
    return before it is durable and are refused. ``busy_timeout_ms`` is how long a write waits
    for another process holding the write lock before failing. ``idle_wait_ms`` is how long a
    call may wait for its thread on the event-loop thread, only while the loop has nothing else
    ready to run, before it awaits instead (0: always await; design 0017).

    Use it as ``async with SqliteRunStore(path) as store:`` (which also opens the file, so a
    database of a newer schema is refused right there) or call :meth:`close` when done.
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        synchronous: str = "FULL",
        busy_timeout_ms: int = 30_000,
        idle_wait_ms: float = DEFAULT_IDLE_WAIT_SECONDS * 1000,
    ) -> None:
        level = synchronous.upper() if isinstance(synchronous, str) else synchronous
        if level not in _DURABLE_LEVELS:
            raise ConfigurationError(
                f"SqliteRunStore synchronous={synchronous!r} is not allowed: only FULL or EXTRA "
                "make a WAL commit durable before it returns, which every RunStore promises."
            )
        if (
            isinstance(busy_timeout_ms, bool)
            or not isinstance(busy_timeout_ms, int)
            or busy_timeout_ms < 0
        ):
            raise ConfigurationError(
                f"SqliteRunStore busy_timeout_ms must be an int >= 0, got {busy_timeout_ms!r}."
            )
        self._path = os.path.abspath(os.fspath(path))
        self._synchronous = level
        self._busy_timeout_ms = busy_timeout_ms
        idle_wait = check_idle_wait("SqliteRunStore", idle_wait_ms)
        name = f"SqliteRunStore({self._path!r})"
        self._writer = GroupCommitWriter(name, self._open_writer, idle_wait=idle_wait)
        self._readers = WorkerPool(name, 1, idle_wait=idle_wait)
        self._reader: sqlite3.Connection | None = None
        self._reader_lock = threading.Lock()
        self._leasing = WorkerPool(f"{name} leases", 2, idle_wait=idle_wait)
        self._leases = FileLeases(self._path + LEASE_DIRECTORY_SUFFIX, self._leasing)
        self._stored_steps = StoredSteps()
        #: The connection that keeps the run overviews (design 0070), on the reader thread.
        self._overviewer: sqlite3.Connection | None = None

    # -- public surface ------------------------------------------------------------------

    def parameters(self) -> Mapping[str, str]:
        """``kind`` only: where the file lives does not change what a run does, so a file
        copied or moved elsewhere resumes its runs there (design 0040)."""
        return {"kind": "sqlite"}

    @property
    def path(self) -> str:
        """Absolute path of the database file."""
        return self._path

    @property
    def commits(self) -> int:
        """Transactions this store has committed (several writes may share one)."""
        return self._writer.commits

    async def read_log(self, run_id: str) -> RunLog:
        if utf8_of(run_id) is None:
            return RunLog()  # such a run_id can never have been written
        log: RunLog = await self._readers.run(self._read, run_id)
        if self._leases.holds(run_id):
            self._stored_steps.read(run_id, log.steps)
        return log

    async def acquire_run_lease(self, run_id: str) -> FileLease:
        """Take the lease of ``run_id`` now, or raise ``RunLeaseHeldError`` naming its holder.

        Held until released or until this store is closed; the kernel frees it when this
        process dies. Creates ``<path>-leases`` if needed, never the database.
        """
        return await self._leasing.run(self._leases.take, run_id)

    async def run_lease_holder(self, run_id: str) -> LeaseHolder | None:
        """Who holds the lease of ``run_id`` now (in any process), or ``None``; takes nothing."""
        return await self._leasing.run(self._leases.look, run_id)

    async def list_run_ids(self) -> tuple[str, ...]:
        """Every run_id with at least one record, in order of its first record
        (:class:`polyloop.ports.RunListing`)."""
        return await self._readers.run(self._run_ids)

    async def change_marker(self, run_id: str) -> str:
        """The run's change marker: its record count and last ``seq``
        (:class:`polyloop.watching.ChangeMarking`); one read of the run's index."""
        rows = await self._readers.run(self._markers, _MARKER, (run_id,))
        count, last = rows[0] if rows else (0, 0)
        return f"{count}:{last}"

    async def change_markers(self, run_ids: Iterable[str] | None = None) -> Mapping[str, str]:
        """Every listed run's change marker, or those of ``run_ids``, in one read of the index
        (:class:`polyloop.watching.ChangeMarking`)."""
        if run_ids is None:
            rows = await self._readers.run(self._markers, _MARKERS, ())
        else:
            rows = await self._readers.run(self._markers_of, tuple(run_ids))
        return {str(run_id): f"{count}:{last}" for run_id, count, last in rows}

    async def open(self) -> None:
        """Open (and if needed create) the database now instead of on the first write."""
        await self._writer.open()

    def close(self) -> None:
        """Commit writes in flight, then close the connections and give back every lease
        this store object holds. Blocks; from async code use ``async with`` or :meth:`aclose`."""
        self._writer.close()
        self._readers.close()
        with self._reader_lock:
            if self._reader is not None:
                self._reader.close()
                self._reader = None
            if self._overviewer is not None:
                self._overviewer.close()
                self._overviewer = None
        self._leasing.close()
        self._leases.close()

    # -- run overviews (polyloop.listing.RunOverviews, design 0070) ------------------------

    async def run_overviews(self, query: listing.OverviewQuery) -> tuple[listing.RunOverview, ...]:
        """One page of run overviews, filtered, in run-id order, from indexes."""
        found = await self._readers.run(
            self._with_overviews, lambda c: _sqlite_overviews.run_page(c, query)
        )
        return () if found is None else found

    async def pending_asks(
        self, after: tuple[str, str] | None = None, limit: int = 50
    ) -> tuple[listing.RunOverview, ...]:
        """The runs waiting on an ask, oldest ask first, from indexes."""
        found = await self._readers.run(
            self._with_overviews, lambda c: _sqlite_overviews.pending_page(c, after, limit)
        )
        return () if found is None else found

    async def count_pending_asks(self) -> int:
        """How many runs wait on an ask."""
        found = await self._readers.run(self._with_overviews, _sqlite_overviews.count_pending)
        return 0 if found is None else found

    def _with_overviews(self, answer: Callable[[sqlite3.Connection], T]) -> T | None:
        """``answer`` over fresh overview tables (made on first use); ``None`` while the file
        holds no runs yet."""
        try:
            with self._reader_lock:
                if self._reader_connection() is None:
                    return None
                if self._overviewer is None:
                    self._overviewer = connect(self._path, busy_timeout_ms=self._busy_timeout_ms)
                connection = self._overviewer
            _sqlite_overviews.ensure_tables(connection)
            _sqlite_overviews.refresh(connection, self._read)
            return answer(connection)
        except sqlite3.Error as error:
            raise StoreError(
                f"Listing the run overviews of {self._path} failed ({type(error).__name__}: "
                f"{error}). The run logs were not changed; retry once the file is readable and "
                "writable (or raise busy_timeout_ms if it is locked)."
            ) from error

    # -- plumbing --------------------------------------------------------------------------

    async def _write(self, record: LogRecord) -> None:
        if utf8_of(record.run_id) is None:
            raise unstorable_run_id(repr(record.run_id))
        key = record_key(record)
        run_id = record.run_id
        line = stored_line(record, self._stored_steps.of(run_id))
        await self._writer.write(run_id, (Row(log_record_tag(record), line, key, key_text(key)),))
        self._stored_steps.stored(record)

    async def write_records(self, records: Sequence[LogRecord]) -> None:
        """Insert the rows of ``records``, all of one run, in one transaction
        (:class:`polyloop.ports.RecordBatching`); a refused record stores none of them."""
        run_id = batch_run_id(records, "SqliteRunStore")
        if run_id is None:
            return
        if utf8_of(run_id) is None:
            raise unstorable_run_id(repr(run_id))
        # Each row is the one its own write would give: a RunFinished may refer to a step
        # earlier in the batch, which it cannot be committed without (one transaction).
        stored: Mapping[int, StepRecord] | None = self._stored_steps.of(run_id)
        # Copied once, then added to: a batch of a thousand steps (a fork's copy) stays linear.
        own: dict[int, StepRecord] | None = None
        rows: list[Row] = []
        for record in records:
            key = record_key(record)
            rows.append(
                Row(log_record_tag(record), stored_line(record, stored), key, key_text(key))
            )
            if type(record) is StepCompleted:
                if own is None:
                    own = dict(stored or {})
                    stored = own
                own[record.step.step_idx] = record.step
        await self._writer.write(run_id, tuple(rows))
        for record in records:
            self._stored_steps.stored(record)

    async def copy_records(
        self, started: RunStarted, source_run_id: str, records: Sequence[LogRecord]
    ) -> bool:
        """Insert ``started`` and a copy of the source's rows of ``records`` (each body with only
        the run id changed, by one ``INSERT … SELECT``) in one transaction
        (:class:`polyloop.ports.RecordCopying`); ``False``, storing nothing, when the source's
        first rows are not those records."""
        run_id = started.run_id
        if utf8_of(run_id) is None:
            raise unstorable_run_id(repr(run_id))
        if not copyable(records, source_run_id):
            return False
        started_line = stored_line(started)
        quoted = quoted_run_id(started_line)
        source_quoted = quoted_run_id(stored_line(RunStarted(source_run_id, {})))
        last_key = key_text(record_key(records[-1]))
        if quoted is None or source_quoted is None or last_key is None:
            return False
        kinds = ",".join(log_record_tag(record) for record in records)
        copy = RowCopy(source_run_id, len(records), source_quoted, quoted, last_key, kinds)
        row = Row("run_started", started_line, record_key(started), None)
        try:
            await self._writer.write(run_id, (row,), copy)
        except NotCopiedError:
            return False
        self._stored_steps.read(run_id, tuple(r for r in records if type(r) is StepCompleted))
        return True

    def _open_writer(self) -> sqlite3.Connection:
        parent = os.path.dirname(self._path)
        if parent and not os.path.isdir(parent):
            raise StoreError(
                f"Cannot create {self._path}: directory {parent} does not exist. Create it first."
            )
        connection = connect(self._path, busy_timeout_ms=self._busy_timeout_ms)
        # Switching a new file to WAL, and creating the schema, can meet another process doing
        # the same; SQLite reports that as "locked" without always calling the busy handler, so
        # it is retried here for as long as busy_timeout_ms allows.
        deadline = time.monotonic() + self._busy_timeout_ms / 1000
        while True:
            try:
                create_schema(connection, self._path, self._synchronous)
            except sqlite3.OperationalError as error:
                if "locked" not in str(error) or time.monotonic() >= deadline:
                    connection.close()
                    raise
                time.sleep(0.005)
            except BaseException:
                connection.close()
                raise
            else:
                return connection

    def _read(self, run_id: str) -> RunLog:
        try:
            with self._reader_lock:
                rows = self._select(run_id)
        except sqlite3.Error as error:
            with self._reader_lock:
                if self._reader is not None:
                    self._reader.close()
                    self._reader = None
            raise StoreError(
                f"Reading the log of run {run_id!r} from {self._path} failed "
                f"({type(error).__name__}: {error}). Nothing was changed; retry once the file "
                "is readable (or raise busy_timeout_ms if it is locked)."
            ) from error
        builder = LogBuilder(run_id, self._path)
        for seq, body in rows:
            try:
                record = decode_stored(body, builder.steps, f"{self._path}, run_records seq {seq}")
            except (SerializationError, UnicodeDecodeError) as error:
                raise CorruptLogError(
                    f"{self._path}, run_records seq {seq}: not a valid log record of run "
                    f"{run_id!r} ({error}). The database was altered outside PolyLoop; repair "
                    "or delete that row (keep a copy) before reading this run."
                ) from None
            builder.add(record, "run_records seq", seq)
        return builder.build()

    def _reader_connection(self) -> sqlite3.Connection | None:
        """The reader's connection, or ``None`` while the database holds no schema yet."""
        if self._reader is None:
            if not os.path.exists(self._path):
                return None  # never written: read nothing and create nothing
            reader = connect(self._path, busy_timeout_ms=self._busy_timeout_ms)
            try:
                ready = check_schema(reader, self._path)
            except BaseException:
                reader.close()
                raise
            if not ready:
                reader.close()
                return None
            self._reader = reader
        return self._reader

    def _select(self, run_id: str) -> list[tuple[int, bytes]]:
        reader = self._reader_connection()
        return [] if reader is None else reader.execute(_SELECT, (run_id,)).fetchall()

    def _markers(self, query: str, parameters: tuple[str, ...]) -> list[tuple[object, ...]]:
        try:
            with self._reader_lock:
                reader = self._reader_connection()
                return [] if reader is None else reader.execute(query, parameters).fetchall()
        except sqlite3.Error as error:
            raise StoreError(
                f"Reading the change markers of {self._path} failed "
                f"({type(error).__name__}: {error}). Nothing was changed; retry once the file "
                "is readable."
            ) from error

    def _markers_of(self, run_ids: tuple[str, ...]) -> list[tuple[object, ...]]:
        rows: list[tuple[object, ...]] = []
        for start in range(0, len(run_ids), _MARKERS_AT_ONCE):
            chunk = run_ids[start : start + _MARKERS_AT_ONCE]
            query = _MARKERS_OF.format(", ".join("?" * len(chunk)))
            rows += self._markers(query, chunk)
        return rows

    def _run_ids(self) -> tuple[str, ...]:
        try:
            with self._reader_lock:
                reader = self._reader_connection()
                rows = [] if reader is None else list(reader.execute(_RUN_IDS))
        except sqlite3.Error as error:
            raise StoreError(
                f"Listing the runs in {self._path} failed ({type(error).__name__}: {error}). "
                "Nothing was changed; retry once the file is readable."
            ) from error
        return tuple(str(run_id) for (run_id,) in rows)
