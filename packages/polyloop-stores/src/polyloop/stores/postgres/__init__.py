"""A durable RunStore on a PostgreSQL server, shared by many processes and machines.

Each record is one row holding the tagged JSON of
:func:`polyloop.serialization.dumps_log_record` (repeated text written by reference:
:mod:`polyloop.stores._stored_form`, design 0041); ``write_step_completed`` is therefore one row,
applied atomically. Every write of a run goes to that run's **writing session** (a thread and
its connection, :mod:`polyloop.stores.postgres._session`; a store has ``writers`` of them, and
the run_id picks one, design 0073), which commits whatever is pending in one statement:
concurrent runs share commits, while each write returns only once its statement has
committed with ``synchronous_commit = on`` — so every acknowledged write, and all writes of its
run before it, are durable (prefix durability: a run awaits each write before the next). The
store refuses a server running with ``fsync = off``.

The database refuses every record a log holds at most once (a unique index), which decides
races between processes and machines. **Run leases** are session advisory locks held by the
writing session: the server frees them when the session ends, however it ends, and a leased
run's writes go through that very session, so a store that lost its session can never write a
run someone else may now drive (:class:`~polyloop.errors.LeaseLostError`).

Reads use their own connections on reader threads and see committed rows only; a read creates
nothing, not even the schema. Nothing here runs on the event loop. Needs the extra
``polyloop-stores[postgres]`` (psycopg 3). Designs 0029 (layout, durability) and 0030 (leases).

The package's private modules, one job each: ``_target`` (parsing the connection string),
``_connect`` (connecting, keepalive, explaining a failure without its secrets), ``_schema``
(the tables and their version), ``_lease`` (lock keys and who holds a lock), ``_session`` (the
writing session: group commit, leases, fencing), ``_readers`` (the reader connections) and
``_store`` (:class:`PostgresRunStore`, which puts them together).
"""

from __future__ import annotations

try:
    import psycopg  # noqa: F401  (only to name the extra when it is missing)
except ImportError as missing:  # exercised in a subprocess test
    raise ImportError(
        "polyloop.stores.postgres needs psycopg 3, which is an optional extra: "
        "pip install 'polyloop-stores[postgres]'."
    ) from missing

from polyloop.stores.postgres._lease import PostgresRunLease
from polyloop.stores.postgres._store import PostgresRunStore

__all__ = ["PostgresRunLease", "PostgresRunStore"]
