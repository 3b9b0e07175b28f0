"""Reading connections of a PostgreSQL store: one per reader thread, opened on first use.

Reads are not fenced (a lease guards writes), so a reader whose connection the server ended
while it was idle opens a new one before reading, and one that broke during a read opens a new
one on the next read. A reader never creates anything: until the store's tables exist
it answers "nothing there" after one catalog lookup per read, and once they do it checks their
version once per connection.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable
from typing import TypeVar

import psycopg
from psycopg.rows import TupleRow

from polyloop.errors import StoreError
from polyloop.stores.postgres._connect import (
    EndNotice,
    StoreDatabase,
    connect,
    ended_while_idle,
)
from polyloop.stores.postgres._schema import schema_ready

__all__ = ["ReaderConnections"]

T = TypeVar("T")
_Connection = psycopg.Connection[TupleRow]


class _Reader:
    __slots__ = ("connection", "ended", "ready")

    def __init__(self, connection: _Connection) -> None:
        self.connection = connection
        self.ended = EndNotice()
        connection.add_notice_handler(self.ended)
        #: Whether the store's tables were seen (then their version was checked).
        self.ready = False

    def gone(self) -> bool:
        """Whether the server ended this connection while it was idle."""
        c = self.connection
        return c.closed or c.broken or ended_while_idle(c, self.ended)


class ReaderConnections:
    """The reading connections of one store, one per thread that reads."""

    def __init__(self, database: StoreDatabase, application_name: str) -> None:
        self._database = database
        self._application_name = application_name
        self._local = threading.local()
        self._all: set[_Reader] = set()
        self._lock = threading.Lock()

    def run(
        self,
        query: Callable[[_Connection], T],
        doing: str,
        *,
        without_tables: Callable[[_Connection], T] | None = None,
    ) -> T | None:
        """``query(connection)`` on this thread's connection. While the store's tables do not
        exist: ``without_tables(connection)``, or ``None`` when that is not given. Raises
        :class:`StoreError` naming what it was ``doing``."""
        database = self._database
        reader: _Reader | None = getattr(self._local, "reader", None)
        if reader is not None and reader.gone():
            self._forget(reader)
            reader = None
        try:
            if reader is None:
                reader = self._open()
            if not reader.ready:
                reader.ready = schema_ready(reader.connection, database.schema, database.name)
                if not reader.ready:
                    return None if without_tables is None else without_tables(reader.connection)
            return query(reader.connection)
        except psycopg.Error as error:
            failure = database.explain(error)
        except BaseException:
            self._forget(reader)
            raise
        # Raised outside the except block: the driver's error (which holds the connection
        # options, password included) must not travel along as __context__.
        self._forget(reader)
        raise StoreError(
            f"{database.name}: {doing} failed ({failure}). Nothing was changed; retry once the "
            "server answers."
        )

    def close(self) -> None:
        """Close every reader's connection (call once the reader threads are stopped)."""
        with self._lock:
            readers, self._all = self._all, set()
        for reader in readers:
            with contextlib.suppress(Exception):
                reader.connection.close()

    def abandon_in_child(self) -> None:
        """In a forked child: close the copies of the parent's reading connections."""
        self._lock = threading.Lock()
        self._local = threading.local()
        self.close()

    def _open(self) -> _Reader:
        reader = _Reader(
            connect(self._database, application_name=self._application_name, writing=False)
        )
        with self._lock:
            self._all.add(reader)
        self._local.reader = reader
        return reader

    def _forget(self, reader: _Reader | None) -> None:
        if reader is None:
            return
        self._local.reader = None
        with self._lock:
            self._all.discard(reader)
        with contextlib.suppress(Exception):
            reader.connection.close()
