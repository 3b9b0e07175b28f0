"""The PostgreSQL layout of run logs, in one schema per store, and its version.

``run_records`` holds one row per write. ``run_key`` is the SHA-256 of the run_id's UTF-8
bytes: a fixed 32 bytes that any run_id maps to (NUL characters, 10 kB, any script; PostgreSQL
``text`` can hold none of NUL, and a b-tree entry at most ~2.7 kB), so run_ids never collide,
never error and never depend on the database's encoding or collation. The run_id itself is
kept beside it (``bytea``, for listing) and inside the record, where every read checks it.
``body`` is the record's tagged JSON as UTF-8 bytes.

``UNIQUE (run_key, kind, record_key)`` makes the database refuse every record a log holds at
most once: ``record_key`` is empty for ``run_started``/``run_finished``, ``<intent kind>:<result
id>`` for an intent, the result_id for a model call result, the step index for a step, an ask
(``user_asked``) and its decision (``user_answered``). Reads
follow ``PRIMARY KEY (run_key, seq)``; ``seq`` (an identity) is the write order.

Schema 1.1 (design 0069) adds a statement-level trigger on ``run_records``: every statement
that inserts rows calls ``pg_notify`` once per run it wrote, on the store's channel
(:func:`notify_channel`), with the hex of the run's ``run_key`` (a run_id can hold NUL and be
10 kB; a payload cannot). The notification is part of the inserting transaction: it is sent
when the rows commit and never for rows that did not, whichever process or library version
wrote them. A 1.0 schema gets the trigger from the first writer that opens it.

``run_leases`` says who holds which run's lease (the lock itself is an advisory lock; see
``_lease``). ``polyloop_schema`` holds one row ``(major, minor)``: a newer minor only
adds and stays readable; a newer major is refused.
"""

from __future__ import annotations

import hashlib

import psycopg
from psycopg import sql
from psycopg.rows import TupleRow

from polyloop.errors import StoreError

__all__ = [
    "SCHEMA_MAJOR",
    "SCHEMA_MINOR",
    "create_schema",
    "notify_channel",
    "schema_ready",
    "two_int_key",
]

SCHEMA_MAJOR = 1
SCHEMA_MINOR = 1

_CREATE = (
    "CREATE SCHEMA IF NOT EXISTS {schema}",
    """CREATE TABLE IF NOT EXISTS {schema}.polyloop_schema (
        id integer PRIMARY KEY CHECK (id = 1),
        major integer NOT NULL,
        minor integer NOT NULL
    )""",
    """CREATE TABLE IF NOT EXISTS {schema}.run_records (
        run_key bytea NOT NULL,
        seq bigint GENERATED ALWAYS AS IDENTITY,
        kind text NOT NULL,
        record_key bytea NOT NULL,
        run_id bytea NOT NULL,
        body bytea NOT NULL,
        PRIMARY KEY (run_key, seq),
        UNIQUE (run_key, kind, record_key)
    )""",
    """CREATE TABLE IF NOT EXISTS {schema}.run_leases (
        run_key bytea PRIMARY KEY,
        session_token text NOT NULL,
        process_id integer NOT NULL,
        host_name text NOT NULL,
        acquired_at timestamptz NOT NULL
    )""",
    """INSERT INTO {schema}.polyloop_schema (id, major, minor) VALUES (1, {major}, {minor})
        ON CONFLICT (id) DO NOTHING""",
)

#: Schema 1.0 -> 1.1: the notifying trigger (also run when creating a schema).
_NOTIFYING = (
    """CREATE OR REPLACE FUNCTION {schema}.polyloop_notify_written() RETURNS trigger
        LANGUAGE plpgsql AS $$
        BEGIN
            PERFORM pg_notify(TG_ARGV[0], encode(written.run_key, 'hex'))
                FROM (SELECT DISTINCT run_key FROM added) AS written;
            RETURN NULL;
        END
        $$""",
    "DROP TRIGGER IF EXISTS polyloop_notify_written ON {schema}.run_records",
    """CREATE TRIGGER polyloop_notify_written AFTER INSERT ON {schema}.run_records
        REFERENCING NEW TABLE AS added FOR EACH STATEMENT
        EXECUTE FUNCTION {schema}.polyloop_notify_written({channel})""",
    "UPDATE {schema}.polyloop_schema SET minor = {minor} WHERE id = 1 AND minor < {minor}",
)

_VERSION = "SELECT major, minor FROM {schema}.polyloop_schema WHERE id = 1"
_PRESENT = (
    "SELECT 1 FROM pg_catalog.pg_tables WHERE schemaname = %s AND tablename = 'polyloop_schema'"
)


def two_int_key(*parts: bytes) -> tuple[int, int]:
    """A key for the two-``int4`` form of PostgreSQL's advisory locks, from a hash of ``parts``.

    That form (``objsubid = 2`` in ``pg_locks``) is a key space of its own, apart from the
    single-``bigint`` form most applications use.
    """
    digest = hashlib.sha256(b"\0".join(parts)).digest()
    return (
        int.from_bytes(digest[0:4], "big", signed=True),
        int.from_bytes(digest[4:8], "big", signed=True),
    )


def notify_channel(schema: str) -> str:
    """The ``LISTEN`` channel of the store in ``schema``: a fixed-length name (a schema name
    can be as long as a channel name may be), the same in every process."""
    return "polyloop_written_" + hashlib.sha256(schema.encode("utf-8")).hexdigest()[:32]


def schema_ready(connection: psycopg.Connection[TupleRow], schema: str, where: str) -> bool:
    """``True`` when the tables are there and readable, ``False`` when they are not there yet.

    Raises :class:`StoreError` for a schema written by another major version.
    """
    return _minor(connection, schema, where) is not None


def _minor(connection: psycopg.Connection[TupleRow], schema: str, where: str) -> int | None:
    """The schema's minor version, or ``None`` when its tables are not there yet."""
    if connection.execute(_PRESENT, (schema,)).fetchone() is None:
        return None
    query = sql.SQL(_VERSION).format(schema=sql.Identifier(schema))
    row = connection.execute(query).fetchone()
    if row is None:
        return None
    major, minor = row
    if major != SCHEMA_MAJOR:
        raise StoreError(
            f"{where} holds PolyLoop run logs in schema version {major}.{minor}; this "
            f"polyloop-stores reads version {SCHEMA_MAJOR}.x only. Open it with the PolyLoop "
            "version that wrote it (or a newer one), or use another schema= for this store."
        )
    return int(minor)


def create_schema(connection: psycopg.Connection[TupleRow], schema: str, where: str) -> None:
    """Create the schema and its tables unless they are there (idempotent, race-safe).

    ``CREATE ... IF NOT EXISTS`` alone is not safe against another process doing the same at
    the same moment (both may pass the check and one then fails on the catalog's unique
    index), so the creation runs under a transaction-level advisory lock keyed by the schema.
    """
    minor = _minor(connection, schema, where)
    if minor is not None and minor >= SCHEMA_MINOR:
        return
    lock = two_int_key(b"polyloop-schema", schema.encode())
    names = {
        "schema": sql.Identifier(schema),
        "major": sql.Literal(SCHEMA_MAJOR),
        "minor": sql.Literal(SCHEMA_MINOR),
        "channel": sql.Literal(notify_channel(schema)),
    }
    with connection.transaction():
        connection.execute("SELECT pg_advisory_xact_lock(%s, %s)", lock)
        minor = _minor(connection, schema, where)
        if minor is not None and minor >= SCHEMA_MINOR:
            return
        for statement in (_CREATE if minor is None else ()) + _NOTIFYING:
            connection.execute(sql.SQL(statement).format(**names))
