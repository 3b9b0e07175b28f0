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
    "schema_ready",
    "two_int_key",
]

SCHEMA_MAJOR = 1
SCHEMA_MINOR = 0

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


def schema_ready(connection: psycopg.Connection[TupleRow], schema: str, where: str) -> bool:
    """``True`` when the tables are there and readable, ``False`` when they are not there yet.

    Raises :class:`StoreError` for a schema written by another major version.
    """
    if connection.execute(_PRESENT, (schema,)).fetchone() is None:
        return False
    query = sql.SQL(_VERSION).format(schema=sql.Identifier(schema))
    row = connection.execute(query).fetchone()
    if row is None:
        return False
    major, minor = row
    if major != SCHEMA_MAJOR:
        raise StoreError(
            f"{where} holds PolyLoop run logs in schema version {major}.{minor}; this "
            f"polyloop-stores reads version {SCHEMA_MAJOR}.x only. Open it with the PolyLoop "
            "version that wrote it (or a newer one), or use another schema= for this store."
        )
    return True


def create_schema(connection: psycopg.Connection[TupleRow], schema: str, where: str) -> None:
    """Create the schema and its tables unless they are there (idempotent, race-safe).

    ``CREATE ... IF NOT EXISTS`` alone is not safe against another process doing the same at
    the same moment (both may pass the check and one then fails on the catalog's unique
    index), so the creation runs under a transaction-level advisory lock keyed by the schema.
    """
    if schema_ready(connection, schema, where):
        return
    lock = two_int_key(b"polyloop-schema", schema.encode())
    with connection.transaction():
        connection.execute("SELECT pg_advisory_xact_lock(%s, %s)", lock)
        if schema_ready(connection, schema, where):
            return
        for statement in _CREATE:
            connection.execute(
                sql.SQL(statement).format(
                    schema=sql.Identifier(schema),
                    major=sql.Literal(SCHEMA_MAJOR),
                    minor=sql.Literal(SCHEMA_MINOR),
                )
            )
