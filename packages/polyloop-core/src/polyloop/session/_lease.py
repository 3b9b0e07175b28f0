"""The run's lease for one invocation of ``run``/``resume``: taken first, released on every path.

A store with :class:`~polyloop.ports.RunLeasing` decides who holds a run, across store objects,
processes and (server stores) machines. For any other store, a registry in this process still
refuses a second driver of one run on the same store object; exclusivity across processes is
then that store's own business.
"""

from __future__ import annotations

import asyncio
import logging
import math
import threading
import time
import weakref
from collections.abc import Callable

from polyloop.errors import ConfigurationError, RunLeaseHeldError
from polyloop.leasing import LeaseTable, ReleasedOnce, forget_in_forked_child
from polyloop.ports import RunLease, RunLeasing, RunStore

__all__ = ["check_lease_wait", "release_run_lease", "take_run_lease"]

logger = logging.getLogger("polyloop")

#: Retrying a held lease: the first pause, and the longest one.
_FIRST_PAUSE = 0.005
_LONGEST_PAUSE = 0.1


def check_lease_wait(lease_wait_seconds: float) -> None:
    """Refuse a ``lease_wait_seconds`` that is not a finite number >= 0."""
    if (
        isinstance(lease_wait_seconds, bool)
        or not isinstance(lease_wait_seconds, int | float)
        or not math.isfinite(lease_wait_seconds)
        or lease_wait_seconds < 0
    ):
        raise ConfigurationError(
            f"lease_wait_seconds must be a finite number >= 0 (0: refuse at once when another "
            f"driver holds the run), got {lease_wait_seconds!r}."
        )


# ---------------------------------------------------------------------------
# Stores without RunLeasing: one driver per (store object, run_id) in this process
# ---------------------------------------------------------------------------


class _StoreEntry:
    """The runs driven now on one store object. Holds the store weakly where it can."""

    __slots__ = ("held", "store")

    def __init__(self, store: Callable[[], object | None]) -> None:
        self.store = store
        self.held: LeaseTable[_LocalLease] = LeaseTable()


class _LocalRegistry:
    """Keyed by ``id(store)``: an entry exists only while one of its runs is driven, and the
    driving invocation keeps the store alive, so an id cannot be reused under a live entry. A
    store that can be weakly referenced is held weakly (its entry goes when it dies); one that
    cannot is held strongly, but only while a lease on it is held."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.entries: dict[int, _StoreEntry] = {}
        #: Keys of stores that died holding a lease. A weakref callback may run inside the
        #: locked region (garbage collection), so it only appends here; the next call purges.
        self.dead: list[int] = []

    def take(self, store: RunStore, run_id: str) -> _LocalLease:
        key = id(store)
        with self.lock:
            self._purge()
            entry = self.entries.get(key)
            if entry is None or entry.store() is not store:
                entry = self.entries[key] = _StoreEntry(self._reference(store, key))
            return entry.held.take(run_id, _LocalLease(self, key, run_id))

    def _reference(self, store: RunStore, key: int) -> Callable[[], object | None]:
        try:
            return weakref.ref(store, lambda _dead: self.dead.append(key))
        except TypeError:  # no __weakref__ slot: hold it while one of its runs is driven
            return lambda: store

    def _purge(self) -> None:
        while self.dead:
            key = self.dead.pop()
            entry = self.entries.get(key)
            if entry is not None and entry.store() is None:
                del self.entries[key]

    def give_back(self, lease: _LocalLease) -> None:
        with self.lock:
            self._purge()
            entry = self.entries.get(lease.key)
            if entry is not None and entry.held.give_back(lease.run_id, lease):
                del self.entries[lease.key]

    def forget_after_fork(self) -> None:
        # A forked child drives none of its parent's runs; a lock held at fork time stays held.
        self.lock = threading.Lock()
        self.entries = {}
        self.dead = []


_local = forget_in_forked_child(_LocalRegistry())


class _LocalLease(ReleasedOnce):
    """A lease of :class:`_LocalRegistry` (stores without :class:`RunLeasing`)."""

    __slots__ = ("_registry", "key")

    def __init__(self, registry: _LocalRegistry, key: int, run_id: str) -> None:
        super().__init__(run_id)
        self._registry = registry
        self.key = key

    async def _give_back(self) -> None:
        self._registry.give_back(self)


# ---------------------------------------------------------------------------
# Taking and giving back
# ---------------------------------------------------------------------------

#: Releases started for leases whose taker was cancelled (kept so they are not collected).
_orphans: set[asyncio.Future[None]] = set()


def _release_if_taken(attempt: asyncio.Future[RunLease]) -> None:
    """The taker was cancelled while the store was granting the lease: give it back."""
    if attempt.cancelled() or attempt.exception() is not None:
        return
    release = asyncio.ensure_future(attempt.result().release())
    _orphans.add(release)
    release.add_done_callback(_orphans.discard)


async def _acquire_once(store: RunLeasing, run_id: str) -> RunLease:
    attempt = asyncio.ensure_future(store.acquire_run_lease(run_id))
    try:
        return await asyncio.shield(attempt)
    except asyncio.CancelledError:
        attempt.add_done_callback(_release_if_taken)
        raise


async def take_run_lease(store: RunStore, run_id: str, wait_seconds: float) -> RunLease:
    """The lease of ``run_id``, retried with a short back-off for up to ``wait_seconds``.

    Raises :class:`RunLeaseHeldError` once the wait is over (at once when it is 0).
    """
    deadline = time.monotonic() + wait_seconds
    pause = _FIRST_PAUSE
    while True:
        try:
            if isinstance(store, RunLeasing):
                return await _acquire_once(store, run_id)
            return _local.take(store, run_id)
        except RunLeaseHeldError:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise
            await asyncio.sleep(min(pause, remaining))
            pause = min(pause * 2, _LONGEST_PAUSE)


async def release_run_lease(lease: RunLease) -> None:
    """Give the lease back, to the end even if this task is cancelled meanwhile.

    A release cut short would leave a server lease held. A cancellation that arrives while
    releasing is raised again once the lease is back; a release that fails is logged, never
    raised over what the invocation itself returned or raised.
    """
    release = asyncio.ensure_future(lease.release())
    cancelled = False
    while True:
        try:
            await asyncio.shield(release)
        except asyncio.CancelledError:
            if not release.done():
                cancelled = True
                continue
        except Exception as error:
            logger.error(
                "polyloop: run %r: releasing its lease failed (%s: %s); the store may show it "
                "held until its holder process ends",
                lease.run_id,
                type(error).__name__,
                error,
            )
        break
    if cancelled:
        raise asyncio.CancelledError
