"""Run overviews in a SQLite store's file (:class:`polyloop.listing.RunOverviews`, design 0070).

Four tables beside ``run_records`` hold one overview per run (``run_overviews``, with its
tools and binding pairs in two tables of their own, so a filter is an index lookup), and
``run_overviews_stale`` holds the runs written since their overview was made. A trigger on
``run_records`` marks a run stale in the same transaction as every record written, by any
process and any version of this library, so an overview never lags silently behind a write.
A page first brings the stale runs' overviews up to date (reading those logs only, with
:func:`polyloop.listing.overview_of`, the one function that says a run's status), then answers
from the indexes. A stale mark is removed only when it still names the record seen before
the log was read, and an overview replaces another only when made from a mark at least as
new (one writer at a time: ``seq`` follows commit order), so two processes remaking at once
never leave an older overview in place.

The tables are made on first use, in one ``BEGIN IMMEDIATE`` transaction that also marks
every run already in the file stale: a file written before them opens and lists right, and
its first page reads every log once. ``polyloop_schema`` is not changed (the tables only add,
and a library that does not know them keeps writing; the trigger keeps them right).
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable

from polyloop.listing import OverviewQuery, RunOverview
from polyloop.ports import RunLog
from polyloop.stores._overview_form import overview_from_json, overview_json, read_overview

__all__ = ["count_pending", "ensure_tables", "pending_page", "refresh", "run_page"]

_PRESENT = "SELECT 1 FROM sqlite_master WHERE type = 'trigger' AND name = 'run_overviews_mark'"

_CREATE = (
    """CREATE TABLE IF NOT EXISTS run_overviews (
        run_id TEXT PRIMARY KEY,
        status TEXT NOT NULL,
        asked_at TEXT,
        seq INTEGER NOT NULL,
        body TEXT NOT NULL
    ) WITHOUT ROWID""",
    "CREATE INDEX IF NOT EXISTS run_overviews_by_status ON run_overviews (status, run_id)",
    """CREATE INDEX IF NOT EXISTS run_overviews_asks ON run_overviews (asked_at, run_id)
        WHERE status = 'waiting_approval'""",
    """CREATE TABLE IF NOT EXISTS run_overview_tools (
        tool TEXT NOT NULL, run_id TEXT NOT NULL, PRIMARY KEY (tool, run_id)
    ) WITHOUT ROWID""",
    "CREATE INDEX IF NOT EXISTS run_overview_tools_by_run ON run_overview_tools (run_id)",
    """CREATE TABLE IF NOT EXISTS run_overview_bindings (
        key TEXT NOT NULL, value TEXT NOT NULL, run_id TEXT NOT NULL,
        PRIMARY KEY (key, value, run_id)
    ) WITHOUT ROWID""",
    "CREATE INDEX IF NOT EXISTS run_overview_bindings_by_run ON run_overview_bindings (run_id)",
    """CREATE TABLE IF NOT EXISTS run_overviews_stale (
        run_id TEXT PRIMARY KEY, seq INTEGER NOT NULL
    ) WITHOUT ROWID""",
    # Every run already in the file gets its overview on the first page.
    """INSERT OR REPLACE INTO run_overviews_stale (run_id, seq)
        SELECT run_id, MAX(seq) FROM run_records GROUP BY run_id""",
    """CREATE TRIGGER IF NOT EXISTS run_overviews_mark AFTER INSERT ON run_records BEGIN
        INSERT OR REPLACE INTO run_overviews_stale (run_id, seq) VALUES (NEW.run_id, NEW.seq);
    END""",
)

#: Stale runs brought up to date per write transaction (the store's writer waits meanwhile).
_CHUNK = 256


def ensure_tables(connection: sqlite3.Connection) -> None:
    """Create the overview tables and trigger unless they are there (idempotent, race-safe)."""
    if connection.execute(_PRESENT).fetchone() is not None:
        return
    connection.execute("BEGIN IMMEDIATE")
    try:
        if connection.execute(_PRESENT).fetchone() is None:
            for statement in _CREATE:
                connection.execute(statement)
        connection.execute("COMMIT")
    except BaseException:
        if connection.in_transaction:
            connection.execute("ROLLBACK")
        raise


def refresh(connection: sqlite3.Connection, read: Callable[[str], RunLog]) -> int:
    """Bring every stale run's overview up to date; returns how many were stale.

    A run written again while its log was read stays stale: its mark is removed only when it
    still names the record seen before the read.
    """
    stale: list[tuple[str, int]] = connection.execute(
        "SELECT run_id, seq FROM run_overviews_stale"
    ).fetchall()
    for start in range(0, len(stale), _CHUNK):
        chunk = stale[start : start + _CHUNK]
        made = [(read_overview(run_id, read), seq) for run_id, seq in chunk]
        connection.execute("BEGIN IMMEDIATE")
        try:
            for overview, seq in made:
                _store(connection, overview, seq)
            connection.execute("COMMIT")
        except BaseException:
            if connection.in_transaction:
                connection.execute("ROLLBACK")
            raise
    return len(stale)


def _store(connection: sqlite3.Connection, overview: RunOverview, seq: int) -> None:
    run_id = overview.run_id
    # Two processes may bring one run up to date at once, each from the log it read: the
    # overview of the later record wins (one writer at a time: seq follows commit order).
    changed = connection.execute(
        """INSERT INTO run_overviews (run_id, status, asked_at, seq, body) VALUES (?,?,?,?,?)
            ON CONFLICT (run_id) DO UPDATE SET status = excluded.status,
            asked_at = excluded.asked_at, seq = excluded.seq, body = excluded.body
            WHERE excluded.seq >= run_overviews.seq""",
        (run_id, overview.status, overview.asked_at, seq, overview_json(overview)),
    ).rowcount
    if changed == 0:
        return
    connection.execute("DELETE FROM run_overview_tools WHERE run_id = ?", (run_id,))
    connection.executemany(
        "INSERT INTO run_overview_tools (tool, run_id) VALUES (?, ?)",
        [(tool, run_id) for tool in overview.tools],
    )
    connection.execute("DELETE FROM run_overview_bindings WHERE run_id = ?", (run_id,))
    connection.executemany(
        "INSERT INTO run_overview_bindings (key, value, run_id) VALUES (?, ?, ?)",
        [(key, value, run_id) for key, value in overview.binding],
    )
    connection.execute(
        "DELETE FROM run_overviews_stale WHERE run_id = ? AND seq = ?", (run_id, seq)
    )


def run_page(connection: sqlite3.Connection, query: OverviewQuery) -> tuple[RunOverview, ...]:
    """The page ``query`` asks for, from the (fresh) overview tables."""
    joins: list[str] = []
    where: list[str] = []
    parameters: list[object] = []
    if query.tool:
        joins.append("JOIN run_overview_tools t ON t.run_id = o.run_id AND t.tool = ?")
        parameters.append(query.tool)
    if query.binding is not None:
        joins.append(
            "JOIN run_overview_bindings b ON b.run_id = o.run_id AND b.key = ? AND b.value = ?"
        )
        parameters.extend(query.binding)
    if query.status:
        where.append("o.status = ?")
        parameters.append(query.status)
    if query.after is not None:
        where.append("o.run_id > ?")
        parameters.append(query.after)
    if query.run_id_contains:
        where.append("instr(o.run_id, ?) > 0")
        parameters.append(query.run_id_contains)
    sql = f"SELECT o.body FROM run_overviews o {' '.join(joins)}"
    if where:
        sql += " WHERE " + " AND ".join(where)
    sql += " ORDER BY o.run_id LIMIT ?"
    parameters.append(query.limit)
    return tuple(overview_from_json(str(body)) for (body,) in connection.execute(sql, parameters))


def pending_page(
    connection: sqlite3.Connection, after: tuple[str, str] | None, limit: int
) -> tuple[RunOverview, ...]:
    """The waiting runs after ``after`` by (asked_at, run_id), from the (fresh) tables."""
    sql = "SELECT body FROM run_overviews WHERE status = 'waiting_approval'"
    parameters: list[object] = []
    if after is not None:
        sql += " AND (asked_at, run_id) > (?, ?)"
        parameters.extend(after)
    sql += " ORDER BY asked_at, run_id LIMIT ?"
    parameters.append(limit)
    return tuple(overview_from_json(str(body)) for (body,) in connection.execute(sql, parameters))


def count_pending(connection: sqlite3.Connection) -> int:
    """How many runs wait on an ask, from the (fresh) tables."""
    row = connection.execute(
        "SELECT COUNT(*) FROM run_overviews WHERE status = 'waiting_approval'"
    ).fetchone()
    return int(row[0])
