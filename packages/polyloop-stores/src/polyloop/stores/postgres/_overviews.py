"""Run overviews in a PostgreSQL store's schema (:class:`polyloop.listing.RunOverviews`,
design 0070).

The same layout as the SQLite store's (:mod:`polyloop.stores._sqlite_overviews`): one overview
per run, its tools and binding pairs in tables of their own (``bytea``, as ``run_id``: a name
may hold NUL), and ``run_overviews_stale``, which a trigger on ``run_records`` fills in the
transaction of every record written. A page brings the stale runs up to date first; those
updates run under a session advisory lock of the schema, one refresher at a time, so an
overview made from an older read never replaces one made from a newer. A stale mark is
removed only when it still names the record seen before the log was read: a write committed
meanwhile (whose trigger changed it, waiting on the row lock if need be) keeps the run stale.

The tables, function and trigger are made on first use under the schema's creation lock, and
every run already there is marked stale then: a schema written before them lists right.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import psycopg
from psycopg import sql
from psycopg.rows import TupleRow

from polyloop.listing import OverviewQuery, RunOverview
from polyloop.stores._overview_form import overview_from_json, overview_json
from polyloop.stores.postgres._schema import two_int_key

__all__ = ["OverviewSql", "refresh_lock_key"]

_Connection = psycopg.Connection[TupleRow]

_PRESENT = """SELECT 1 FROM pg_catalog.pg_trigger t
    JOIN pg_catalog.pg_class c ON c.oid = t.tgrelid
    JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
    WHERE n.nspname = %s AND c.relname = 'run_records' AND t.tgname = 'run_overviews_mark'"""

_CREATE = (
    """CREATE TABLE IF NOT EXISTS {schema}.run_overviews (
        run_key bytea PRIMARY KEY,
        run_id bytea NOT NULL,
        status text NOT NULL,
        asked_at bytea,
        body text NOT NULL
    )""",
    "CREATE INDEX IF NOT EXISTS run_overviews_by_run ON {schema}.run_overviews (run_id)",
    """CREATE INDEX IF NOT EXISTS run_overviews_by_status
        ON {schema}.run_overviews (status, run_id)""",
    """CREATE INDEX IF NOT EXISTS run_overviews_asks ON {schema}.run_overviews (asked_at, run_id)
        WHERE status = 'waiting_approval'""",
    """CREATE TABLE IF NOT EXISTS {schema}.run_overview_tools (
        tool bytea NOT NULL, run_id bytea NOT NULL, run_key bytea NOT NULL,
        PRIMARY KEY (tool, run_id, run_key)
    )""",
    """CREATE INDEX IF NOT EXISTS run_overview_tools_by_run
        ON {schema}.run_overview_tools (run_key)""",
    """CREATE TABLE IF NOT EXISTS {schema}.run_overview_bindings (
        key bytea NOT NULL, value bytea NOT NULL, run_id bytea NOT NULL, run_key bytea NOT NULL,
        PRIMARY KEY (key, value, run_id, run_key)
    )""",
    """CREATE INDEX IF NOT EXISTS run_overview_bindings_by_run
        ON {schema}.run_overview_bindings (run_key)""",
    """CREATE TABLE IF NOT EXISTS {schema}.run_overviews_stale (
        run_key bytea PRIMARY KEY, run_id bytea NOT NULL, seq bigint NOT NULL
    )""",
    """CREATE OR REPLACE FUNCTION {schema}.run_overviews_mark() RETURNS trigger
        LANGUAGE plpgsql AS $$
        BEGIN
            INSERT INTO {schema}.run_overviews_stale (run_key, run_id, seq)
                VALUES (NEW.run_key, NEW.run_id, NEW.seq)
                ON CONFLICT (run_key) DO UPDATE SET seq = EXCLUDED.seq;
            RETURN NULL;
        END $$""",
    """INSERT INTO {schema}.run_overviews_stale (run_key, run_id, seq)
        SELECT run_key, run_id, max(seq) FROM {schema}.run_records GROUP BY run_key, run_id
        ON CONFLICT (run_key) DO UPDATE SET seq = EXCLUDED.seq""",
    """CREATE TRIGGER run_overviews_mark AFTER INSERT ON {schema}.run_records
        FOR EACH ROW EXECUTE FUNCTION {schema}.run_overviews_mark()""",
)

#: Stale runs brought up to date per transaction.
_CHUNK = 256


def refresh_lock_key(schema: str) -> tuple[int, int]:
    """The advisory lock that one refresher of ``schema``'s overviews holds at a time."""
    return two_int_key(b"polyloop-overviews", schema.encode())


def _encoded(text: str) -> bytes:
    return text.encode("utf-8", "surrogatepass")


class OverviewSql:
    """The statements of one schema's overviews, and the steps a page takes."""

    def __init__(self, schema: str) -> None:
        self.schema = schema
        self._name = sql.Identifier(schema)

    def _sql(self, text: str) -> sql.Composed:
        return sql.SQL(text).format(schema=self._name)

    def ensure_tables(self, connection: _Connection) -> None:
        """Create the tables and the trigger unless they are there (idempotent, race-safe)."""
        if connection.execute(_PRESENT, (self.schema,)).fetchone() is not None:
            return
        with connection.transaction():
            connection.execute(
                "SELECT pg_advisory_xact_lock(%s, %s)",
                two_int_key(b"polyloop-schema", self.schema.encode()),
            )
            if connection.execute(_PRESENT, (self.schema,)).fetchone() is not None:
                return
            for statement in _CREATE:
                connection.execute(self._sql(statement))

    def stale(self, connection: _Connection) -> list[tuple[bytes, str, int]]:
        """Every stale run: its key, id and the record its mark names."""
        rows = connection.execute(
            self._sql("SELECT run_key, run_id, seq FROM {schema}.run_overviews_stale"),
            binary=True,
        ).fetchall()
        return [(bytes(key), bytes(run_id).decode("utf-8"), int(seq)) for key, run_id, seq in rows]

    def store(
        self, connection: _Connection, made: Sequence[tuple[bytes, RunOverview, int]]
    ) -> None:
        """Write the overviews ``made`` (key, overview, the stale mark's seq) in one
        transaction, each statement once for all of them (a round trip per run would be most
        of the time)."""
        keys = [run_key for run_key, _, _ in made]
        overviews = [
            (
                run_key,
                _encoded(overview.run_id),
                overview.status,
                None if overview.asked_at is None else _encoded(overview.asked_at),
                overview_json(overview),
            )
            for run_key, overview, _ in made
        ]
        tools = [
            (_encoded(tool), _encoded(overview.run_id), run_key)
            for run_key, overview, _ in made
            for tool in overview.tools
        ]
        bindings = [
            (_encoded(key), _encoded(value), _encoded(overview.run_id), run_key)
            for run_key, overview, _ in made
            for key, value in overview.binding
        ]
        with connection.transaction(), connection.cursor() as cursor:
            cursor.executemany(
                self._sql(
                    """INSERT INTO {schema}.run_overviews (run_key, run_id, status, asked_at, body)
                        VALUES (%b, %b, %s, %b, %s)
                        ON CONFLICT (run_key) DO UPDATE SET status = EXCLUDED.status,
                        asked_at = EXCLUDED.asked_at, body = EXCLUDED.body"""
                ),
                overviews,
            )
            for table in ("run_overview_tools", "run_overview_bindings"):
                cursor.execute(
                    sql.SQL("DELETE FROM {} WHERE run_key = ANY(%s)").format(
                        sql.Identifier(self.schema, table)
                    ),
                    (keys,),
                )
            cursor.executemany(
                self._sql(
                    "INSERT INTO {schema}.run_overview_tools (tool, run_id, run_key) "
                    "VALUES (%b, %b, %b)"
                ),
                tools,
            )
            cursor.executemany(
                self._sql(
                    "INSERT INTO {schema}.run_overview_bindings (key, value, run_id, run_key) "
                    "VALUES (%b, %b, %b, %b)"
                ),
                bindings,
            )
            cursor.executemany(
                self._sql(
                    "DELETE FROM {schema}.run_overviews_stale WHERE run_key = %b AND seq = %s"
                ),
                [(run_key, seq) for run_key, _, seq in made],
            )

    def logs(
        self, run_keys: Sequence[bytes]
    ) -> Callable[[_Connection], dict[bytes, list[TupleRow]]]:
        """The records ``(seq, body)`` of the runs of ``run_keys``, in write order, by run key,
        for the reader connections' ``run``."""
        select = self._sql(
            "SELECT run_key, seq, body FROM {schema}.run_records WHERE run_key = ANY(%s) "
            "ORDER BY run_key, seq"
        )

        def query(connection: _Connection) -> dict[bytes, list[TupleRow]]:
            found: dict[bytes, list[TupleRow]] = {}
            for run_key, seq, body in connection.execute(select, (list(run_keys),), binary=True):
                found.setdefault(bytes(run_key), []).append((seq, body))
            return found

        return query

    def storing(
        self, made: Sequence[tuple[bytes, RunOverview, int]]
    ) -> Callable[[_Connection], None]:
        """:meth:`store` of ``made``, for the reader connections' ``run``."""
        return lambda connection: self.store(connection, made)

    def run_page(self, connection: _Connection, query: OverviewQuery) -> tuple[RunOverview, ...]:
        """The page ``query`` asks for, from the (fresh) tables."""
        text = "SELECT o.body FROM {schema}.run_overviews o"
        where: list[str] = []
        parameters: list[object] = []
        if query.tool:
            text += (
                " JOIN {schema}.run_overview_tools t ON t.run_key = o.run_key"
                " AND t.run_id = o.run_id AND t.tool = %b"
            )
            parameters.append(_encoded(query.tool))
        if query.binding is not None:
            text += (
                " JOIN {schema}.run_overview_bindings b ON b.run_key = o.run_key"
                " AND b.run_id = o.run_id AND b.key = %b AND b.value = %b"
            )
            parameters.extend(_encoded(part) for part in query.binding)
        if query.status:
            where.append("o.status = %s")
            parameters.append(query.status)
        if query.after is not None:
            where.append("o.run_id > %b")
            parameters.append(_encoded(query.after))
        if query.run_id_contains:
            where.append("position(%b in o.run_id) > 0")
            parameters.append(_encoded(query.run_id_contains))
        if where:
            text += " WHERE " + " AND ".join(where)
        text += " ORDER BY o.run_id LIMIT %s"
        parameters.append(query.limit)
        rows = connection.execute(self._sql(text), parameters).fetchall()
        return tuple(overview_from_json(str(body)) for (body,) in rows)

    def pending_page(
        self, connection: _Connection, after: tuple[str, str] | None, limit: int
    ) -> tuple[RunOverview, ...]:
        """The waiting runs after ``after`` by (asked_at, run_id), from the (fresh) tables."""
        text = "SELECT body FROM {schema}.run_overviews WHERE status = 'waiting_approval'"
        parameters: list[object] = []
        if after is not None:
            text += " AND (asked_at, run_id) > (%b, %b)"
            parameters.extend(_encoded(part) for part in after)
        text += " ORDER BY asked_at, run_id LIMIT %s"
        parameters.append(limit)
        rows = connection.execute(self._sql(text), parameters).fetchall()
        return tuple(overview_from_json(str(body)) for (body,) in rows)

    def count_pending(self, connection: _Connection) -> int:
        """How many runs wait on an ask, from the (fresh) tables."""
        row = connection.execute(
            self._sql(
                "SELECT count(*) FROM {schema}.run_overviews WHERE status = 'waiting_approval'"
            )
        ).fetchone()
        assert row is not None
        return int(row[0])


CHUNK = _CHUNK
