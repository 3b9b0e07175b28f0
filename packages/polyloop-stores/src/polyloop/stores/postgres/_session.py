"""A writing session of the store: group commit, run leases and fencing, on one thread.

One thread owns one connection — the session — and takes work from one FIFO queue: writes,
lease requests and releases. Whatever is pending when it looks (up to ``max_batch``) it handles
in queue order; consecutive writes become **one statement**, an ``INSERT … SELECT FROM unnest``
in autocommit mode, so the batch costs one round trip and one commit. Each write:

- is refused on its own: ``ON CONFLICT DO NOTHING`` skips a row that a unique index refuses
  (a second ``RunStarted``, a second intent …) instead of aborting the statement, and the rows
  ``RETURNING`` names are the ones stored; the others fail as duplicates;
- returns only after the statement committed with ``synchronous_commit = on``, i.e. is durable;
- keeps its order: FIFO queue, rows inserted in queue order (``WITH ORDINALITY``), and a run
  awaits each write before its next one.

**Leases** are session advisory locks taken on this same connection, so a run's writes go
through the very session that holds its lock. While the session lives, nobody else holds the
lock; once it is gone, the server has freed the lock and the session can commit nothing more.
The thread numbers its connections (generations). A lease belongs to the generation that took
it; a write of a leased run whose generation is gone fails with :class:`LeaseLostError` without
being sent, and the session is never replaced under a lease: writes of runs without a lease
reconnect, a leased run's writes never do. A connection that has input waiting while idle
(the server's "terminating connection" and end of stream; we never ``LISTEN``) counts as gone
before anything is sent on it.

If the statement fails, every write of the batch fails with a :class:`StoreError`: "not stored"
when the server refused it, "may or may not be stored" when the connection broke with the
statement in flight (the commit may have happened; the log read back decides).
"""

from __future__ import annotations

import contextlib
import logging
import queue
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import psycopg
from psycopg import sql
from psycopg.rows import TupleRow

from polyloop.errors import (
    ConfigurationError,
    DuplicateRecordError,
    LeaseLostError,
    RunAlreadyStartedError,
    RunLeaseHeldError,
    StoreError,
)
from polyloop.ports import LeaseHolder
from polyloop.stores._threads import (
    DEFAULT_IDLE_WAIT_SECONDS,
    Completion,
    QueueThread,
    settle_all,
)
from polyloop.stores.postgres._connect import (
    EndNotice,
    StoreDatabase,
    connect,
    ended_while_idle,
    explain,
    shown_run_id,
)
from polyloop.stores.postgres._lease import HolderQueries, SessionIdentity, holder_from_row
from polyloop.stores.postgres._schema import create_schema

__all__ = ["NOT_HERE", "PendingGroup", "PendingWrite", "WritingSession"]

_log = logging.getLogger("polyloop.stores.postgres")

#: After a statement of at least this many writes, the next one may wait for more writes ...
_LINGER_FROM = 4
#: ... until this share of them is back ...
_LINGER_BACK = 0.75
#: ... for at most this share of the last statement's duration, and never longer than this.
_LINGER_SHARE = 0.5
_LINGER_LONGEST = 0.002

_COLUMNS = "(run_key, kind, record_key, run_id, body)"
_INSERT_ONE = "INSERT INTO {table} " + _COLUMNS + " VALUES (%b, %b, %b, %b, %b) "
_INSERT_MANY = (
    "INSERT INTO {table} " + _COLUMNS + " SELECT k, t, r, i, b FROM unnest("
    "%b::bytea[], %b::text[], %b::bytea[], %b::bytea[], %b::bytea[]) "
    "WITH ORDINALITY AS w (k, t, r, i, b, n) ORDER BY n "
)
_REFUSE_DUPLICATES = "ON CONFLICT DO NOTHING RETURNING run_key, kind, record_key"
_UNLOCK_IF_HELD = (
    "SELECT pg_advisory_unlock(%s, %s) FROM pg_catalog.pg_locks WHERE locktype = 'advisory' "
    "AND pid = pg_backend_pid() AND granted AND objsubid = 2 AND classid = %s::oid "
    "AND objid = %s::oid"
)

_Connection = psycopg.Connection[TupleRow]


@dataclass(slots=True)
class PendingWrite:
    """One record waiting for the session thread."""

    completion: Completion
    run_key: bytes
    #: The run_id's UTF-8.
    run_id: bytes
    kind: str
    record_key: bytes
    body: bytes

    @property
    def shown(self) -> str:
        """The run_id as messages show it."""
        return shown_run_id(self.run_id.decode("utf-8"))


@dataclass(slots=True)
class PendingGroup:
    """Records of one run stored whole or not at all, in one transaction
    (:class:`polyloop.ports.RecordBatching`); ``completion`` is the group's, the writes' own
    ones are not used."""

    completion: Completion
    writes: tuple[PendingWrite, ...]


@dataclass(slots=True)
class _Acquire:
    completion: Completion
    run_id: str
    run_key: bytes
    lock_key: tuple[int, int]

    @property
    def shown(self) -> str:
        return shown_run_id(self.run_id)


@dataclass(slots=True)
class _Release:
    completion: Completion
    run_key: bytes
    number: int


@dataclass(slots=True)
class _Read:
    """A read of a run this session holds the lease of, on the session's own connection."""

    completion: Completion
    run_key: bytes
    query: Callable[[_Connection], Any]
    doing: str


@dataclass(frozen=True, slots=True)
class _Held:
    """A lease this session holds: the connection generation that took it."""

    generation: int
    number: int
    lock_key: tuple[int, int]
    acquired_at: str | None


#: What the session thread takes: its own items, a bare :class:`Completion` (connect now) and
#: ``None`` (stop).
_Item = PendingWrite | PendingGroup | _Acquire | _Release | _Read | Completion | None
_Write = PendingWrite | PendingGroup

#: What :meth:`WritingSession.read` gives when the session cannot read (read elsewhere).
NOT_HERE: Any = object()


class WritingSession(QueueThread[PendingWrite | PendingGroup | _Acquire | _Release | _Read]):
    """The single writer (and lease holder) of one :class:`PostgresRunStore`.

    ``close`` commits what is queued, stops the thread and ends the session (freeing its
    leases).
    """

    def __init__(
        self,
        database: StoreDatabase,
        *,
        max_batch: int = 256,
        idle_wait: float = DEFAULT_IDLE_WAIT_SECONDS,
    ) -> None:
        super().__init__(
            database.name,
            " (or belongs to the process this one was forked from); open a new store on the "
            "same database to continue.",
            idle_wait,
        )
        self._database = database
        self._target = database.target
        self._max_batch = max_batch
        self._identity = SessionIdentity.new()
        self._lease_sql = HolderQueries(database.schema)
        table = sql.Identifier(database.schema, "run_records")
        self._insert_sql = (
            sql.SQL(_INSERT_ONE + _REFUSE_DUPLICATES).format(table=table),
            sql.SQL(_INSERT_MANY + _REFUSE_DUPLICATES).format(table=table),
            sql.SQL(_INSERT_MANY + _REFUSE_DUPLICATES + ", seq").format(table=table),
            sql.SQL(
                "DELETE FROM {table} WHERE (run_key, seq) IN "
                "(SELECT * FROM unnest(%b::bytea[], %b::bigint[]))"
            ).format(table=table),
            sql.SQL(_INSERT_MANY).format(table=table),
            sql.SQL(
                "SELECT 1 FROM {table} WHERE run_key = %b AND kind = %b AND record_key = %b"
            ).format(table=table),
        )
        # Owned by the session thread from here on.
        self._connection: _Connection | None = None
        self._ended = EndNotice()  # a new one with each connection
        self._queries: dict[str, bytes] = {}
        self._generation = 0
        self._held: dict[bytes, _Held] = {}
        self._lease_numbers = 0
        self._last_batch = 0
        self._last_statement_seconds = 0.0
        #: Statements committed so far (several writes may share one).
        self.commits = 0

    # -- caller side ---------------------------------------------------------------------

    async def write(self, write: PendingWrite | PendingGroup) -> None:
        """Store one record (or a group of one run's records, whole or not at all); return
        once it is committed."""
        await self._submit(write, write.completion)

    async def acquire(self, run_id: str, run_key: bytes, lock_key: tuple[int, int]) -> int:
        """Take a run's lease; return its number (for :meth:`release`)."""
        completion = Completion()
        number: int = await self._submit(
            _Acquire(completion, run_id, run_key, lock_key), completion
        )
        return number

    async def release(self, run_key: bytes, number: int) -> None:
        """Give back lease ``number`` of a run; nothing when it is not held (any more)."""
        completion = Completion()
        with self._lock:
            if self._closed:
                return  # closing ended the session, and its locks with it
        try:
            self._put(_Release(completion, run_key, number))
        except StoreError:
            return
        await completion.wait(self._idle_wait)

    async def read(self, run_key: bytes, query: Callable[[_Connection], Any], doing: str) -> Any:
        """``query(connection)`` on the session, for a run whose lease it holds: the
        connection that holds the lease is open already, its tables checked, so a driver's
        read costs no second connection (a SCRAM handshake and a catalog check). Gives
        :data:`NOT_HERE` when the session does not hold that lease on a live connection: the
        caller reads through a reader connection instead (reads are not fenced)."""
        completion = Completion()
        try:
            self._put(_Read(completion, run_key, query, doing))
        except StoreError:
            return NOT_HERE  # closed: the readers say so in their own words
        return await completion.wait(self._idle_wait)

    def holds(self, run_key: bytes) -> bool:
        """Whether this session holds the lease of the run (read from any thread: a moment
        late at worst, which only decides whether the store remembers the steps it read)."""
        return run_key in self._held

    def _closed_down(self) -> None:
        self._release_all()
        self._drop()

    def abandon_in_child(self) -> None:
        """In a process forked from the owner: this session is the parent's. Refuse every use
        from now on; close the child's copy of the connection (its socket already points at
        ``/dev/null``, see ``_connect``), which leaves the parent's session alone."""
        self._lock = threading.Lock()  # the parent's may have been held at the fork
        self._closed = True
        self._thread = None
        self._held.clear()
        self._drop()

    def _release_all(self) -> None:
        """Give back every lease now: ending the session frees them too, but only once the
        server has processed the end, a moment after ``close`` returned."""
        connection = self._connection
        if self._held and connection is not None and not (connection.closed or connection.broken):
            with contextlib.suppress(psycopg.Error):
                connection.execute("SELECT pg_advisory_unlock_all()")
        self._held.clear()

    # -- session thread --------------------------------------------------------------------

    def _take(self) -> list[_Item]:
        """The items pending now (waiting for the first). When the last statement carried the
        writes of many runs and few are back yet, wait briefly for the rest (the writers are
        still busy with the answers of that statement): a statement of one write would cost a
        whole commit and keep the others waiting for it."""
        items = [self._queue.get()]
        expected = min(self._last_batch, self._max_batch)
        wait = min(_LINGER_LONGEST, _LINGER_SHARE * self._last_statement_seconds)
        deadline = time.monotonic() + wait
        while len(items) < self._max_batch:
            try:
                items.append(self._queue.get_nowait())
                continue
            except queue.Empty:
                pass
            remaining = deadline - time.monotonic()
            if expected < _LINGER_FROM or len(items) >= _LINGER_BACK * expected or remaining <= 0:
                break
            if not isinstance(items[-1], PendingWrite | PendingGroup):
                break  # a lease request or a stop does not wait for writes
            try:
                items.append(self._queue.get(timeout=remaining))
            except queue.Empty:
                break
        return items

    def _work(self) -> None:
        stop = False
        while not stop:
            items = self._take()
            batch: list[_Write] = []
            for item in items:
                if isinstance(item, PendingWrite | PendingGroup):
                    batch.append(item)
                    continue
                if batch:
                    self._commit(batch)
                    batch = []
                if item is None:
                    stop = True
                elif isinstance(item, _Acquire):
                    self._answer(item.completion, self._acquire, item)
                elif isinstance(item, _Release):
                    self._answer(item.completion, self._release, item)
                elif isinstance(item, _Read):
                    self._answer(item.completion, self._read, item)
                else:
                    self._answer(item, self._open_now)
            if batch:
                self._commit(batch)
            self._last_batch = sum(isinstance(item, PendingWrite | PendingGroup) for item in items)

    def _answer(self, completion: Completion, job: object, *args: object) -> None:
        try:
            result = job(*args)  # type: ignore[operator]
        except BaseException as error:
            completion.settle(None, error)
        else:
            completion.settle(result, None)

    def _current(self) -> _Connection | None:
        """The session if it is still alive; a dead one is dropped (its locks are gone)."""
        connection = self._connection
        if connection is None:
            return None
        if connection.closed or connection.broken or ended_while_idle(connection, self._ended):
            lost = [h for h in self._held.values() if h.generation == self._generation]
            if lost:
                _log.warning(
                    "%s: the session holding %d run lease(s) is gone; writes of those runs "
                    "now fail with LeaseLostError",
                    self._name,
                    len(lost),
                )
            self._drop()
            return None
        return connection

    def _open_now(self) -> None:
        self._live_connection()

    def _live_connection(self) -> _Connection:
        connection = self._current()
        if connection is not None:
            return connection
        connection = connect(
            self._database,
            application_name=self._identity.application_name(),
            writing=True,
            setup=self._prepare,
        )
        self._generation += 1
        self._connection = connection
        self._ended = EndNotice()
        connection.add_notice_handler(self._ended)
        return connection

    def _prepare(self, connection: _Connection) -> None:
        """Create the schema if it is missing; render this connection's statements once."""
        create_schema(connection, self._database.schema, self._name)
        self._queries = {
            "one": self._insert_sql[0].as_bytes(connection),
            "many": self._insert_sql[1].as_bytes(connection),
            "many seq": self._insert_sql[2].as_bytes(connection),
            "undo": self._insert_sql[3].as_bytes(connection),
            "many plain": self._insert_sql[4].as_bytes(connection),
            "exists": self._insert_sql[5].as_bytes(connection),
            "acquire": self._lease_sql.acquire.as_bytes(connection),
            "holder": self._lease_sql.holder.as_bytes(connection),
        }

    def _drop(self) -> None:
        if self._connection is not None:
            with contextlib.suppress(Exception):
                self._connection.close()
            self._connection = None

    def _commit(self, batch: list[_Write]) -> None:
        outcomes: list[tuple[Completion, object, BaseException | None]] = []
        connection = self._current()
        alive = self._generation if connection is not None else None
        pending: list[_Write] = []
        for write in batch:
            first = write.writes[0] if isinstance(write, PendingGroup) else write
            held = self._held.get(first.run_key)
            if held is not None and held.generation != alive:
                outcomes.append((write.completion, None, self._lease_lost(first)))
            else:
                pending.append(write)
        if pending:
            try:
                connection = connection or self._live_connection()
                began = time.monotonic()
                refusals = self._insert(connection, pending)
                self._last_statement_seconds = time.monotonic() - began
            except psycopg.Error as error:
                broken = connection is None or connection.broken or connection.closed
                if broken:
                    self._drop()
                outcomes += [
                    (w.completion, None, self._failed(_first(w), error, in_doubt=broken))
                    for w in pending
                ]
            except BaseException as error:
                outcomes += [(w.completion, None, _own_copy(error)) for w in pending]
            else:
                self.commits += 1
                outcomes += [
                    (w.completion, None, None if refused is None else _duplicate(refused))
                    for w, refused in zip(pending, refusals, strict=True)
                ]
        settle_all(outcomes)

    def _insert(self, connection: _Connection, pending: list[_Write]) -> list[PendingWrite | None]:
        """Insert the rows in one statement; for each item, the write the unique index
        refused (``None``: stored). A group with a refused row stores none of its rows: its
        statement then runs in a transaction that deletes the group's other rows before it
        commits, so no reader and no crash ever sees part of a group."""
        writes = [w for item in pending for w in _writes_of(item)]
        if len(writes) == 1:
            w = writes[0]
            cursor = connection.execute(
                self._queries["one"],
                (w.run_key, w.kind, w.record_key, w.run_id, w.body),
                binary=True,
            )
            return [None if cursor.fetchone() is not None else w]
        parameters = (
            [w.run_key for w in writes],
            [w.kind for w in writes],
            [w.record_key for w in writes],
            [w.run_id for w in writes],
            [w.body for w in writes],
        )
        if not any(isinstance(item, PendingGroup) and len(item.writes) > 1 for item in pending):
            cursor = connection.execute(self._queries["many"], parameters, binary=True)
            return self._refusals(pending, cursor.fetchall())
        # A plain INSERT is atomic: a duplicate anywhere makes the whole statement fail and
        # store nothing. Duplicates are rare (the loop never writes a record twice), so every
        # batch holding a group tries it first: one round trip and one commit (design 0073).
        try:
            connection.execute(self._queries["many plain"], parameters, binary=True)
        except psycopg.errors.UniqueViolation:
            if len(pending) == 1:  # one group alone (one run): it is the one refused
                return [self._first_refused(connection, writes)]
        else:
            return [None] * len(pending)
        # Some write is refused and nothing is stored: find which, storing the others.
        # BEGIN and the statement go in one round trip, COMMIT in a second.
        with connection.pipeline(), connection.transaction():
            cursor = connection.execute(self._queries["many seq"], parameters, binary=True)
            rows = cursor.fetchall()
            refusals = self._refusals(pending, rows)
            seqs = {(bytes(k), str(t), bytes(r)): seq for k, t, r, seq in rows}
            undo = [
                (w.run_key, seqs[key])
                for item, refused in zip(pending, refusals, strict=True)
                if refused is not None
                for w in _writes_of(item)
                if (key := (w.run_key, w.kind, w.record_key)) in seqs
            ]
            if undo:
                connection.execute(
                    self._queries["undo"],
                    ([k for k, _ in undo], [seq for _, seq in undo]),
                    binary=True,
                )
        return refusals

    def _first_refused(self, connection: _Connection, writes: list[PendingWrite]) -> PendingWrite:
        """Which write of a group the unique index refused (the group stored nothing)."""
        seen: set[tuple[bytes, str, bytes]] = set()
        for w in writes:
            key = (w.run_key, w.kind, w.record_key)
            if key in seen:
                return w
            seen.add(key)
            if connection.execute(self._queries["exists"], key, binary=True).fetchone():
                return w
        return writes[0]  # rows are never deleted: the refusal named one of them

    @staticmethod
    def _refusals(
        pending: list[_Write], inserted_rows: list[tuple[Any, ...]]
    ) -> list[PendingWrite | None]:
        # Of rows that share a unique key, the first in queue order is the one inserted.
        inserted = {(bytes(row[0]), str(row[1]), bytes(row[2])) for row in inserted_rows}
        refusals: list[PendingWrite | None] = []
        for item in pending:
            refused = None
            for w in _writes_of(item):
                key = (w.run_key, w.kind, w.record_key)
                if key in inserted:
                    inserted.discard(key)
                elif refused is None:
                    refused = w
            refusals.append(refused)
        return refusals

    def _acquire(self, request: _Acquire) -> int:
        held = self._held.get(request.run_key)
        if held is not None:
            holder = LeaseHolder(
                self._identity.process_id, self._identity.host_name, held.acquired_at
            )
            raise _lease_held(request, holder, "this very store object")
        connection = self._live_connection()
        identity = self._identity
        row: tuple[object, ...] | None = None
        try:
            row = connection.execute(
                self._queries["acquire"],
                (
                    request.run_key,
                    identity.token,
                    identity.process_id,
                    identity.host_name,
                    *request.lock_key,
                ),
            ).fetchone()
            if row is None:
                found = holder_from_row(
                    connection.execute(
                        self._queries["holder"],
                        HolderQueries.holder_parameters(
                            request.lock_key, request.run_key, with_details=True
                        ),
                    ).fetchone()
                )
                # None: the holder let go between the two statements; it was held a moment ago.
                raise _lease_held(request, found or LeaseHolder(), "another session")
        except psycopg.Error as error:
            failure: str | None = explain(self._target, error)
        else:
            failure = None
        if failure is not None:
            # Raised outside the except block: the driver's error holds the connection
            # options (password included) and must not travel along as __context__.
            self._unlock_after_failure(connection, request.lock_key)
            raise StoreError(
                f"{self._name}: taking the lease of run {request.shown} failed ({failure}). "
                "The lease is not held; retry once the server answers."
            )
        assert row is not None  # no row raised RunLeaseHeldError above
        self._lease_numbers += 1
        acquired_at = row[0] if isinstance(row[0], str) else None
        self._held[request.run_key] = _Held(
            self._generation, self._lease_numbers, request.lock_key, acquired_at
        )
        return self._lease_numbers

    def _unlock_after_failure(self, connection: _Connection, lock_key: tuple[int, int]) -> None:
        """The statement may have taken the lock before it failed: give it back if so."""
        if connection.broken or connection.closed:
            self._drop()
            return
        halves = (lock_key[0] & 0xFFFFFFFF, lock_key[1] & 0xFFFFFFFF)
        try:
            connection.execute(_UNLOCK_IF_HELD, (*lock_key, *halves))
        except psycopg.Error:
            self._drop()  # ending the session is the one sure way to free the lock

    def _read(self, request: _Read) -> Any:
        held = self._held.get(request.run_key)
        connection = self._current()
        if held is None or connection is None or held.generation != self._generation:
            return NOT_HERE
        try:
            return request.query(connection)
        except psycopg.Error as error:
            failure: str = explain(self._target, error)
            if connection.broken or connection.closed:
                self._drop()
        # Raised outside the except block: the driver's error holds the connection options.
        raise StoreError(
            f"{self._name}: {request.doing} failed ({failure}). Nothing was changed; retry once "
            "the server answers."
        )

    def _release(self, request: _Release) -> None:
        held = self._held.get(request.run_key)
        if held is None or held.number != request.number:
            return
        del self._held[request.run_key]
        connection = self._current()
        if connection is None or held.generation != self._generation:
            return  # the lock went with its session
        try:
            connection.execute("SELECT pg_advisory_unlock(%s, %s)", held.lock_key)
        except psycopg.Error as error:
            _log.warning(
                "%s: releasing a run lease failed (%s); ending the session so the server frees it",
                self._name,
                explain(self._target, error),
            )
            self._drop()

    def _lease_lost(self, write: PendingWrite) -> LeaseLostError:
        return LeaseLostError(
            f"{self._name}: the session that held the lease of run {write.shown} is gone, so "
            f"this {write.kind} record is NOT stored and the run may now have another driver. "
            "Stop driving it; release the lease and resume it later if it is still yours."
        )

    def _failed(self, write: PendingWrite, error: BaseException, *, in_doubt: bool) -> StoreError:
        reason = explain(self._target, error)
        if in_doubt:
            return StoreError(
                f"{self._name}: the connection broke while storing a {write.kind} record of run "
                f"{write.shown} ({reason}); it may or may not be stored. Resume the run once the "
                "server is back: the log it reads decides."
            )
        return StoreError(
            f"{self._name}: storing a {write.kind} record of run {write.shown} failed "
            f"({reason}). The record is NOT stored; what was acknowledged before is intact. "
            "Fix the server (disk, permissions) and resume the run."
        )


def _writes_of(item: _Write) -> tuple[PendingWrite, ...]:
    return item.writes if isinstance(item, PendingGroup) else (item,)


def _first(item: _Write) -> PendingWrite:
    return item.writes[0] if isinstance(item, PendingGroup) else item


def _duplicate(write: PendingWrite) -> DuplicateRecordError:
    if write.kind in ("run_started", "run_finished"):
        what = "RunStarted" if write.kind == "run_started" else "RunFinished"
        return RunAlreadyStartedError(
            f"Run {write.shown} already has a {what} record; the store refuses a second one. "
            "Use resume() to continue a started run, or pick a new run_id; a finished run's "
            "recorded result stands."
        )
    key = write.record_key.decode("utf-8", "surrogatepass")
    which = {
        "intent": f"an intent {key!r} (kind:result_id)",
        "model_call_result": f"a model call result for result_id {key!r}",
        "step_completed": f"a StepCompleted of step {key}",
    }.get(write.kind, f"a {write.kind} record {key!r}")
    return DuplicateRecordError(
        f"Run {write.shown} already has {which}; the store refuses a second one (the loop "
        "never writes one twice). The first stands; check what wrote this record again."
    )


def _own_copy(error: BaseException) -> BaseException:
    """One exception object per waiter, so each caller gets its own traceback."""
    if isinstance(error, StoreError | ConfigurationError):
        return type(error)(str(error))
    return error


def _lease_held(request: _Acquire, holder: LeaseHolder, where: str) -> RunLeaseHeldError:
    return RunLeaseHeldError(
        f"Run {request.shown} is being driven by {holder.describe()} ({where}); its lease is "
        "held until that driver finishes or dies. Wait for it, or drive another run.",
        run_id=request.run_id,
        holder=holder,
    )
