"""Opening a connection a PostgreSQL store may use, and saying why one failed.

Every connection gets TCP keepalive parameters on the client (libpq) side; the writing session
also sets them on the server side, where they bound how long the server takes to notice that a
worker's machine is gone and to free its leases (design 0030). Every connection checks that it
reached the database its connection string names (as the store worked it out, without I/O). The writing session then makes its commits
durable whatever the role or database defaults say (``synchronous_commit = on``) and refuses a
server that runs with ``fsync = off``.
"""

from __future__ import annotations

import contextlib
import os
import reprlib
import select
import weakref
from collections.abc import Callable
from dataclasses import dataclass

import psycopg
from psycopg.rows import TupleRow

from polyloop.errors import ConfigurationError, StoreError
from polyloop.stores.postgres._target import ConnectionTarget

__all__ = [
    "EndNotice",
    "Keepalive",
    "StoreDatabase",
    "connect",
    "ended_while_idle",
    "explain",
    "shown_run_id",
]

#: Every connection this process opened and has not closed, for the fork hook below.
_OPEN: weakref.WeakSet[psycopg.Connection[TupleRow]] = weakref.WeakSet()


def _forget_connections_in_child() -> None:
    """In a process forked from this one: point the inherited sockets at ``/dev/null``.

    A forked child holds a copy of every socket. If it kept them, a server session — and the
    run leases it holds — would outlive the parent as long as the child lives. Closing the
    copies (not the sessions: they are the parent's) ends that; ``/dev/null`` in their place
    keeps the descriptor numbers harmless should the child's copies of the connection objects
    ever try to write to them.
    """
    devnull = os.open(os.devnull, os.O_RDWR)
    try:
        for connection in list(_OPEN):
            with contextlib.suppress(Exception):
                os.dup2(devnull, connection.fileno())
    finally:
        os.close(devnull)
    _OPEN.clear()


os.register_at_fork(after_in_child=_forget_connections_in_child)

#: The oldest server with ``tcp_user_timeout`` (the server-side bound on a dead peer).
_OLDEST_SERVER = 120000


@dataclass(frozen=True, slots=True)
class Keepalive:
    """TCP keepalive settings whose dead-peer detection takes about ``seconds``."""

    seconds: int

    @property
    def interval(self) -> int:
        return max(1, self.seconds // 6)

    @property
    def count(self) -> int:
        return 3

    @property
    def idle(self) -> int:
        return max(1, self.seconds - self.count * self.interval)

    def libpq_options(self) -> dict[str, int]:
        return {
            "keepalives": 1,
            "keepalives_idle": self.idle,
            "keepalives_interval": self.interval,
            "keepalives_count": self.count,
            "tcp_user_timeout": self.seconds * 1000,
        }

    def server_settings(self) -> str:
        return (
            f"SET tcp_keepalives_idle = {self.idle}; "
            f"SET tcp_keepalives_interval = {self.interval}; "
            f"SET tcp_keepalives_count = {self.count}; "
            f"SET tcp_user_timeout = {self.seconds * 1000}"
        )


@dataclass(frozen=True, slots=True)
class StoreDatabase:
    """Where the connections of one store go, and how messages name the store."""

    #: ``PostgresRunStore(host=… schema=…)``: how every message of the store starts.
    name: str
    target: ConnectionTarget
    #: The PostgreSQL schema holding the store's tables.
    schema: str
    keepalive: Keepalive

    def explain(self, error: BaseException) -> str:
        """:func:`explain` for this store's target."""
        return explain(self.target, error)


_repr = reprlib.Repr()
_repr.maxstring = 80


def shown_run_id(run_id: str) -> str:
    """A run_id as messages show it: its ``repr``, cut in the middle past 80 characters."""
    return _repr.repr(run_id)


def explain(target: ConnectionTarget, error: BaseException) -> str:
    """``ErrorType: message`` of a driver or server error, one line, with no secret in it."""
    text = " ".join(str(error).split()) or "no message"
    return target.scrub(f"{type(error).__name__}: {text}")


def connect(
    database: StoreDatabase,
    *,
    application_name: str,
    writing: bool,
    setup: Callable[[psycopg.Connection[TupleRow]], None] | None = None,
) -> psycopg.Connection[TupleRow]:
    """A connection in autocommit mode, checked as the module docstring says, then passed to
    ``setup`` (the writing session creates the schema there).

    Raises :class:`StoreError` (or :class:`ConfigurationError` for a database other than the
    one the store worked out from its connection string) saying what is wrong and what to do. Every error is raised
    outside the ``except`` block that caught the driver's: a psycopg error keeps the connection
    options, password included, and would otherwise travel along as ``__context__``.
    """
    target, where = database.target, database.name
    connection = _open(database, application_name)
    if isinstance(connection, str):
        raise StoreError(
            f"{where}: cannot connect to the server ({connection}). Nothing was read or "
            "written; check that it runs and accepts this user, then retry."
        )
    _OPEN.add(connection)
    failure: str | None = None
    try:
        _check(database, connection, writing)
        if setup is not None:
            setup(connection)
    except psycopg.Error as error:
        failure = explain(target, error)
    except BaseException:
        connection.close()
        raise
    if failure is not None:
        connection.close()
        raise StoreError(
            f"{where}: setting up a new connection failed ({failure}). Nothing was written. "
            "Check the server and this user's rights (creating the schema needs CREATE on the "
            "database), then retry."
        )
    return connection


def _open(database: StoreDatabase, application_name: str) -> psycopg.Connection[TupleRow] | str:
    """A new connection, or why there is none (one line, scrubbed).

    The connection string with the password lives in this frame only, which no error the
    store raises has in its traceback (reporters that show local variables would show it).
    """
    options: dict[str, str | int] = {"application_name": application_name}
    options.update(database.keepalive.libpq_options())
    try:
        return psycopg.connect(
            database.target.with_options(defaults={"connect_timeout": 10}, **options),
            autocommit=True,
        )
    except psycopg.Error as error:
        return explain(database.target, error)


def _check(
    database: StoreDatabase, connection: psycopg.Connection[TupleRow], writing: bool
) -> None:
    """The checks of the module docstring, on a new connection."""
    target, where, keepalive = database.target, database.name, database.keepalive
    if writing:
        connection.execute(f"SET synchronous_commit = on; {keepalive.server_settings()}")
    row = connection.execute(
        "SELECT current_database(), current_setting('fsync'), "
        "current_setting('synchronous_commit'), current_setting('server_version_num')::int"
    ).fetchone()
    assert row is not None
    reached, fsync, synchronous_commit, version = row
    if reached != target.database:
        raise ConfigurationError(
            f"{where}: the connection string reaches database {reached!r}, but the store "
            f"worked out {target.database!r} (from the connection string and "
            "PGDATABASE/PGUSER), which its messages name. Put dbname in the connection string."
        )
    if not isinstance(version, int) or version < _OLDEST_SERVER:
        raise StoreError(
            f"{where}: the server is PostgreSQL {version}; this store needs 12 or newer "
            "(for tcp_user_timeout, which bounds how long a dead worker keeps its leases)."
        )
    if writing and fsync != "on":
        raise StoreError(
            f"{where}: the server runs with fsync = {fsync}, so a commit it acknowledges "
            "can be lost when it crashes; this store promises durable writes and refuses "
            "it. Turn fsync on in postgresql.conf, or use another server."
        )
    if writing and synchronous_commit != "on":
        raise StoreError(
            f"{where}: synchronous_commit stays {synchronous_commit!r} after setting it on "
            "for this session; commits would not be durable when they return. Check the "
            "server's configuration."
        )


def ended_while_idle(connection: psycopg.Connection[TupleRow], ended: EndNotice) -> bool:
    """Whether an idle session has been ended by the server.

    A session that never ``LISTEN``s receives nothing while idle except when the server ends
    it: a ``FATAL`` message, then end of stream (TLS bookkeeping aside, which libpq absorbs).
    libpq hands an error that arrives while idle to the notice handler (see
    :class:`EndNotice`) and reports the end of stream as a bad connection status.
    """
    for _ in range(4):
        try:
            readable, _, _ = select.select([connection.fileno()], [], [], 0)
            if not readable:
                return ended.seen
            connection.pgconn.consume_input()
            connection.pgconn.is_busy()  # parses what arrived; an error goes to the handler
        except (OSError, ValueError, psycopg.Error):
            return True
        if ended.seen or connection.pgconn.status != psycopg.pq.ConnStatus.OK:
            return True
    return True  # input keeps arriving on an idle session: nothing to trust a lease to


class EndNotice:
    """Notes a FATAL or PANIC message the server sent an idle session (it is ending it)."""

    __slots__ = ("seen",)

    def __init__(self) -> None:
        self.seen = False

    def __call__(self, diagnostic: psycopg.errors.Diagnostic) -> None:
        if diagnostic.severity_nonlocalized in ("FATAL", "PANIC"):
            self.seen = True
