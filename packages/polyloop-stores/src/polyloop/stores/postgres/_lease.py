"""Run leases on PostgreSQL: session advisory locks on the run's writing session.

A run's lease is the advisory lock ``(k1, k2)`` (the two-``int4`` form) taken with
``pg_try_advisory_lock`` on the run's writing session. The server releases it when that session
ends for any reason — ``pg_advisory_unlock``, the store closing, the process dying (the kernel
closes the socket), or the server noticing a dead peer through TCP keepalive. Nothing waits
out a TTL.

The key is 64 bits of ``sha256(schema, run_id)``. Two run_ids with the same key would share one
lock: the only effect is that one is refused while the other is held — never two holders of one
run — with odds of about ``held / 2**64`` per acquisition. ``run_leases`` is keyed by the full
``run_key`` (SHA-256 of the run_id), so the holder details read back always belong to the run
asked about.

Who holds a lock: ``pg_locks`` names the server process, ``pg_stat_activity`` its
``application_name`` (readable by every role), which the session sets to ``polyloop <session
token> <pid>@<host>``; the ``run_leases`` row written under the lock with that token gives the
process id, host and time of acquisition. A lock held by some other program reads as a holder
with unknown details.
"""

from __future__ import annotations

import os
import re
import secrets
import socket
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from psycopg import sql

from polyloop.leasing import ReleasedOnce
from polyloop.ports import LeaseHolder
from polyloop.stores.postgres._schema import two_int_key

__all__ = [
    "HolderQueries",
    "PostgresRunLease",
    "SessionIdentity",
    "holder_from_row",
    "lease_lock_key",
]

_APPLICATION_NAME = re.compile(r"polyloop ([0-9a-f]{16}) (\d+)@(.*)")
_ISO_UTC = """to_char({column} AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS"Z"')"""


def lease_lock_key(schema: str, run_key: bytes) -> tuple[int, int]:
    """The advisory lock key of a run's lease in ``schema``."""
    return two_int_key(b"polyloop-lease", schema.encode(), run_key)


@dataclass(frozen=True, slots=True)
class SessionIdentity:
    """What a writing session says about itself: a random token, this process and host."""

    token: str
    process_id: int
    host_name: str

    @staticmethod
    def new() -> SessionIdentity:
        return SessionIdentity(secrets.token_hex(8), os.getpid(), socket.gethostname())

    def application_name(self) -> str:
        """At most 63 bytes of ASCII (the server cuts longer names and mangles other bytes)."""
        text = f"polyloop {self.token} {self.process_id}@{self.host_name}"
        return text.encode("ascii", "replace").decode("ascii")[:63]


class HolderQueries:
    """The SQL of taking a lease and of asking who holds one, for one schema."""

    def __init__(self, schema: str) -> None:
        table = sql.Identifier(schema, "run_leases")
        acquired = sql.SQL(_ISO_UTC.format(column="acquired_at"))
        #: Takes the lock and, only if it got it, records who took it, in one statement.
        self.acquire = sql.SQL(
            "INSERT INTO {table} (run_key, session_token, process_id, host_name, acquired_at) "
            "SELECT %s, %s, %s, %s, statement_timestamp() WHERE pg_try_advisory_lock(%s, %s) "
            "ON CONFLICT (run_key) DO UPDATE SET session_token = EXCLUDED.session_token, "
            "process_id = EXCLUDED.process_id, host_name = EXCLUDED.host_name, "
            "acquired_at = EXCLUDED.acquired_at RETURNING {acquired}"
        ).format(table=table, acquired=acquired)
        self.release = sql.SQL("SELECT pg_advisory_unlock(%s, %s)")
        lock = sql.SQL(
            "FROM pg_catalog.pg_locks l "
            "LEFT JOIN pg_catalog.pg_stat_activity a ON a.pid = l.pid "
            "{join} "
            "WHERE l.locktype = 'advisory' AND l.granted AND l.objsubid = 2 "
            "AND l.classid = %s::oid AND l.objid = %s::oid AND l.database = "
            "(SELECT oid FROM pg_catalog.pg_database WHERE datname = current_database()) "
        )
        #: Who holds a lock, with the details recorded under it (the schema exists).
        self.holder = sql.SQL(
            "SELECT a.application_name, r.process_id, r.host_name, {acquired} {lock}"
        ).format(
            acquired=sql.SQL(_ISO_UTC.format(column="r.acquired_at")),
            lock=lock.format(
                join=sql.SQL(
                    "LEFT JOIN {table} r ON r.run_key = %s "
                    "AND r.session_token = split_part(a.application_name, ' ', 2)"
                ).format(table=table)
            ),
        )
        #: The same without the details, for a database whose schema does not exist yet.
        self.holder_without_details = sql.SQL(
            "SELECT a.application_name, NULL, NULL, NULL {lock}"
        ).format(lock=lock.format(join=sql.SQL("")))

    @staticmethod
    def holder_parameters(
        lock_key: tuple[int, int], run_key: bytes, *, with_details: bool
    ) -> tuple[object, ...]:
        # pg_locks shows the two int4 halves as oids (unsigned).
        halves = (lock_key[0] & 0xFFFFFFFF, lock_key[1] & 0xFFFFFFFF)
        return (run_key, *halves) if with_details else halves


def holder_from_row(row: tuple[object, ...] | None) -> LeaseHolder | None:
    """A :class:`LeaseHolder` from a row of :attr:`HolderQueries.holder`, ``None`` for none."""
    if row is None:
        return None
    application_name, process_id, host_name, acquired_at = row
    if isinstance(process_id, int) and isinstance(host_name, str):
        return LeaseHolder(
            process_id, host_name, acquired_at if isinstance(acquired_at, str) else None
        )
    match = (
        _APPLICATION_NAME.fullmatch(application_name or "")
        if isinstance(application_name, str)
        else None
    )
    if match is None:
        return LeaseHolder()  # some other program holds the lock: nothing known about it
    return LeaseHolder(int(match.group(2)), match.group(3) or None, None)


class PostgresRunLease(ReleasedOnce):
    """The lease of one run, held by its store's session until released (see RunLease).

    Released once (:class:`polyloop.leasing.ReleasedOnce`): a second call, or a call after the
    session died, does nothing. Unlike a file lease, there is no descriptor to race over: the
    session thread gives the lock back in the order it runs statements, and a lease taken on a
    session that has since ended is already free on the server.
    """

    __slots__ = ("_release",)

    def __init__(self, run_id: str, release: Callable[[], Awaitable[None]]) -> None:
        super().__init__(run_id)
        self._release = release

    async def _give_back(self) -> None:
        await self._release()

    def __repr__(self) -> str:
        state = "released" if self._released else "held"
        return f"PostgresRunLease(run_id={self._run_id!r}, {state})"
