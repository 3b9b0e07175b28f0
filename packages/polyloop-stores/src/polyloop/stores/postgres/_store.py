"""The store itself: :class:`PostgresRunStore` puts the package's parts together.

Its writes and leases go through the writing session (:mod:`._session`), its reads through the
reader connections (:mod:`._readers`); this module only turns records into rows and rows back
into a log (keys, stored form) and checks the options."""

from __future__ import annotations

import hashlib
import os
import weakref
from collections.abc import AsyncIterator, Callable, Iterable, Mapping, Sequence
from contextlib import AbstractAsyncContextManager
from typing import TypeVar

from psycopg import Connection, sql
from psycopg.errors import UniqueViolation
from psycopg.rows import TupleRow

from polyloop import listing
from polyloop.asking import (
    UserAnswered,
    UserAsked,
)
from polyloop.errors import ConfigurationError, CorruptLogError, SerializationError
from polyloop.ports import LeaseHolder, RunLog
from polyloop.serialization import LogRecord, log_record_tag
from polyloop.stores._copying import copyable, quoted_run_id
from polyloop.stores._decoding import paused_collection
from polyloop.stores._durable import DurableStore, batch_run_id, unstorable_run_id, utf8_of
from polyloop.stores._overview_form import read_overview
from polyloop.stores._records import LogBuilder
from polyloop.stores._stored_form import StoredSteps, decode_stored, stored_line
from polyloop.stores._threads import (
    DEFAULT_IDLE_WAIT_SECONDS,
    Completion,
    WorkerPool,
    check_idle_wait,
)
from polyloop.stores.postgres._connect import Keepalive, StoreDatabase, shown_run_id
from polyloop.stores.postgres._lease import (
    HolderQueries,
    PostgresRunLease,
    holder_from_row,
    lease_lock_key,
)
from polyloop.stores.postgres._listen import listen
from polyloop.stores.postgres._overviews import (
    CHUNK,
    OverviewSql,
    refresh_lock_key,
)
from polyloop.stores.postgres._readers import ReaderConnections
from polyloop.stores.postgres._session import (
    NOT_HERE,
    PendingGroup,
    PendingWrite,
    WritingSession,
)
from polyloop.stores.postgres._target import parse_target
from polyloop.types import (
    Intent,
    ModelCallResult,
    RunStarted,
    StepCompleted,
    StepRecord,
)

__all__ = ["PostgresRunStore"]

#: The head of a stored line up to its run id, without the kind (``_copying``).
_HEAD = b'{"type":"' + b'","record":{"run_id":'
#: A fork's copy (design 0072): the kind and key of the source's row ``count`` after its
#: RunStarted; the fork's RunStarted row; the source's first rows after its RunStarted, each
#: body's quoted run id replaced where its head is the source's (``rowcount``: how many were);
#: the kinds of those rows, in order.
_COPY_SQL = (
    sql.SQL(
        "SELECT kind, record_key FROM {table} WHERE run_key = %b ORDER BY seq LIMIT 1 OFFSET %s"
    ),
    sql.SQL(
        "INSERT INTO {table} (run_key, kind, record_key, run_id, body) VALUES (%b, %b, %b, %b, %b)"
    ),
    sql.SQL(
        """INSERT INTO {table} (run_key, kind, record_key, run_id, body)
        SELECT %(run_key)b, kind, record_key, %(run_id)b,
            convert_to('{{"type":"' || kind || '","record":{{"run_id":', 'UTF8') || %(quoted)b
                || substring(body from octet_length(kind) + %(fixed)s + 1)
        FROM (SELECT seq, kind, record_key, body FROM {table} WHERE run_key = %(source)b
            ORDER BY seq LIMIT %(count)s OFFSET 1) AS head
        WHERE substring(body from 1 for octet_length(kind) + %(fixed)s)
            = convert_to('{{"type":"' || kind || '","record":{{"run_id":', 'UTF8') || %(old)b
        ORDER BY seq"""
    ),
    sql.SQL(
        "SELECT string_agg(kind, ',' ORDER BY seq) FROM (SELECT seq, kind FROM {table} "
        "WHERE run_key = %b ORDER BY seq LIMIT %s OFFSET 1) AS head"
    ),
)


class _NotCopied(Exception):
    """The source's first rows are not the records a fork copies: nothing is stored."""


T = TypeVar("T")


def _run_key(run_id: str) -> bytes | None:
    """SHA-256 of the run_id's UTF-8, or ``None`` for a run_id that has no UTF-8 form."""
    encoded = utf8_of(run_id)
    return None if encoded is None else hashlib.sha256(encoded).digest()


def _record_key(record: LogRecord) -> bytes:
    """What makes a record unique within its run and kind (see ``_schema``)."""
    if isinstance(record, Intent):
        text = f"{record.kind.value}:{record.result_id}"
    elif isinstance(record, ModelCallResult):
        text = record.result_id
    elif isinstance(record, StepCompleted | UserAsked | UserAnswered):
        # One ask per step and one decision per ask (kind tells the three apart).
        text = str(record.step.step_idx if isinstance(record, StepCompleted) else record.step)
    else:
        return b""
    return text.encode("utf-8", "surrogatepass")


def _check_schema_name(schema: object) -> str:
    if (
        not isinstance(schema, str)
        or not schema
        or "\0" in schema
        or len(schema.encode("utf-8", "surrogatepass")) > 63
        or schema.lower().startswith("pg_")
    ):
        raise ConfigurationError(
            f"PostgresRunStore schema={schema!r} is not usable: give 1 to 63 bytes of text, "
            "without NUL and not starting with 'pg_' (PostgreSQL cuts longer names, which "
            "would make two stores share one schema)."
        )
    return schema


#: Every store of this process, so that a forked child can disown them (see ``_in_child``).
_STORES: weakref.WeakSet[PostgresRunStore] = weakref.WeakSet()


def _in_child() -> None:
    """A forked child must not use (or keep alive) its parent's sessions and leases."""
    for store in list(_STORES):
        store._abandon_in_child()


os.register_at_fork(after_in_child=_in_child)


class PostgresRunStore(DurableStore):
    """Run logs of many runs in schema ``schema`` of the database ``conninfo`` reaches.

    ``conninfo`` is a ``postgresql://`` URL or libpq ``key=value`` text (empty: libpq's
    defaults and ``PG*`` variables). Its password never appears in ``parameters()``, ``repr``,
    messages or logs. ``parameters()`` names the kind only — not host, port, user, database or
    schema — so a run started through one host name, or in a schema restored into another
    database, resumes there (design 0040).

    The schema and its tables are created on the first write (or lease, or :meth:`open`),
    safely when several processes start at once. ``dead_connection_timeout_seconds`` bounds,
    through TCP keepalive on both ends, how long a dead peer goes unnoticed: the server frees
    the leases of a worker whose machine died after about that long (design 0030).
    ``readers`` is how many connections read at once; ``writers`` how many writing sessions
    (each with its own connection, opened on first use) share the runs: a run's writes and its
    lease always go through the one its run_id picks, so commits of different runs proceed side
    by side (design 0073). ``idle_wait_ms`` as for the SQLite store (design 0017).

    Use it as ``async with PostgresRunStore(url) as store:`` or call :meth:`close`.
    """

    def __init__(
        self,
        conninfo: str = "",
        *,
        schema: str = "polyloop",
        dead_connection_timeout_seconds: int = 30,
        readers: int = 2,
        writers: int = 4,
        idle_wait_ms: float = DEFAULT_IDLE_WAIT_SECONDS * 1000,
    ) -> None:
        self._schema = _check_schema_name(schema)
        self._target = parse_target(conninfo, "PostgresRunStore")
        timeout = dead_connection_timeout_seconds
        if isinstance(timeout, bool) or not isinstance(timeout, int) or not 2 <= timeout <= 3600:
            raise ConfigurationError(
                "PostgresRunStore dead_connection_timeout_seconds must be an int from 2 to "
                f"3600, got {timeout!r}."
            )
        if isinstance(readers, bool) or not isinstance(readers, int) or not 1 <= readers <= 64:
            raise ConfigurationError(
                f"PostgresRunStore readers must be an int from 1 to 64, got {readers!r}."
            )
        if isinstance(writers, bool) or not isinstance(writers, int) or not 1 <= writers <= 64:
            raise ConfigurationError(
                f"PostgresRunStore writers must be an int from 1 to 64, got {writers!r}."
            )
        idle_wait = check_idle_wait("PostgresRunStore", idle_wait_ms)
        self._name = f"PostgresRunStore({self._target.describe()} schema={self._schema})"
        database = StoreDatabase(self._name, self._target, self._schema, Keepalive(timeout))
        self._database = database
        self._sessions = tuple(
            WritingSession(database, idle_wait=idle_wait) for _ in range(writers)
        )
        #: The first writing session: the one :meth:`open` connects.
        self._session = self._sessions[0]
        self._reader_threads = WorkerPool(self._name, readers, idle_wait=idle_wait)
        self._readers = ReaderConnections(database, application_name="polyloop reader")
        self._holder_sql = HolderQueries(self._schema)
        self._stored_steps = StoredSteps()
        self._overview_sql = OverviewSql(self._schema)
        _STORES.add(self)
        table = sql.Identifier(self._schema, "run_records")
        self._select_sql = sql.SQL(
            "SELECT seq, body FROM {} WHERE run_key = %b ORDER BY seq"
        ).format(table)
        self._marker_sql = sql.SQL(
            "SELECT count(*), coalesce(max(seq), 0) FROM {} WHERE run_key = %b"
        ).format(table)
        self._markers_sql = sql.SQL(
            "SELECT run_id, count(*), max(seq) FROM {} GROUP BY run_key, run_id ORDER BY min(seq)"
        ).format(table)
        self._markers_of_sql = sql.SQL(
            "SELECT run_id, count(*), max(seq) FROM {} WHERE run_key = ANY(%b::bytea[]) "
            "GROUP BY run_key, run_id"
        ).format(table)
        self._ids_sql = sql.SQL(
            "SELECT DISTINCT ON (run_key) run_key, run_id FROM {} "
            "WHERE run_key = ANY(%b::bytea[]) ORDER BY run_key, seq"
        ).format(table)
        self._copy_sql = tuple(statement.format(table=table) for statement in _COPY_SQL)
        self._list_sql = sql.SQL(
            "SELECT run_id FROM {} GROUP BY run_key, run_id ORDER BY min(seq)"
        ).format(table)

    # -- public surface ------------------------------------------------------------------

    def parameters(self) -> Mapping[str, str]:
        """``kind`` only: neither how to reach the logs (host, port, user, password) nor where
        they are (database, schema), so a schema restored into another database resumes its
        runs there (design 0040)."""
        return {"kind": "postgres"}

    def __repr__(self) -> str:
        t = self._target
        return (
            f"PostgresRunStore(host={t.host!r}, port={t.port!r}, user={t.user!r}, "
            f"database={t.database!r}, schema={self._schema!r})"
        )

    @property
    def database(self) -> str:
        """The database name, worked out from the connection string as libpq does."""
        return self._target.database

    @property
    def schema(self) -> str:
        """The PostgreSQL schema holding this store's tables."""
        return self._schema

    @property
    def commits(self) -> int:
        """Statements this store has committed (several writes may share one)."""
        return sum(session.commits for session in self._sessions)

    async def read_log(self, run_id: str) -> RunLog:
        run_key = _run_key(run_id)
        if run_key is None:
            return RunLog()  # such a run_id can never have been written
        doing = f"reading the log of run {shown_run_id(run_id)}"
        session = self._session_of(run_key)
        if session.holds(run_key):
            # The driver of the run reads through the session holding its lease (resume and
            # run() take the lease first): no second connection to open.
            rows = await session.read(run_key, self._select_rows(run_key), doing)
            if rows is not NOT_HERE:
                log: RunLog = await self._reader_threads.run(self._decode, run_id, rows)
                self._stored_steps.read(run_id, log.steps)
                return log
        log = await self._reader_threads.run(self._read, run_id, run_key, doing)
        if session.holds(run_key):
            self._stored_steps.read(run_id, log.steps)
        return log

    async def list_run_ids(self) -> tuple[str, ...]:
        """Every run_id with at least one record, in order of its first record
        (:class:`polyloop.ports.RunListing`)."""
        return await self._reader_threads.run(self._list)

    async def change_marker(self, run_id: str) -> str:
        """The run's change marker: its row count and last ``seq``, from the primary key's
        index (:class:`polyloop.watching.ChangeMarking`). The count is there because an
        identity is not handed out in commit order."""
        run_key = _run_key(run_id)
        if run_key is None:
            return "0:0"
        row = await self._reader_threads.run(self._one_marker, run_key)
        return "0:0" if row is None else f"{row[0]}:{row[1]}"

    async def change_markers(self, run_ids: Iterable[str] | None = None) -> Mapping[str, str]:
        """Every listed run's change marker, or those of ``run_ids``, in one statement
        (:class:`polyloop.watching.ChangeMarking`)."""
        if run_ids is None:
            rows = await self._reader_threads.run(self._all_markers)
        else:
            keys = [key for key in map(_run_key, run_ids) if key is not None]
            rows = await self._reader_threads.run(self._markers_of, keys) if keys else []
        return {bytes(run_id).decode("utf-8"): f"{count}:{last}" for run_id, count, last in rows}

    def watch_changes(self) -> AbstractAsyncContextManager[AsyncIterator[str]]:
        """Listen for the writes to this store's schema, by any process
        (:class:`polyloop.watching.ChangeNotifying`): the schema's trigger notifies in the
        writing transaction, so a run is yielded once its records committed."""
        return listen(self._database, self._run_ids_of)

    async def acquire_run_lease(self, run_id: str) -> PostgresRunLease:
        """Take the lease of ``run_id`` now, or raise :class:`RunLeaseHeldError` at once."""
        run_key = self._storable_key(run_id)
        lock_key = lease_lock_key(self._schema, run_key)
        session = self._session_of(run_key)
        number = await session.acquire(run_id, run_key, lock_key)

        async def release() -> None:
            await session.release(run_key, number)

        return PostgresRunLease(run_id, release)

    async def run_lease_holder(self, run_id: str) -> LeaseHolder | None:
        """Who holds the lease of ``run_id`` now (``None``: nobody); takes nothing."""
        run_key = _run_key(run_id)
        if run_key is None:
            return None
        return await self._reader_threads.run(self._holder, run_key)

    async def open(self) -> None:
        """Connect the first writing session now (creating the schema) instead of on first
        use; the others connect on their first use."""
        await self._session.open()

    def close(self) -> None:
        """Commit writes in flight, then end every session (which frees this store's leases).
        Blocks; from async code use :meth:`aclose` or ``async with``."""
        for session in self._sessions:
            session.close()
        self._reader_threads.close()
        self._readers.close()

    def _abandon_in_child(self) -> None:
        for session in self._sessions:
            session.abandon_in_child()
        self._readers.abandon_in_child()
        self._reader_threads = WorkerPool(self._name, 1)
        self._reader_threads.close()  # a closed pool: reads refuse at once instead of hanging

    # -- run overviews (polyloop.listing.RunOverviews, design 0070) ------------------------

    async def run_overviews(self, query: listing.OverviewQuery) -> tuple[listing.RunOverview, ...]:
        """One page of run overviews, filtered, in run-id order, from indexes."""
        overviews = self._overview_sql
        found = await self._reader_threads.run(
            self._with_overviews, lambda c: overviews.run_page(c, query)
        )
        return () if found is None else found

    async def pending_asks(
        self, after: tuple[str, str] | None = None, limit: int = 50
    ) -> tuple[listing.RunOverview, ...]:
        """The runs waiting on an ask, oldest ask first, from indexes."""
        overviews = self._overview_sql
        found = await self._reader_threads.run(
            self._with_overviews, lambda c: overviews.pending_page(c, after, limit)
        )
        return () if found is None else found

    async def count_pending_asks(self) -> int:
        """How many runs wait on an ask."""
        found = await self._reader_threads.run(
            self._with_overviews, self._overview_sql.count_pending
        )
        return 0 if found is None else found

    def _with_overviews(self, answer: Callable[[Connection[TupleRow]], T]) -> T | None:
        """``answer`` over fresh overview tables (made on first use); ``None`` while the
        schema holds no tables yet."""
        overviews = self._overview_sql
        doing = "bringing the run overviews up to date"

        def ensure(connection: Connection[TupleRow]) -> bool:
            overviews.ensure_tables(connection)
            return True

        if not self._readers.run(ensure, doing):
            return None
        lock = refresh_lock_key(self._schema)
        self._readers.run(lambda c: c.execute("SELECT pg_advisory_lock(%s, %s)", lock), doing)
        try:
            stale = self._readers.run(overviews.stale, doing) or []
            for start in range(0, len(stale), CHUNK):
                chunk = stale[start : start + CHUNK]
                # The chunk's logs in one query: a round trip per run would be most of the time.
                rows = self._readers.run(overviews.logs([key for key, _, _ in chunk]), doing)
                made = [
                    (run_key, read_overview(run_id, self._decoder((rows or {}).get(run_key))), seq)
                    for run_key, run_id, seq in chunk
                ]
                self._readers.run(overviews.storing(made), doing)
        finally:
            self._readers.run(lambda c: c.execute("SELECT pg_advisory_unlock(%s, %s)", lock), doing)
        return self._readers.run(answer, "listing the run overviews")

    def _decoder(self, rows: list[TupleRow] | None) -> Callable[[str], RunLog]:
        def decode(run_id: str) -> RunLog:
            return self._decode(run_id, rows)

        return decode

    # -- plumbing --------------------------------------------------------------------------

    def _session_of(self, run_key: bytes) -> WritingSession:
        """The writing session of a run: the same one for as long as this store lives."""
        sessions = self._sessions
        return sessions[int.from_bytes(run_key[:8], "big") % len(sessions)]

    def _storable_key(self, run_id: str) -> bytes:
        run_key = _run_key(run_id)
        if run_key is None:
            raise unstorable_run_id(shown_run_id(run_id))
        return run_key

    async def _write(self, record: LogRecord) -> None:
        run_id = record.run_id
        run_key = self._storable_key(run_id)
        write = PendingWrite(
            Completion(),
            run_key,
            run_id.encode("utf-8"),
            log_record_tag(record),
            _record_key(record),
            stored_line(record, self._stored_steps.of(run_id)).encode("utf-8"),
        )
        await self._session_of(run_key).write(write)
        self._stored_steps.stored(record)

    async def write_records(self, records: Sequence[LogRecord]) -> None:
        """Store ``records``, all of one run, as one group: one transaction, committed with
        the other writes pending (:class:`polyloop.ports.RecordBatching`); a refused record
        stores none of them."""
        run_id = batch_run_id(records, "PostgresRunStore")
        if run_id is None:
            return
        run_key = self._storable_key(run_id)
        encoded = run_id.encode("utf-8")
        # Each row is the one its own write would give: a RunFinished may refer to a step
        # earlier in the group, which is committed with it or not at all.
        stored: Mapping[int, StepRecord] | None = self._stored_steps.of(run_id)
        # Copied once, then added to: a batch of a thousand steps (a fork's copy) stays linear.
        own: dict[int, StepRecord] | None = None
        writes = []
        for record in records:
            line = stored_line(record, stored).encode("utf-8")
            writes.append(
                PendingWrite(
                    Completion(),
                    run_key,
                    encoded,
                    log_record_tag(record),
                    _record_key(record),
                    line,
                )
            )
            if type(record) is StepCompleted:
                if own is None:
                    own = dict(stored or {})
                    stored = own
                own[record.step.step_idx] = record.step
        await self._session_of(run_key).write(PendingGroup(Completion(), tuple(writes)))
        for record in records:
            self._stored_steps.stored(record)

    async def copy_records(
        self, started: RunStarted, source_run_id: str, records: Sequence[LogRecord]
    ) -> bool:
        """Insert ``started`` and a copy of the source's rows of ``records`` (each body with only
        the run id changed, by one ``INSERT … SELECT`` on the server) in one transaction
        (:class:`polyloop.ports.RecordCopying`), on the connection holding the fork's lease.
        ``False``, storing nothing, when the source's first rows are not those records or this
        store object does not hold the lease."""
        run_id = started.run_id
        run_key = self._storable_key(run_id)
        source_key = _run_key(source_run_id)
        if source_key is None or not copyable(records, source_run_id):
            return False
        started_line = stored_line(started)
        quoted = quoted_run_id(started_line)
        source_quoted = quoted_run_id(stored_line(RunStarted(source_run_id, {})))
        if quoted is None or source_quoted is None:
            return False
        statements, count = self._copy_sql, len(records)
        last_key = _record_key(records[-1])
        kinds = ",".join(log_record_tag(record) for record in records)
        old = source_quoted.encode("utf-8")
        head = (run_key, "run_started", _record_key(started), run_id.encode("utf-8"))

        def copy(connection: Connection[TupleRow]) -> bool:
            try:
                with connection.transaction():
                    last = connection.execute(
                        statements[0], (source_key, count), binary=True
                    ).fetchone()
                    if last is None or tuple(last) != ("step_completed", last_key):
                        raise _NotCopied
                    stored = connection.execute(statements[3], (source_key, count)).fetchone()
                    if stored is None or stored[0] != kinds:
                        raise _NotCopied
                    connection.execute(
                        statements[1], (*head, started_line.encode("utf-8")), binary=True
                    )
                    inserted = connection.execute(
                        statements[2],
                        {
                            "run_key": run_key,
                            "run_id": head[3],
                            "quoted": quoted.encode("utf-8"),
                            "old": old,
                            "fixed": len(_HEAD) + len(old),
                            "source": source_key,
                            "count": count,
                        },
                        binary=True,
                    ).rowcount
                    if inserted != count:
                        raise _NotCopied
            except (_NotCopied, UniqueViolation):
                # A record already there: write_records, which the caller falls back to,
                # refuses it in its own words.
                return False
            return True

        doing = f"copying the records of run {shown_run_id(source_run_id)} into a fork"
        copied = await self._session_of(run_key).read(run_key, copy, doing)
        if copied is not True:
            return False  # NOT_HERE: no lease held here; the caller writes the records
        self._stored_steps.read(run_id, tuple(r for r in records if type(r) is StepCompleted))
        return True

    def _select_rows(self, run_key: bytes) -> Callable[[Connection[TupleRow]], list[TupleRow]]:
        select = self._select_sql

        def query(connection: Connection[TupleRow]) -> list[TupleRow]:
            return connection.execute(select, (run_key,), binary=True).fetchall()

        return query

    def _read(self, run_id: str, run_key: bytes, doing: str) -> RunLog:
        return self._decode(run_id, self._readers.run(self._select_rows(run_key), doing))

    def _decode(self, run_id: str, rows: list[TupleRow] | None) -> RunLog:
        with paused_collection():
            return self._build(run_id, rows or ())

    def _build(self, run_id: str, rows: Iterable[TupleRow]) -> RunLog:
        builder = LogBuilder(run_id, self._name)
        for seq, body in rows:
            try:
                record = decode_stored(
                    bytes(body), builder.steps, f"{self._name}, run_records seq {seq}"
                )
            except (SerializationError, UnicodeDecodeError) as error:
                raise CorruptLogError(
                    f"{self._name}, run_records seq {seq}: not a valid log record of run "
                    f"{shown_run_id(run_id)} ({error}). The table was altered outside PolyLoop; "
                    "repair or delete that row (keep a copy) before reading this run."
                ) from None
            builder.add(record, "run_records seq", seq)
        return builder.build()

    def _one_marker(self, run_key: bytes) -> TupleRow | None:
        return self._readers.run(
            lambda connection: connection.execute(self._marker_sql, (run_key,)).fetchone(),
            "reading a run's change marker",
        )

    def _all_markers(self) -> list[TupleRow]:
        rows = self._readers.run(
            lambda connection: connection.execute(self._markers_sql, binary=True).fetchall(),
            "reading the runs' change markers",
        )
        return rows or []

    def _markers_of(self, keys: list[bytes]) -> list[TupleRow]:
        rows = self._readers.run(
            lambda connection: connection.execute(
                self._markers_of_sql, (keys,), binary=True
            ).fetchall(),
            "reading the runs' change markers",
        )
        return rows or []

    async def _run_ids_of(self, keys: Sequence[bytes]) -> dict[bytes, str]:
        def query() -> list[TupleRow]:
            rows = self._readers.run(
                lambda connection: connection.execute(
                    self._ids_sql, (list(keys),), binary=True
                ).fetchall(),
                "looking up the runs written",
            )
            return rows or []

        rows = await self._reader_threads.run(query)
        return {bytes(key): bytes(run_id).decode("utf-8") for key, run_id in rows}

    def _list(self) -> tuple[str, ...]:
        rows = self._readers.run(
            lambda connection: connection.execute(self._list_sql, binary=True).fetchall(),
            "listing the runs",
        )
        return tuple(bytes(run_id).decode("utf-8") for (run_id,) in rows or ())

    def _holder(self, run_key: bytes) -> LeaseHolder | None:
        lock_key = lease_lock_key(self._schema, run_key)
        queries = self._holder_sql
        details = queries.holder_parameters(lock_key, run_key, with_details=True)
        bare = queries.holder_parameters(lock_key, run_key, with_details=False)
        row = self._readers.run(
            lambda connection: connection.execute(queries.holder, details).fetchone(),
            "looking up a run's lease holder",
            # No tables yet: the lock table alone still says whether someone holds the lock.
            without_tables=lambda connection: connection.execute(
                queries.holder_without_details, bare
            ).fetchone(),
        )
        return holder_from_row(row)
