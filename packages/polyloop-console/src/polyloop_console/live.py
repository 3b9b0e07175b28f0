"""Live run pages: which runs changed, told to the pages that show them (design 0069).

One :class:`RunWatch` per console serves every open page. It follows a run only while a page
watches it, and once however many pages watch: on a store that notifies (PostgreSQL's
``LISTEN``) the notification is the change, nothing is read; on any other, it compares the
run's change marker every ``poll_seconds`` (a ``COUNT``/``MAX`` on the run's index or a
``stat``, never a read of the log, on the stores that give markers).
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

from polyloop.errors import PolyLoopError
from polyloop.ports import RunStore
from polyloop.watching import (
    ChangeMarking,
    ChangeNotifying,
    supports_change_marking,
    supports_change_notifying,
)

__all__ = ["RunWatch", "change_marker"]

LOG = logging.getLogger("polyloop.console")


async def change_marker(store: RunStore, run_id: str) -> str:
    """``run_id``'s change marker: the store's own when it gives one, else a digest of the
    log (a store without :class:`ChangeMarking` costs a read)."""
    if supports_change_marking(store):
        assert isinstance(store, ChangeMarking)
        return await store.change_marker(run_id)
    log = await store.read_log(run_id)
    return hashlib.sha256(repr(log).encode()).hexdigest()


@dataclass(slots=True)
class _Watched:
    #: The run's marker when last looked at (polling stores).
    marker: str
    pages: int = 0
    #: How many changes were seen since the first page began watching.
    version: int = 0
    #: Set (and replaced) when the run changes.
    changed: asyncio.Event = field(default_factory=asyncio.Event)

    def moved(self) -> None:
        self.version += 1
        event, self.changed = self.changed, asyncio.Event()
        event.set()


class RunWatch:
    """Wakes the pages watching a run when records of it land."""

    def __init__(self, store: RunStore, *, poll_seconds: float = 0.1) -> None:
        self._store = store
        self._poll_seconds = poll_seconds
        self._runs: dict[str, _Watched] = {}
        self._task: asyncio.Task[None] | None = None
        self._looks = 0

    @property
    def looks(self) -> int:
        """How many times a run's marker was read (for benchmarks)."""
        return self._looks

    @contextlib.asynccontextmanager
    async def watching(self, run_id: str) -> AsyncIterator[_Watched]:
        """Watch ``run_id`` while inside: each change adds one to ``.version`` and sets
        ``.changed`` (replaced by a fresh event each time)."""
        watched = self._runs.get(run_id)
        if watched is None:
            watched = _Watched(await self._marker(run_id))
            watched = self._runs.setdefault(run_id, watched)
        watched.pages += 1
        self._start()
        try:
            yield watched
        finally:
            watched.pages -= 1
            if watched.pages == 0 and self._runs.get(run_id) is watched:
                del self._runs[run_id]
            if not self._runs and self._task is not None:
                # No page open: stop polling, or listening to every write of the store.
                self._task.cancel()
                self._task = None

    async def aclose(self) -> None:
        """Stop looking (the server is going down)."""
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None

    def _start(self) -> None:
        if self._task is None or self._task.done():
            notifying = supports_change_notifying(self._store)
            self._task = asyncio.create_task(self._listen() if notifying else self._poll())

    async def _marker(self, run_id: str) -> str:
        """The run's marker as :meth:`_look_all` sees it (``""``: no record yet)."""
        self._looks += 1
        if supports_change_marking(self._store):
            assert isinstance(self._store, ChangeMarking)
            return (await self._store.change_markers([run_id])).get(run_id, "")
        return await change_marker(self._store, run_id)

    async def _look(self, run_id: str) -> None:
        watched = self._runs.get(run_id)
        if watched is None:
            return
        try:
            marker = await self._marker(run_id)
        except PolyLoopError as error:
            LOG.warning("live page: reading run_id=%r failed: %s", run_id, type(error).__name__)
            return
        if marker != watched.marker:
            watched.marker = marker
            watched.moved()

    async def _poll(self) -> None:
        marking = supports_change_marking(self._store)
        while True:
            if marking and self._runs:
                await self._look_all()
            else:
                for run_id in list(self._runs):
                    await self._look(run_id)
            await asyncio.sleep(self._poll_seconds)

    async def _look_all(self) -> None:
        """Every watched run's marker in one read (``change_markers(run_ids)``)."""
        assert isinstance(self._store, ChangeMarking)
        watched = list(self._runs)
        self._looks += 1
        try:
            markers = await self._store.change_markers(watched)
        except PolyLoopError as error:
            LOG.warning("live pages: reading the markers failed: %s", type(error).__name__)
            return
        for run_id in watched:
            run = self._runs.get(run_id)
            marker = markers.get(run_id, "")
            if run is not None and marker != run.marker:
                run.marker = marker
                run.moved()

    async def _listen(self) -> None:
        assert isinstance(self._store, ChangeNotifying)
        while True:
            try:
                async with self._store.watch_changes() as written:
                    # Whatever landed before the listener was open is found by a look.
                    for run_id in list(self._runs):
                        await self._look(run_id)
                    async for run_id in written:
                        # The notification says the run was written: no need to look.
                        watched = self._runs.get(run_id)
                        if watched is not None:
                            watched.moved()
            except PolyLoopError as error:
                LOG.warning("live pages: listening stopped (%s); listening anew", error)
                await asyncio.sleep(1.0)
