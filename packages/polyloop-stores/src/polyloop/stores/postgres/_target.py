"""Where a PostgreSQL store connects, what it may say about that, and what it must never say.

The connection string (a ``postgresql://`` URL or libpq ``key=value`` text) can hold a
password. It is kept in one place, :attr:`ConnectionTarget.conninfo`, which no ``repr``,
message or parameter ever shows. What a human may see — host, port, user, database — is parsed
from it once; every message the store builds also goes through :meth:`ConnectionTarget.scrub`,
so a password that a server or driver message echoed cannot leave the store either.

The database name is worked out without I/O, the way libpq does it (explicit ``dbname``, else
``PGDATABASE``, else the user name), because building a store must not connect; the store
checks it against ``current_database()`` when it connects.
"""

from __future__ import annotations

import getpass
import os
import urllib.parse
from collections.abc import Mapping
from dataclasses import dataclass, field

from psycopg import conninfo as libpq_conninfo

from polyloop.errors import ConfigurationError

__all__ = ["ConnectionTarget", "parse_target"]

#: The libpq environment variables whose keywords the store may otherwise set itself.
_ENVIRONMENT = {"PGCONNECT_TIMEOUT": "connect_timeout", "PGAPPNAME": "application_name"}


@dataclass(frozen=True, slots=True)
class ConnectionTarget:
    """A parsed connection string: the text to connect with, and what may be shown of it."""

    #: The caller's connection string; holds the password when the caller put one there.
    conninfo: str = field(repr=False)
    database: str
    user: str
    host: str
    port: str
    #: Texts that must never appear in anything the store produces.
    secrets: tuple[str, ...] = field(repr=False)
    #: The libpq keywords the caller set (in the string or through ``PG*`` variables).
    given: frozenset[str] = field(repr=False, default=frozenset())

    def describe(self) -> str:
        """``host=db-1 port=5432 user=runner database=runs``: enough to find the server."""
        return f"host={self.host} port={self.port} user={self.user} database={self.database}"

    def scrub(self, text: str) -> str:
        """``text`` with every secret replaced by ``***``."""
        for secret in self.secrets:
            text = text.replace(secret, "***")
        return text

    def with_options(self, *, defaults: Mapping[str, str | int], **options: str | int) -> str:
        """The connection string with ``options`` added (they win over the caller's) and
        ``defaults`` added where the caller set nothing."""
        unset = {key: value for key, value in defaults.items() if key not in self.given}
        return libpq_conninfo.make_conninfo(self.conninfo, **unset, **options)


def parse_target(conninfo: str, owner: str) -> ConnectionTarget:
    """Parse ``conninfo`` (no I/O beyond reading the environment and the user name)."""
    if not isinstance(conninfo, str):
        raise ConfigurationError(
            f"{owner} takes a connection string (a postgresql:// URL or libpq key=value text), "
            f"got {type(conninfo).__name__}."
        )
    try:
        parts = libpq_conninfo.conninfo_to_dict(conninfo)
    except Exception:
        # libpq's message may quote the malformed part, which can be the password.
        raise ConfigurationError(
            f"{owner}: the connection string is neither a valid postgresql:// URL nor libpq "
            "key=value text; check its syntax (it is not repeated here: it may hold a password)."
        ) from None
    environ = os.environ

    def value(key: str, variable: str) -> str | None:
        given = parts.get(key)
        if given not in (None, ""):
            return str(given)
        return environ.get(variable) or None

    user = value("user", "PGUSER") or getpass.getuser()
    host = value("host", "PGHOST") or "local socket"
    secrets = []
    for password in (parts.get("password"), environ.get("PGPASSWORD")):
        if password:
            secrets += [str(password), urllib.parse.quote(str(password), safe="")]
    return ConnectionTarget(
        conninfo=conninfo,
        database=value("dbname", "PGDATABASE") or user,
        user=user,
        host=host,
        port=value("port", "PGPORT") or "5432",
        # Longest first, so that a secret containing another is replaced whole.
        secrets=tuple(sorted(set(secrets), key=len, reverse=True)),
        given=frozenset(parts) | frozenset(_ENVIRONMENT[v] for v in _ENVIRONMENT if v in environ),
    )
