"""Opening a store from a URL: factories registered under the entry-point group
``polyloop.stores``, one per URL scheme (design 0034).

A distribution that ships a store makes it reachable from a URL (``polyloop runs --store
mystore://…``, or :func:`open_store_url` in a harness) by registering a factory::

    [project.entry-points."polyloop.stores"]
    mystore = "my_package.store:open_from_url"

- The entry point's name is the URL scheme, in lowercase.
- Its value is a callable taking the URL as the user wrote it (a ``str``, which may hold a
  password) and returning a store: a :class:`~polyloop.ports.RunStore` that should also
  implement :class:`~polyloop.ports.RunListing` (``polyloop runs`` and ``verify --all`` list
  through it) and :class:`~polyloop.ports.StoreClosing` (whoever opened it closes it).
  :class:`~polyloop.ports.RunLeasing` is optional.
- The factory does no I/O beyond parsing (the shipped stores connect and create on first use).
  It raises :class:`~polyloop.errors.ConfigurationError` for a URL it cannot use, with a
  message that never repeats a password.

The shipped stores register the same way (``polyloop-stores``' ``pyproject.toml``):

- ``sqlite:///abs/file.sqlite`` (empty authority, absolute path) or ``sqlite:rel/file.sqlite``
  (:func:`open_sqlite_url`);
- ``jsonl:///abs/dir`` or ``jsonl:rel/dir`` (:func:`open_jsonl_url`);
- ``postgresql://user@host:port/database?schema=name`` or ``postgres://…``
  (:func:`open_postgres_url`; needs the extra ``polyloop-stores[postgres]``).

:func:`shown_url` is the form of a URL that may be shown (logged, printed): no password, no
secret query parameter; :func:`url_secrets` the texts that must never be shown.
"""

from __future__ import annotations

import re
import urllib.parse
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import TYPE_CHECKING

from polyloop.errors import ConfigurationError
from polyloop.ports import RunStore

if TYPE_CHECKING:  # the drivers' modules stay unimported until a URL names them
    from polyloop.stores.jsonl import JsonlRunStore
    from polyloop.stores.postgres import PostgresRunStore
    from polyloop.stores.sqlite import SqliteRunStore

__all__ = [
    "ENTRY_POINT_GROUP",
    "StoreFactory",
    "local_store_path",
    "open_jsonl_url",
    "open_postgres_url",
    "open_sqlite_url",
    "open_store_url",
    "shown_url",
    "store_factories",
    "url_scheme",
    "url_secrets",
]

#: The entry-point group of store factories; each entry point is named after its URL scheme.
ENTRY_POINT_GROUP = "polyloop.stores"

#: What an entry point of :data:`ENTRY_POINT_GROUP` loads: URL in, store out.
StoreFactory = Callable[[str], RunStore]

_SCHEME = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*")
#: Query parameters whose value is secret (matched in lowercase, anywhere in the name).
_SECRET_PARAMETERS = ("password", "passwd", "pwd", "secret", "token", "key")
_POSTGRES_SCHEMA_PARAMETER = "schema"


def url_scheme(url: str) -> str | None:
    """The scheme of ``url`` in lowercase, or ``None`` when the text has none: no colon, a
    one-letter "scheme" (a drive letter), or a slash before the colon (a path)."""
    scheme, colon, _rest = url.strip().partition(":")
    if not colon or len(scheme) < 2 or _SCHEME.fullmatch(scheme) is None:
        return None
    return scheme.lower()


def store_factories() -> Mapping[str, metadata.EntryPoint]:
    """The installed store factories by URL scheme.

    Raises :class:`ConfigurationError` when two installed distributions claim one scheme.
    """
    found: dict[str, metadata.EntryPoint] = {}
    for entry_point in metadata.entry_points(group=ENTRY_POINT_GROUP):
        scheme = entry_point.name.lower()
        other = found.get(scheme)
        if other is not None and other.value != entry_point.value:
            raise ConfigurationError(
                f"two installed packages register the store URL scheme {scheme!r} "
                f"({_owner(other)} and {_owner(entry_point)}); uninstall one of them."
            )
        found[scheme] = entry_point
    return found


def _owner(entry_point: metadata.EntryPoint) -> str:
    distribution = entry_point.dist
    name = distribution.name if distribution is not None else "an unknown distribution"
    return f"{name}: {entry_point.value}"


def open_store_url(url: str) -> RunStore:
    """The store ``url`` names, made by the factory registered for its scheme.

    Raises :class:`ConfigurationError` for a URL without a registered scheme, a factory that
    cannot be loaded or cannot import what it needs (a missing extra), or a URL the factory
    refuses; whatever else the factory raises propagates.
    """
    scheme = url_scheme(url)
    factories = store_factories()
    entry_point = factories.get(scheme) if scheme is not None else None
    if entry_point is None:
        known = ", ".join(f"{name}:" for name in sorted(factories)) or "none"
        raise ConfigurationError(
            f"no installed store opens {shown_url(url)!r}: its scheme is not registered under "
            f"the entry-point group {ENTRY_POINT_GROUP!r} (installed: {known})."
        )
    try:
        factory: StoreFactory = entry_point.load()
        # A factory may import its driver only when called (the postgres one does).
        return factory(url)
    except ImportError as error:
        raise ConfigurationError(
            f"the store for {scheme}: URLs cannot be loaded ({error}); install what it needs."
        ) from None


# -- what may be shown of a URL ----------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _Authority:
    """A URL with an authority (``scheme://user:password@host/path?query#fragment``) in parts."""

    head: str
    user: str | None
    password: str | None
    host: str
    path: str
    #: The query's ``name=value`` items, in order.
    query: tuple[str, ...]
    #: ``#…``, or empty.
    fragment: str

    @classmethod
    def split(cls, url: str) -> _Authority | None:
        scheme, colon, rest = url.partition(":")
        if not colon or not rest.startswith("//"):
            return None
        body = rest[2:]
        end = min((index for index in map(body.find, "/?#") if index != -1), default=len(body))
        userinfo, at, host = body[:end].rpartition("@")
        user, colon, password = userinfo.partition(":")
        rest, hash_mark, fragment = body[end:].partition("#")
        path, _, query = rest.partition("?")
        return cls(
            f"{scheme}://",
            user if at else None,
            password if at and colon else None,
            host,
            path,
            tuple(item for item in query.split("&") if item),
            hash_mark + fragment,
        )

    def text(self, *, password: bool, query: tuple[str, ...], fragment: bool) -> str:
        userinfo = ""
        if self.user is not None:
            secret = f":{self.password}" if password and self.password is not None else ""
            userinfo = f"{self.user}{secret}@"
        tail = ("?" + "&".join(query) if query else "") + (self.fragment if fragment else "")
        return f"{self.head}{userinfo}{self.host}{self.path}{tail}"

    def secret_items(self) -> tuple[str, ...]:
        return tuple(item for item in self.query if _is_secret_parameter(item))

    def shown_items(self) -> tuple[str, ...]:
        return tuple(item for item in self.query if not _is_secret_parameter(item))


def _is_secret_parameter(item: str) -> bool:
    name = urllib.parse.unquote(item.partition("=")[0]).lower()
    return any(word in name for word in _SECRET_PARAMETERS)


def shown_url(url: str) -> str:
    """``url`` as it may be shown: the password of its user information and every secret
    query parameter (``password=``, ``sslpassword=``, ``token=``, ``api_key=``, …) left out."""
    parts = _Authority.split(url)
    if parts is None:
        return url
    return parts.text(password=False, query=parts.shown_items(), fragment=True)


def url_secrets(url: str) -> tuple[str, ...]:
    """The texts of ``url`` that must never be shown, as written and percent-decoded, longest
    first (a secret containing another is replaced whole)."""
    parts = _Authority.split(url)
    if parts is None:
        return ()
    values = [parts.password or ""] + [item.partition("=")[2] for item in parts.secret_items()]
    found = {text for value in values for text in (value, urllib.parse.unquote(value)) if text}
    return tuple(sorted(found, key=lambda text: (-len(text), text)))


# -- the shipped stores ------------------------------------------------------------------------


def local_store_path(url: str) -> Path:
    """The path a ``sqlite:`` or ``jsonl:`` URL names: after ``//`` comes an absolute path
    (``sqlite:///abs``), without it a relative one (``sqlite:rel``).

    Raises :class:`ConfigurationError` for a host part or a missing path.
    """
    scheme, _, rest = url.strip().partition(":")
    scheme = scheme.lower()
    if rest.startswith("//"):
        rest = rest[2:]
        if not rest.startswith("/"):
            raise ConfigurationError(
                f"store URL {shown_url(url)!r} names a host; stores in files are local: write "
                f"{scheme}:///absolute/path or {scheme}:relative/path."
            )
    if not rest or "\x00" in rest:
        raise ConfigurationError(
            f"store URL {shown_url(url)!r} has no usable path; write {scheme}:///absolute/path "
            f"or {scheme}:relative/path."
        )
    return Path(rest)


def open_sqlite_url(url: str) -> SqliteRunStore:
    """``sqlite:///abs/file.sqlite`` or ``sqlite:rel/file.sqlite``: a :class:`SqliteRunStore`."""
    from polyloop.stores.sqlite import SqliteRunStore

    return SqliteRunStore(local_store_path(url))


def open_jsonl_url(url: str) -> JsonlRunStore:
    """``jsonl:///abs/dir`` or ``jsonl:rel/dir``: a :class:`JsonlRunStore`."""
    from polyloop.stores.jsonl import JsonlRunStore

    return JsonlRunStore(local_store_path(url))


def open_postgres_url(url: str) -> PostgresRunStore:
    """``postgresql://…`` or ``postgres://…`` (any libpq URL): a :class:`PostgresRunStore`.

    The query parameter ``schema`` names the store's PostgreSQL schema (default
    ``polyloop``); every other parameter goes to libpq.
    """
    from polyloop.stores.postgres import PostgresRunStore

    parts = _Authority.split(url)
    if parts is None:
        raise ConfigurationError(
            f"store URL {shown_url(url)!r} is not a PostgreSQL URL; write "
            "postgresql://user@host:port/database (optionally ?schema=name)."
        )
    schema = "polyloop"
    libpq_items = []
    for item in parts.query:
        name, _, value = item.partition("=")
        if name == _POSTGRES_SCHEMA_PARAMETER:
            schema = urllib.parse.unquote(value)
        else:
            libpq_items.append(item)
    conninfo = parts.text(password=True, query=tuple(libpq_items), fragment=False)
    return PostgresRunStore(conninfo, schema=schema)
