"""Optional RunStore capabilities for watching runs change (design 0069).

A page showing a run live, or a worker looking for decided runs, needs to know *whether* a
run changed far more often than *what* it holds: reading a whole log to find it unchanged is
the cost these capabilities save.

- :class:`ChangeMarking`: a cheap change marker per run (one indexed aggregate, a ``stat``),
  for one run or for every run of the store at once.
- :class:`ChangeNotifying`: the store tells a listener, from any process writing to the same
  storage, which runs were written, as they commit (PostgreSQL's ``LISTEN``/``NOTIFY``), so a
  watcher need not poll at all.

A store without them still works: a watcher then reads the logs.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterable, Mapping
from contextlib import AbstractAsyncContextManager
from typing import Protocol, runtime_checkable

__all__ = [
    "ChangeMarking",
    "ChangeNotifying",
    "supports_change_marking",
    "supports_change_notifying",
]


@runtime_checkable
class ChangeMarking(Protocol):
    """Optional RunStore capability: a run's change marker, cheaper than reading its log.

    A marker is an opaque string compared only for equality: once a record of the run is
    durable (written through any store object on the same storage), the run's marker differs
    from every marker read before that write. Equal markers mean no record was written in
    between; a marker says nothing about which records the log holds.
    """

    async def change_marker(self, run_id: str) -> str:
        """The marker of ``run_id`` now (a run with no record has a marker too, which its
        first write changes). Never blocks the event loop; raises
        :class:`polyloop.errors.StoreError` when the storage cannot be read."""
        ...

    async def change_markers(self, run_ids: Iterable[str] | None = None) -> Mapping[str, str]:
        """The marker of every run the store lists (:class:`polyloop.ports.RunListing`), or
        of those of ``run_ids`` that hold a record, in one read: what a watcher compares with
        its last look to find the runs written since. Each is the marker ``change_marker``
        gives; a run without a record is left out. Never blocks the event loop; raises
        :class:`polyloop.errors.StoreError` when the storage cannot be read."""
        ...


def supports_change_marking(store: object) -> bool:
    """Whether ``store`` gives cheap change markers (:class:`ChangeMarking`)."""
    return isinstance(store, ChangeMarking)


@runtime_checkable
class ChangeNotifying(Protocol):
    """Optional RunStore capability: be told which runs were written, as they commit.

    ``watch_changes()`` opens a listener (its own connection) and yields the run_id of each
    run written after it was opened, by any process on the same storage, shortly after the
    write committed; a run written several times close together may be yielded once. The
    listener is open (it will see every later write) once the context manager has been
    entered. If the listener's connection breaks, iterating raises
    :class:`polyloop.errors.StoreError`: writes may have been missed, so the watcher looks at
    every run again (with :class:`ChangeMarking` or the logs) after opening a new one.
    """

    def watch_changes(self) -> AbstractAsyncContextManager[AsyncIterator[str]]:
        """A listener of the store's writes: ``async with store.watch_changes() as runs:
        async for run_id in runs: ...``."""
        ...


def supports_change_notifying(store: object) -> bool:
    """Whether ``store`` tells listeners which runs were written (:class:`ChangeNotifying`)."""
    return isinstance(store, ChangeNotifying)
