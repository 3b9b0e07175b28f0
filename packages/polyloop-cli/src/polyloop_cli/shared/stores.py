"""Store URLs: parsing, opening a store, reading and listing its runs.

A store URL names its store by scheme; the store comes from the factory registered for that
scheme under the entry-point group ``polyloop.stores`` (:mod:`polyloop.stores.urls`, design
0034), so a third-party store is inspected like the shipped ones. Shipped forms:

- ``sqlite:///abs/path.sqlite`` (empty authority, absolute path) or ``sqlite:rel/path.sqlite``
- ``jsonl:///abs/dir`` or ``jsonl:rel/dir``
- ``postgresql://user@host:port/database?schema=name`` (or ``postgres://``)
- a bare path to an existing file (SQLite) or directory (JSON Lines), for convenience.

The default store is ``$POLYLOOP_STORE`` when set, else the demo's SQLite file
``$POLYLOOP_HOME/demo.sqlite`` (``POLYLOOP_HOME`` defaults to ``./.polyloop``).

The shipped file stores get more care than any other (design 0027): what is at their path is
recognised by content first (:mod:`polyloop_cli.shared.store_check`), and when they cannot read
themselves the CLI reads their layout through the stores' own reader
(:mod:`polyloop.stores.salvage`).
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path

from polyloop.errors import ConfigurationError, CorruptLogError, PolyLoopError
from polyloop.ports import LeaseHolder, RunLeasing, RunListing, RunLog, RunStore, StoreClosing
from polyloop.stores.salvage import (
    LayoutUnreadable,
    Listing,
    Salvage,
    list_from_layout,
    salvage_jsonl,
    salvage_sqlite,
)
from polyloop.stores.urls import (
    local_store_path,
    open_store_url,
    shown_url,
    store_factories,
    url_scheme,
)
from polyloop_cli.rendering.redaction import remember_secrets_of
from polyloop_cli.shared.errors import CliError, ExitCode, shown_id
from polyloop_cli.shared.store_check import check_store_path

__all__ = [
    "DEMO_STORE_NAME",
    "FILE_SCHEMES",
    "Listing",
    "RunRead",
    "StoreUrl",
    "default_store_url",
    "lease_holder",
    "list_run_ids",
    "open_store",
    "parse_store_url",
    "polyloop_home",
    "read_log",
    "read_run",
    "salvage",
]

#: File name of the demo's SQLite store inside ``POLYLOOP_HOME``.
DEMO_STORE_NAME = "demo.sqlite"
#: The shipped stores that live in local files, which the CLI recognises and salvages.
FILE_SCHEMES = ("sqlite", "jsonl")

_EXAMPLES = "sqlite:///abs/file.sqlite, jsonl:rel/dir, postgresql://user@host/db"


@dataclass(frozen=True, slots=True)
class StoreUrl:
    """A parsed store URL. ``str()`` is its shown form: never a password."""

    #: The URL scheme in lowercase (``sqlite``, ``jsonl``, ``postgresql``, …).
    kind: str
    #: The path of a file store (``kind`` in :data:`FILE_SCHEMES`); ``None`` for the others.
    path: Path | None = None
    #: The URL handed to the store's factory (it may hold a password: never shown).
    url: str = field(default="", repr=False)

    @classmethod
    def of_file(cls, kind: str, path: Path) -> StoreUrl:
        """The URL of the file store of ``kind`` at ``path``."""
        text = f"{kind}://{path}" if path.is_absolute() else f"{kind}:{path}"
        return cls(kind, path, text)

    @property
    def local_path(self) -> Path:
        """The path of a file store (only asked of one)."""
        assert self.path is not None, self.kind
        return self.path

    @property
    def location(self) -> str:
        """Where the store is, as messages say it: its path, or its shown URL."""
        return str(self.path) if self.path is not None else shown_url(self.url)

    def __str__(self) -> str:
        return shown_url(self.url)


def polyloop_home() -> Path:
    """``$POLYLOOP_HOME``, or ``./.polyloop``: where the demo keeps its store and ledger."""
    return Path(os.environ.get("POLYLOOP_HOME") or ".polyloop")


def default_store_url() -> str:
    """``$POLYLOOP_STORE``, or the demo's SQLite file."""
    explicit = os.environ.get("POLYLOOP_STORE")
    if explicit:
        return explicit
    return f"sqlite:{polyloop_home() / DEMO_STORE_NAME}"


def parse_store_url(text: str) -> StoreUrl:
    """Parse ``text`` or raise a :class:`CliError` (``BAD_STORE_URL``) saying what is accepted.

    Its secrets are never printed from here on (:func:`remember_secrets_of`)."""
    raw = text.strip()
    remember_secrets_of(raw)
    shown = shown_url(raw)
    if not raw:
        raise CliError(ExitCode.BAD_STORE_URL, f"empty --store value; use one of {_EXAMPLES}.")
    scheme = url_scheme(raw)
    if scheme is None:
        return _bare_path(raw)
    try:
        factories = store_factories()
    except ConfigurationError as error:
        raise CliError(ExitCode.BAD_STORE_URL, str(error)) from None
    if scheme not in factories:
        known = ", ".join(f"{name}:" for name in sorted(factories))
        raise CliError(
            ExitCode.BAD_STORE_URL,
            f"unknown store scheme {scheme!r} in {shown!r}; installed stores take {known}"
            + (" (a memory store ends with its process)." if scheme == "memory" else "."),
        )
    if scheme not in FILE_SCHEMES:
        return StoreUrl(scheme, None, raw)
    try:
        return StoreUrl.of_file(scheme, local_store_path(raw))
    except ConfigurationError as error:
        raise CliError(ExitCode.BAD_STORE_URL, str(error)) from None


def _bare_path(raw: str) -> StoreUrl:
    path = Path(raw)
    if path.is_dir():
        return StoreUrl.of_file("jsonl", path)
    if path.is_file():
        return StoreUrl.of_file("sqlite", path)
    raise CliError(
        ExitCode.BAD_STORE_URL,
        f"{shown_url(raw)!r} is not a store URL and no file or directory has that path; use "
        f"one of {_EXAMPLES}.",
    )


@asynccontextmanager
async def open_store(
    url: StoreUrl, *, create: bool = False, missing_advice: str | None = None
) -> AsyncIterator[RunStore]:
    """Open the store ``url`` names, through its scheme's factory, and close it afterwards.

    A file store must already exist unless ``create`` (inspecting never creates one by
    accident), and what is at its path must be a store of that kind."""
    if url.path is not None:
        _check_file_store(url, create=create, missing_advice=missing_advice)
    try:
        store = open_store_url(url.url)
    except ConfigurationError as error:
        raise CliError(ExitCode.BAD_STORE_URL, _one_line(error)) from None
    except (PolyLoopError, OSError) as error:
        raise _unreadable(url, error) from None
    try:
        yield store
    finally:
        if isinstance(store, StoreClosing):
            await store.aclose()


def _check_file_store(url: StoreUrl, *, create: bool, missing_advice: str | None) -> None:
    path = url.local_path
    check_store_path(
        url.kind,
        path,
        create=create,
        missing_advice=missing_advice or "pass --store with the path of an existing store.",
    )
    if create:
        parent = path.parent if url.kind == "sqlite" else path
        try:
            parent.mkdir(parents=True, exist_ok=True)
        except OSError as error:
            raise CliError(
                ExitCode.STORE_UNREADABLE,
                f"cannot create {parent} for the store ({error.strerror}); choose a writable "
                "place with --store or POLYLOOP_HOME.",
            ) from None


def _one_line(error: BaseException) -> str:
    return " ".join(str(error).split()) or type(error).__name__


def _unreadable(url: StoreUrl, error: BaseException) -> CliError:
    return CliError(
        ExitCode.STORE_UNREADABLE,
        f"cannot read the {url.kind} store at {url.location}; check that it is a PolyLoop store "
        "and that you may reach and read it.",
        detail=_one_line(error),
    )


@dataclass(frozen=True, slots=True)
class RunRead:
    """One run's log as the store gave it, or why the store could not read it."""

    log: RunLog
    #: The store's own one-line account of why it cannot read the log; ``None`` when it could.
    damage: str | None = None


async def read_run(store: RunStore, url: StoreUrl, run_id: str) -> RunRead:
    """``store.read_log``; a failure of this one run is the run's damage, not the end of the
    command: any failure of a file store (an undecodable record, a damaged page, an unreadable
    file), a :class:`CorruptLogError` of any store. Any other failure of another store (the
    server is unreachable) means nothing can be read: a ``STORE_UNREADABLE`` :class:`CliError`.
    """
    try:
        return RunRead(await store.read_log(run_id))
    except CorruptLogError as error:
        return RunRead(RunLog(), _one_line(error))
    except (PolyLoopError, OSError) as error:
        if url.path is None:
            raise _unreadable(url, error) from None
        return RunRead(RunLog(), _one_line(error))


def damaged_message(run_id: str, url: StoreUrl, advice: str, *, name_store: bool = True) -> str:
    """The headline of the error for a run whose log the store cannot read (``name_store``
    off when ``advice`` names the store already)."""
    store = f"the {url.kind} store at {url.location}" if name_store else f"the {url.kind} store"
    return f"the log of run {shown_id(run_id)} is damaged: {store} cannot read it; {advice}"


async def read_log(
    store: RunStore,
    url: StoreUrl,
    run_id: str,
    *,
    advice: str = "back up the store before you repair it.",
    name_store: bool = True,
) -> RunLog:
    """``store.read_log``, or a ``CORRUPT_LOG`` :class:`CliError` when the log is damaged
    (its message ending in ``advice``)."""
    read = await read_run(store, url, run_id)
    if read.damage is not None:
        raise CliError(
            ExitCode.CORRUPT_LOG,
            damaged_message(run_id, url, advice, name_store=name_store),
            detail=read.damage,
        )
    return read.log


async def salvage(store: RunStore, url: StoreUrl, run_id: str) -> Salvage:
    """The readable records of a damaged run, read record by record from the store's layout."""
    from polyloop.stores.jsonl import JsonlRunStore
    from polyloop.stores.sqlite import SqliteRunStore

    if isinstance(store, SqliteRunStore):
        return await asyncio.to_thread(salvage_sqlite, Path(store.path), run_id)
    if isinstance(store, JsonlRunStore):
        return await asyncio.to_thread(salvage_jsonl, Path(store.path_for(run_id)), run_id)
    return Salvage(RunLog(), (f"{url}: the CLI reads no other store's storage",))


async def lease_holder(store: RunStore, url: StoreUrl, run_id: str) -> LeaseHolder | None:
    """Who holds ``run_id``'s lease now (``None`` also for a store without leases). Looks
    without taking, so asking never makes a real driver fail."""
    if not isinstance(store, RunLeasing):
        return None
    try:
        return await store.run_lease_holder(run_id)
    except (PolyLoopError, OSError) as error:
        raise _unreadable(url, error) from None


async def list_run_ids(store: RunStore, url: StoreUrl) -> Listing:
    """Every run_id in the store, from its own listing (:class:`RunListing`).

    When that fails on a damaged part of a shipped file store, the runs are listed from its
    layout instead (:func:`polyloop.stores.salvage.list_from_layout`), unit by unit, so that the
    readable runs are still listed and the damaged units named.
    """
    if not isinstance(store, RunListing):
        raise CliError(
            ExitCode.STORE_UNREADABLE,
            f"the {url.kind} store at {url.location} cannot list its runs (no RunListing); name "
            "a run instead: show, plan and verify take a RUN_ID.",
        )
    try:
        return Listing(await store.list_run_ids())
    except (PolyLoopError, OSError) as error:
        if url.path is None:
            raise _unreadable(url, error) from None
        # A file store: read the layout instead; it names the damaged unit and lists the rest.
    try:
        return await asyncio.to_thread(list_from_layout, url.kind, url.path)
    except LayoutUnreadable as error:
        raise _unreadable(url, error) from None
