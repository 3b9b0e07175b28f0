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
import inspect
import os
import sqlite3
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from polyloop.errors import PolyLoopError
from polyloop.ports import LeaseHolder, RunLeasing, RunListing, RunLog, RunStore
from polyloop_cli.errors import CliError, ExitCode, shown_id
from polyloop_cli.salvage import Salvage, salvage_jsonl, salvage_sqlite
from polyloop_cli.store_check import check_store_path, is_run_file_name

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


def _construct(url: StoreUrl) -> Any:
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


async def _close(store: object) -> None:
    aclose = getattr(store, "aclose", None)
    if callable(aclose):
        await aclose()
        return
    close = getattr(store, "close", None)
    if callable(close):
        if inspect.iscoroutinefunction(close):
            await close()
        else:
            # The durable stores' close() blocks while writes in flight commit.
            await asyncio.to_thread(close)


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
        await _close(store)


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
    if url.kind == "sqlite":
        return await asyncio.to_thread(salvage_sqlite, url.path, run_id)
    path_for = getattr(store, "path_for", None)
    path = Path(path_for(run_id)) if callable(path_for) else None
    if path is None:
        return Salvage(RunLog(), (f"{url.path}: the store does not say which file holds the run",))
    return await asyncio.to_thread(salvage_jsonl, path, run_id)


async def lease_holder(store: RunStore, url: StoreUrl, run_id: str) -> LeaseHolder | None:
    """Who holds ``run_id``'s lease now (``None`` also for a store without leases). Looks
    without taking, so asking never makes a real driver fail."""
    if not isinstance(store, RunLeasing):
        return None
    try:
        return await store.run_lease_holder(run_id)
    except (PolyLoopError, OSError) as error:
        raise _unreadable(url, error) from None


@dataclass(frozen=True, slots=True)
class Listing:
    """The run ids a store holds, and what could not even be attributed to a run."""

    run_ids: Sequence[str]
    #: Storage units (files) whose run_id cannot be read: each a one-line description.
    unreadable: Sequence[str] = ()


async def list_run_ids(store: RunStore, url: StoreUrl) -> Listing:
    """Every run_id in the store.

    Asks the store (``RunListing.list_run_ids``, or a ``run_ids()`` method, sync or async).
    When it has no listing, or its listing fails on a damaged part, the documented on-disk
    layout is read instead, unit by unit, so that the readable runs are still listed and the
    damaged units named: the ``run_records`` table for SQLite, the first line of every run
    file for JSON Lines.
    """
    method: Any = store.list_run_ids if isinstance(store, RunListing) else None
    method = method or getattr(store, "run_ids", None)
    if callable(method):
        try:
            result = method()
            if inspect.isawaitable(result):
                result = await result
            return Listing(tuple(str(item) for item in result))
        except (PolyLoopError, OSError):
            pass  # read the layout instead: it names the damaged unit and lists the rest
    if url.kind == "jsonl":
        return await asyncio.to_thread(_scan_jsonl_directory, url)
    return await asyncio.to_thread(_scan_sqlite_file, url)


#: Run ids from the table, then (the table's pages damaged) from the index alone.
_SQLITE_LISTINGS = (
    "SELECT run_id FROM run_records GROUP BY run_id ORDER BY MIN(seq)",
    "SELECT run_id FROM run_records INDEXED BY run_records_by_run GROUP BY run_id "
    "ORDER BY MIN(seq)",
)


def _scan_sqlite_file(url: StoreUrl) -> Listing:
    """Run ids from the documented layout (table ``run_records``, one row per record, in
    ``seq`` order), read through a read-only connection."""
    try:
        connection = sqlite3.connect(f"{url.path.resolve().as_uri()}?mode=ro", uri=True)
    except sqlite3.Error as error:
        raise _unreadable(url, error) from None
    failure: sqlite3.Error | None = None
    try:
        for query in _SQLITE_LISTINGS:
            try:
                rows = connection.execute(query).fetchall()
            except sqlite3.Error as error:
                failure = failure or error
                continue
            return Listing(tuple(str(row[0]) for row in rows))
    finally:
        connection.close()
    assert failure is not None
    raise _unreadable(url, failure)


def _scan_jsonl_directory(url: StoreUrl) -> Listing:
    from polyloop.serialization import loads_log_record

    ids: list[str] = []
    unreadable: list[str] = []
    try:
        names = sorted(entry for entry in os.listdir(url.path) if is_run_file_name(entry))
    except OSError as error:
        raise _unreadable(url, error) from None
    for name in names:
        try:
            with open(url.path / name, "rb") as handle:
                first = handle.readline()
        except OSError as error:
            unreadable.append(f"{name}: cannot be read ({error.strerror})")
            continue
        if not first.endswith(b"\n"):
            continue  # empty, or one torn line: the run's first write was never acknowledged
        try:
            record = loads_log_record(first.decode("utf-8"))
        except (PolyLoopError, UnicodeDecodeError, ValueError) as error:
            unreadable.append(f"{name}, line 1: {_one_line(error)}")
            continue
        if record.run_id not in ids:
            ids.append(record.run_id)
    return Listing(tuple(ids), tuple(unreadable))
