"""What every run lease in this workspace does the same way, for stores that grant leases.

A store that implements :class:`polyloop.ports.RunLeasing` (and the loop, for stores that do
not) needs three pieces that do not depend on where the lock lives (design 0057):

- :class:`LeaseTable`: this process's table of the runs held on one storage, refusing a second
  holder with :class:`~polyloop.errors.RunLeaseHeldError` naming the first;
- :class:`ReleasedOnce`: a lease handle whose ``release()`` gives the lease back once, however
  often and from however many paths (``finally``, ``close()``, a cancelled taker) it is called;
- :func:`forget_in_forked_child`: a child made by ``fork`` holds none of its parent's leases, so
  its copies of the tables start empty (with fresh locks: another thread may have held the old
  ones at the fork).

It lives in core, not in ``polyloop-stores``, because the loop's own table for stores without
leases uses it and core may not import stores (design 0051).
"""

from __future__ import annotations

import os
import threading
import weakref
from abc import ABC, abstractmethod
from typing import Generic, Protocol, TypeVar

from polyloop._lease import LeaseHolder
from polyloop.errors import RunLeaseHeldError

__all__ = ["ForgetsAfterFork", "LeaseTable", "ReleasedOnce", "forget_in_forked_child"]


class ForgetsAfterFork(Protocol):
    """Something that holds leases of this process and must drop them in a forked child."""

    def forget_after_fork(self) -> None:
        """Called in the child, right after ``fork``, with no other thread running."""


_Forgetful = TypeVar("_Forgetful", bound=ForgetsAfterFork)

#: Everything registered with :func:`forget_in_forked_child` that is still alive.
_forgetful: weakref.WeakSet[ForgetsAfterFork] = weakref.WeakSet()


def forget_in_forked_child(holder: _Forgetful) -> _Forgetful:
    """Have ``holder.forget_after_fork()`` called in every child forked from now on; returns
    ``holder``. Held weakly: registering keeps nothing alive."""
    _forgetful.add(holder)
    return holder


def _forget_in_child() -> None:
    for holder in list(_forgetful):
        holder.forget_after_fork()


os.register_at_fork(after_in_child=_forget_in_child)


class ReleasedOnce(ABC):
    """A lease handle (:class:`polyloop.ports.RunLease`) given back by its first ``release()``.

    The handle counts as released before :meth:`_give_back` runs, so a give-back that fails is
    not tried again: a lease the store could not give back is the store's to free (its session
    or process ending), and a second attempt could free a lease someone else has taken since.
    """

    __slots__ = ("_released", "_run_id")

    def __init__(self, run_id: str) -> None:
        self._run_id = run_id
        self._released = False

    @property
    def run_id(self) -> str:
        """The run this lease is for."""
        return self._run_id

    @property
    def released(self) -> bool:
        """Whether ``release()`` has been called."""
        return self._released

    async def release(self) -> None:
        """Give the lease back; a second call does nothing."""
        if self._released:
            return
        self._released = True
        await self._give_back()

    @abstractmethod
    async def _give_back(self) -> None:
        """Free the lease in the store (called at most once)."""


_Lease = TypeVar("_Lease")


class LeaseTable(Generic[_Lease]):
    """The runs of one storage held in this process: ``run_id`` → (lease, holder).

    Thread-safe. :meth:`take` refuses a run already in the table; :meth:`give_back` removes a
    run only for the lease that took it (a stale handle cannot free its successor's lease).
    Register the table with :func:`forget_in_forked_child` when a forked child must not inherit
    it.
    """

    __slots__ = ("__weakref__", "_held", "_lock")

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._held: dict[str, tuple[_Lease, LeaseHolder]] = {}

    def take(self, run_id: str, lease: _Lease) -> _Lease:
        """Enter ``lease`` for ``run_id`` held by this process from now, or raise
        :class:`RunLeaseHeldError` naming the holder already in the table."""
        with self._lock:
            held = self._held.get(run_id)
            if held is not None:
                raise RunLeaseHeldError.held_by(run_id, held[1])
            self._held[run_id] = (lease, LeaseHolder.of_this_process())
        return lease

    def holder(self, run_id: str) -> LeaseHolder | None:
        """Who holds ``run_id`` in this table, or ``None``."""
        with self._lock:
            held = self._held.get(run_id)
        return None if held is None else held[1]

    def give_back(self, run_id: str, lease: _Lease) -> bool:
        """Remove ``run_id`` if ``lease`` is the one holding it; whether the table is empty now."""
        with self._lock:
            held = self._held.get(run_id)
            if held is not None and held[0] is lease:
                del self._held[run_id]
            return not self._held

    def forget_after_fork(self) -> None:
        """Start empty with a fresh lock (see :func:`forget_in_forked_child`)."""
        self._lock = threading.Lock()
        self._held = {}
