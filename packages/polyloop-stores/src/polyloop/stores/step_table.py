"""Every StepRecord of a store's runs as the rows of one table, for research code (design 0047).

A row is one step: ``run_id``, every :class:`~polyloop.types.StepRecord` field under its own
name (``action_status`` as its string value, ``calls_not_executed`` as the JSON text of its
records, ``[]`` when empty), the run's ``stop_reason`` (``None``
while it has not finished) and one ``model_binding.<key>`` column per key of the run's model
binding, as the parameter snapshot records it (``request.model_binding.<key>``); then, added
after those (design 0061), the step's reply's ``finish_reason``, ``replayed_on_resume`` (what
resume made again for the step: ``action``, ``model_call`` or ``None``), the run's
``run_status`` (seed 002's word, so an unfinished run is ``running`` or ``waiting_approval``,
not a null; ``None`` only for a run read in part from a damaged store); then (design 0067) a
fork's source run, fork step and whether the step was inherited from it; and last one
whole-number ``usage.<key>`` column per token count any reply reported
(``ModelReply.usage``'s own keys, nested ones joined with ``.``). Rows come one run at a time,
so a table of ten thousand runs is read in the memory of one run::

    table = StepTable(store)
    rows = [row async for row in table]          # or write each row out as it comes
    table.unreadable                             # what could not be read, one entry each

It reads through the store seam (``read_log``, and ``list_run_ids`` when no run is named), so
it works on every store. On a damaged store it keeps going: a run whose log the store refuses
gives the steps that can still be read of it (the shipped file stores are read record by record
through :mod:`polyloop.stores.salvage`; another store's damaged run gives none), and
:attr:`StepTable.unreadable` names each run or storage unit it could not read, and why.

It lives beside the stores, not in the CLI, so that research code gets the rows without the
command line, and beside :mod:`~polyloop.stores.salvage`, whose readers it uses on damage.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import types
import typing
from collections.abc import AsyncIterator, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from enum import Enum
from pathlib import Path
from typing import Literal

from polyloop.errors import ConfigurationError, CorruptLogError, PolyLoopError
from polyloop.ports import RunListing, RunLog, RunStore
from polyloop.recovery import run_status
from polyloop.stores.salvage import LayoutUnreadable, Salvage, list_from_layout
from polyloop.types import IntentKind, ModelReply, StepRecord

__all__ = [
    "BINDING_PREFIX",
    "FORK_COLUMNS",
    "REPLY_COLUMNS",
    "RUN_COLUMNS",
    "SNAPSHOT_BINDING_PREFIX",
    "STEP_FIELDS",
    "USAGE_PREFIX",
    "ColumnType",
    "StepTable",
    "Unreadable",
    "column_type",
    "is_key_column",
    "step_columns",
    "step_rows_of",
]

#: The StepRecord fields, in their declared order: the table's middle columns.
STEP_FIELDS: tuple[str, ...] = tuple(field.name for field in dataclasses.fields(StepRecord))
#: The column before the step fields and the column after them.
RUN_COLUMNS: tuple[str, str] = ("run_id", "stop_reason")
#: After ``stop_reason``: a fork's source run and fork step (``None`` for a run that is no
#: fork), and whether the row's step was copied from the source (design 0067), so that an
#: analysis counts a shared prefix once.
FORK_COLUMNS: tuple[str, str, str] = ("forked_from_run_id", "forked_at_step", "inherited")
#: Prefix of the model-binding columns (``model_binding.<key>``), and of the same keys in the
#: parameter snapshot, where the request's model binding is recorded.
BINDING_PREFIX = "model_binding."
SNAPSHOT_BINDING_PREFIX = "request.model_binding."
#: The columns after the model-binding ones (design 0061): the step's reply's finish reason,
#: what resume made again for the step, the run's status word.
REPLY_COLUMNS: tuple[str, str, str] = ("finish_reason", "replayed_on_resume", "run_status")
#: Prefix of the token-count columns, one per key of ``ModelReply.usage`` (``usage.<key>``),
#: the last columns of the table.
USAGE_PREFIX = "usage."

#: A row of the table: column name to value (``None`` where a value is absent).
Row = dict[str, str | int | bool | None]


@dataclass(frozen=True, slots=True)
class ColumnType:
    """What a column holds: whole numbers, text or booleans, and whether it may be empty."""

    kind: Literal["int", "str", "bool"]
    nullable: bool


def _field_types() -> dict[str, ColumnType]:
    hints = typing.get_type_hints(StepRecord)
    found: dict[str, ColumnType] = {}
    for name in STEP_FIELDS:
        hint = hints[name]
        nullable = False
        if isinstance(hint, types.UnionType):
            members = [member for member in hint.__args__ if member is not type(None)]
            nullable = len(members) != len(hint.__args__)
            (hint,) = members
        if isinstance(hint, type) and issubclass(hint, Enum):
            hint = str
        if typing.get_origin(hint) is tuple:
            hint = str  # a tuple of records: its JSON text (see _plain)
        kind: Literal["int", "str", "bool"]
        if hint is bool:
            kind = "bool"
        elif hint is int:
            kind = "int"
        elif hint is str:
            kind = "str"
        else:  # pragma: no cover - a StepRecord field of another type needs a column type
            raise TypeError(f"StepRecord.{name}: no column type for {hint!r}")
        found[name] = ColumnType(kind, nullable)
    return found


_TYPES = {
    **_field_types(),
    "run_id": ColumnType("str", False),
    "stop_reason": ColumnType("str", True),
    "finish_reason": ColumnType("str", True),
    "replayed_on_resume": ColumnType("str", True),
    # ``None`` only for a run read in part from a damaged store: its status cannot be told.
    "run_status": ColumnType("str", True),
    "forked_from_run_id": ColumnType("str", True),
    "forked_at_step": ColumnType("int", True),
    "inherited": ColumnType("bool", False),
}


def column_type(column: str) -> ColumnType:
    """The type of a column of :func:`step_columns` (a model-binding column is nullable text,
    a ``usage.<key>`` column nullable whole numbers)."""
    known = _TYPES.get(column)
    if known is not None:
        return known
    if column.startswith(BINDING_PREFIX):
        return ColumnType("str", True)
    if column.startswith(USAGE_PREFIX):
        return ColumnType("int", True)
    raise ConfigurationError(
        f"{column!r} is not a column of the step table; its columns are run_id, the StepRecord "
        f"fields, stop_reason, {BINDING_PREFIX}<key>, {', '.join(REPLY_COLUMNS)} and "
        f"{USAGE_PREFIX}<key>."
    )


def step_columns(key_columns: Iterable[str] = ()) -> tuple[str, ...]:
    """The table's columns, in order: ``run_id``, the StepRecord fields, ``stop_reason``, the
    ``model_binding.<key>`` columns of ``key_columns`` sorted, ``finish_reason``,
    ``replayed_on_resume``, ``run_status``, the :data:`FORK_COLUMNS`, then its ``usage.<key>``
    columns sorted.

    ``key_columns`` are the columns named by keys the rows hold (as the rows name them); a
    fixed column added later goes after every earlier fixed one, so a reader's column
    positions hold.
    """
    keys = set(key_columns)
    for column in keys:
        if not column.startswith((BINDING_PREFIX, USAGE_PREFIX)):
            raise ConfigurationError(
                f"{column!r} is not a model-binding or usage column; name it "
                f"{BINDING_PREFIX}<key> or {USAGE_PREFIX}<key>."
            )
    bindings = sorted(column for column in keys if column.startswith(BINDING_PREFIX))
    usage = sorted(column for column in keys if column.startswith(USAGE_PREFIX))
    return (
        RUN_COLUMNS[0],
        *STEP_FIELDS,
        RUN_COLUMNS[1],
        *bindings,
        *REPLY_COLUMNS,
        *FORK_COLUMNS,
        *usage,
    )


def is_key_column(column: str) -> bool:
    """Whether ``column`` is one a row names from a key (``model_binding.*``, ``usage.*``)."""
    return column.startswith((BINDING_PREFIX, USAGE_PREFIX))


def _plain(value: object) -> str | int | bool | None:
    if isinstance(value, Enum):
        return str(value.value)
    if isinstance(value, tuple):
        # A tuple of records (``calls_not_executed``): a JSON array of their fields, sorted keys,
        # no spaces, ``[]`` when empty — text every format can hold.
        return json.dumps(
            [
                {field.name: getattr(item, field.name) for field in dataclasses.fields(item)}
                for item in value
            ],
            ensure_ascii=False,
            sort_keys=True,
            separators=(",", ":"),
        )
    assert value is None or isinstance(value, str | int | bool), value
    return value


def _replies(log: RunLog) -> dict[int, ModelReply]:
    """Each step's recorded reply, by step index (through the step's model-call intent)."""
    results = {result.result_id: result for result in log.model_results}
    replies: dict[int, ModelReply] = {}
    for intent in log.intents:
        if intent.kind is IntentKind.MODEL_CALL:
            result = results.get(intent.result_id)
            if result is not None and result.reply is not None:
                replies[intent.call_index] = result.reply
    return replies


def step_rows_of(run_id: str, log: RunLog, *, whole: bool = True) -> Iterator[Row]:
    """The rows of one run's log, one per recorded step, in step order.

    ``whole=False``: the log was read in part (a damaged store), so its ``run_status`` is
    ``None`` rather than a guess from what was kept.
    """
    stop_reason = None if log.finished is None else log.finished.result.stop_reason.value
    status = run_status(log).value if whole else None
    replies = _replies(log)
    snapshot: Mapping[str, str] = log.started.parameter_snapshot if log.started else {}
    bindings = {
        BINDING_PREFIX + key.removeprefix(SNAPSHOT_BINDING_PREFIX): value
        for key, value in sorted(snapshot.items())
        if key.startswith(SNAPSHOT_BINDING_PREFIX)
    }
    source = log.started.forked_from_run_id if log.started else None
    at = log.started.forked_at_step if log.started else None
    inherited_below = 0 if at is None else at
    for completed in log.steps:
        step = completed.step
        row: Row = {"run_id": run_id}
        for name in STEP_FIELDS:
            row[name] = _plain(getattr(step, name))
        row["stop_reason"] = stop_reason
        row.update(bindings)
        reply = replies.get(step.step_idx)
        row["finish_reason"] = None if reply is None else reply.finish_reason
        replayed = completed.replayed_on_resume
        row["replayed_on_resume"] = None if replayed is None else replayed.value
        row["run_status"] = status
        row["forked_from_run_id"] = source
        row["forked_at_step"] = at
        row["inherited"] = step.step_idx < inherited_below
        if reply is not None and reply.usage:
            for key, count in sorted(reply.usage.items()):
                row[USAGE_PREFIX + key] = count
        yield row


@dataclass(frozen=True, slots=True)
class Unreadable:
    """A run (or a storage unit) the table could not read whole."""

    #: The run, or ``None`` for a storage unit whose run cannot be told (an unreadable file).
    run_id: str | None
    #: What the store (or its storage) answered, one line.
    problem: str
    #: How many of the run's steps were still read, record by record, and are in the table.
    steps_read: int = 0
    #: Each record that could not be read, one line each (file stores only).
    records: tuple[str, ...] = ()

    def describe(self) -> str:
        """One line: which run, what went wrong, what was kept."""
        if self.run_id is None:
            return f"a storage unit of no known run: {self.problem}"
        kept = (
            f"{self.steps_read} step(s) read record by record"
            if self.steps_read
            else "no step read"
        )
        return f"run {self.run_id!r}: {self.problem} ({kept})"


def _one_line(error: BaseException) -> str:
    return " ".join(str(error).split()) or type(error).__name__


def _file_store(store: RunStore) -> tuple[str, Path] | None:
    """``(kind, path)`` of a shipped file store, whose storage can be read unit by unit."""
    from polyloop.stores.jsonl import JsonlRunStore
    from polyloop.stores.sqlite import SqliteRunStore

    if isinstance(store, SqliteRunStore):
        return "sqlite", Path(store.path)
    if isinstance(store, JsonlRunStore):
        return "jsonl", Path(store.directory)
    return None


async def _salvage(store: RunStore, run_id: str) -> Salvage | None:
    from polyloop.stores.jsonl import JsonlRunStore
    from polyloop.stores.salvage import salvage_jsonl, salvage_sqlite
    from polyloop.stores.sqlite import SqliteRunStore

    if isinstance(store, SqliteRunStore):
        return await asyncio.to_thread(salvage_sqlite, Path(store.path), run_id)
    if isinstance(store, JsonlRunStore):
        return await asyncio.to_thread(salvage_jsonl, Path(store.path_for(run_id)), run_id)
    return None


class StepTable:
    """The rows of ``run_ids`` (every run of the store when ``None``), as an async iterable.

    Iterate it once. Afterwards :attr:`unreadable` names what could not be read and
    :attr:`missing` the named runs the store does not hold. A failure that is not one run's
    damage (a server that cannot be reached, a store that cannot list its runs) is raised.
    """

    def __init__(self, store: RunStore, run_ids: Sequence[str] | None = None) -> None:
        self._store = store
        self._run_ids = None if run_ids is None else tuple(run_ids)
        #: Runs and storage units read in part or not at all, in the order met.
        self.unreadable: list[Unreadable] = []
        #: Named runs of which the store holds nothing.
        self.missing: list[str] = []
        #: How many runs were read (whole or in part).
        self.runs_read = 0

    async def _ids(self) -> Sequence[str]:
        if self._run_ids is not None:
            return self._run_ids
        store = self._store
        if not isinstance(store, RunListing):
            raise ConfigurationError(
                f"{type(store).__name__} cannot list its runs (it has no list_run_ids); name the "
                "runs to read with run_ids."
            )
        try:
            return await store.list_run_ids()
        except (PolyLoopError, OSError) as error:
            where = _file_store(store)
            if where is None:
                raise
            failure = _one_line(error)
        # A damaged file store: list its runs from its layout, naming what cannot be listed.
        try:
            listing = await asyncio.to_thread(list_from_layout, *where)
        except LayoutUnreadable:
            raise CorruptLogError(
                f"the {where[0]} store at {where[1]} cannot list its runs: {failure}"
            ) from None
        self.unreadable.extend(Unreadable(None, problem) for problem in listing.unreadable)
        return listing.run_ids

    async def _log(self, run_id: str) -> tuple[RunLog, bool] | None:
        store = self._store
        try:
            log = await store.read_log(run_id)
        except (PolyLoopError, OSError) as error:
            if not isinstance(error, CorruptLogError) and _file_store(store) is None:
                raise
            problem = _one_line(error)
        else:
            if log == RunLog():
                if self._run_ids is not None:
                    self.missing.append(run_id)
                return None
            return log, True
        saved = await _salvage(store, run_id)
        log = RunLog() if saved is None else saved.log
        records = () if saved is None else saved.unreadable
        self.unreadable.append(Unreadable(run_id, problem, len(log.steps), records))
        return log, False

    def __aiter__(self) -> AsyncIterator[Row]:
        return self._rows()

    async def _rows(self) -> AsyncIterator[Row]:
        for run_id in await self._ids():
            read = await self._log(run_id)
            if read is None:
                continue
            log, whole = read
            self.runs_read += 1
            for row in step_rows_of(run_id, log, whole=whole):
                yield row
