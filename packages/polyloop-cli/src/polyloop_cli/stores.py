"""Store URLs: parsing, opening an existing store, and listing the runs it holds.

URL forms (see ``research-wiki/design/0015-cli.md``):

- ``sqlite:///abs/path.sqlite`` (empty authority, absolute path) or ``sqlite:rel/path.sqlite``
- ``jsonl:///abs/dir`` or ``jsonl:rel/dir``
- a bare path to an existing file (SQLite) or directory (JSON Lines), for convenience.

The default store is ``$POLYLOOP_STORE`` when set, else the demo's SQLite file
``$POLYLOOP_HOME/demo.sqlite`` (``POLYLOOP_HOME`` defaults to ``./.polyloop``).
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from polyloop.errors import PolyLoopError
from polyloop.ports import LeaseHolder, RunLeasing, RunListing, RunLog, RunStore, StoreClosing
from polyloop_cli.errors import CliError, ExitCode, shown_id
from polyloop_cli.salvage import (
    LayoutUnreadable,
    Listing,
    Salvage,
    list_from_layout,
    salvage_jsonl,
    salvage_sqlite,
)
from polyloop_cli.store_check import check_store_path

__all__ = [
    "DEMO_STORE_NAME",
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

Kind = Literal["sqlite", "jsonl"]

#: File name of the demo's SQLite store inside ``POLYLOOP_HOME``.
DEMO_STORE_NAME = "demo.sqlite"

_EXAMPLES = "sqlite:///abs/path.sqlite, sqlite:rel/path.sqlite, jsonl:///abs/dir or jsonl:rel/dir"


@dataclass(frozen=True, slots=True)
class StoreUrl:
    """A parsed store URL."""

    kind: Kind
    path: Path

    def __str__(self) -> str:
        return (
            f"{self.kind}://{self.path}" if self.path.is_absolute() else f"{self.kind}:{self.path}"
        )


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
    """Parse ``text`` or raise a :class:`CliError` (``BAD_STORE_URL``) saying what is accepted."""
    raw = text.strip()
    if not raw:
        raise CliError(ExitCode.BAD_STORE_URL, f"empty --store value; use one of {_EXAMPLES}.")
    scheme, sep, rest = raw.partition(":")
    if sep and scheme.lower() in ("sqlite", "jsonl") and len(scheme) > 1:
        kind: Kind = "sqlite" if scheme.lower() == "sqlite" else "jsonl"
        if rest.startswith("//"):
            rest = rest[2:]
            if not rest.startswith("/"):
                raise CliError(
                    ExitCode.BAD_STORE_URL,
                    f"store URL {text!r} names a host; stores are local: write "
                    f"{kind}:///absolute/path or {kind}:relative/path.",
                )
        if not rest or "\x00" in rest:
            raise CliError(
                ExitCode.BAD_STORE_URL,
                f"store URL {text!r} has no usable path; use one of {_EXAMPLES}.",
            )
        return StoreUrl(kind, Path(rest))
    if sep and len(scheme) > 1 and "/" not in scheme and "\\" not in scheme:
        # Something like memory:, postgres:, http: — not a path with a colon in it.
        raise CliError(
            ExitCode.BAD_STORE_URL,
            f"unknown store scheme {scheme!r} in {text!r}; use one of {_EXAMPLES}"
            + (" (a memory store ends with its process)." if scheme == "memory" else "."),
        )
    path = Path(raw)
    if path.is_dir():
        return StoreUrl("jsonl", path)
    if path.is_file():
        return StoreUrl("sqlite", path)
    raise CliError(
        ExitCode.BAD_STORE_URL,
        f"{text!r} is not a store URL and no file or directory has that path; use one of "
        f"{_EXAMPLES}.",
    )


def _construct(url: StoreUrl) -> RunStore:
    if url.kind == "jsonl":
        from polyloop.stores.jsonl import JsonlRunStore

        return JsonlRunStore(url.path)
    try:
        from polyloop.stores.sqlite import SqliteRunStore
    except ImportError:
        raise CliError(
            ExitCode.BAD_STORE_URL,
            "this installation has no SQLite store (polyloop.stores.sqlite is missing); "
            "upgrade polyloop-stores or use a jsonl: store.",
        ) from None
    return SqliteRunStore(url.path)


@asynccontextmanager
async def open_store(
    url: StoreUrl, *, create: bool = False, missing_advice: str | None = None
) -> AsyncIterator[RunStore]:
    """Open the store at ``url``; unless ``create``, it must already exist (never create one
    by accident while inspecting). Whatever is at the path must be a store of that kind."""
    check_store_path(
        url.kind,
        url.path,
        create=create,
        missing_advice=missing_advice or "pass --store with the path of an existing store.",
    )
    if create:
        parent = url.path.parent if url.kind == "sqlite" else url.path
        try:
            parent.mkdir(parents=True, exist_ok=True)
        except OSError as error:
            raise CliError(
                ExitCode.STORE_UNREADABLE,
                f"cannot create {parent} for the store ({error.strerror}); choose a writable "
                "place with --store or POLYLOOP_HOME.",
            ) from None
    try:
        store = _construct(url)
    except CliError:
        raise
    except (PolyLoopError, OSError) as error:
        raise _unreadable(url, error) from None
    try:
        yield store
    finally:
        if isinstance(store, StoreClosing):
            await store.aclose()


def _one_line(error: BaseException) -> str:
    return " ".join(str(error).split()) or type(error).__name__


def _unreadable(url: StoreUrl, error: BaseException) -> CliError:
    return CliError(
        ExitCode.STORE_UNREADABLE,
        f"cannot read the {url.kind} store at {url.path}; check that it is a PolyLoop store and "
        "that you may read it.",
        detail=_one_line(error),
    )


@dataclass(frozen=True, slots=True)
class RunRead:
    """One run's log as the store gave it, or why the store could not read it."""

    log: RunLog
    #: The store's own one-line account of why it cannot read the log; ``None`` when it could.
    damage: str | None = None


async def read_run(store: RunStore, run_id: str) -> RunRead:
    """``store.read_log``; a failure of this one run (an undecodable record, a damaged page,
    an unreadable file) is the run's damage, not the end of the command."""
    try:
        return RunRead(await store.read_log(run_id))
    except (PolyLoopError, OSError) as error:
        return RunRead(RunLog(), _one_line(error))


def damaged_message(run_id: str, url: StoreUrl, advice: str, *, name_store: bool = True) -> str:
    """The headline of the error for a run whose log the store cannot read (``name_store``
    off when ``advice`` names the store already)."""
    store = f"the {url.kind} store at {url.path}" if name_store else f"the {url.kind} store"
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
    read = await read_run(store, run_id)
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
    layout instead (:func:`polyloop_cli.salvage.list_from_layout`), unit by unit, so that the
    readable runs are still listed and the damaged units named.
    """
    if not isinstance(store, RunListing):
        raise CliError(
            ExitCode.STORE_UNREADABLE,
            f"the {url.kind} store at {url.path} cannot list its runs (it does not implement "
            "polyloop.ports.RunListing); name a run instead: show, plan and verify take a RUN_ID.",
        )
    try:
        return Listing(await store.list_run_ids())
    except (PolyLoopError, OSError):
        pass  # read the layout instead: it names the damaged unit and lists the rest
    try:
        return await asyncio.to_thread(list_from_layout, url.kind, url.path)
    except LayoutUnreadable as error:
        raise _unreadable(url, error) from None
