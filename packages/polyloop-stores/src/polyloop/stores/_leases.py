"""Run leases on local files: classic POSIX record locks, which the kernel drops when the holder dies.

One small lease file per run (never deleted: deleting a locked file races with the next taker)
holds an exclusive ``fcntl`` record lock (``F_SETLK``, never waiting) for as long as the run is
driven, and the holder's details as one JSON line, so another process can name it.

Why these locks (design 0021):

- they belong to a *process*: SIGKILL frees them at once, and a child made by ``fork`` does not
  inherit them, so a tool's left-over child cannot keep a dead driver's lease alive
  (``flock`` and open-file-description locks are shared with such a child);
- their traps, which this module contains: closing *any* descriptor of a locked file drops
  every lock the process holds on it, and two holders inside one process do not exclude each
  other. So one process-wide registry, keyed by the lease file's real path, owns the single
  descriptor of every lease file this process has open, refuses a second holder in the process
  (also from another store object on the same storage), and keeps anyone from opening a lease
  file it holds. A look (:meth:`FileLeases.look`) consults the registry and otherwise asks the
  kernel with ``F_GETLK``, which takes nothing.

A forked child starts with an empty registry (it holds none of its parent's locks); every file
is opened ``O_CLOEXEC``. The functions here block: stores call them on their worker threads.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import os
import struct
import sys
import threading

from polyloop.errors import RunLeaseHeldError, StoreError
from polyloop.leasing import forget_in_forked_child
from polyloop.ports import LeaseHolder
from polyloop.stores._files import read_all, write_all
from polyloop.stores._naming import lease_name_for
from polyloop.stores._threads import WorkerPool

__all__ = ["FileLease", "FileLeases"]

# struct flock differs per platform; F_GETLK needs it to read who holds a lock.
if sys.platform.startswith("linux"):
    _FLOCK = "@hhqqi"  # l_type, l_whence, l_start, l_len, l_pid

    def _pack_query() -> bytes:
        return struct.pack(_FLOCK, fcntl.F_WRLCK, os.SEEK_SET, 0, 0, 0)

    def _unpack_answer(answer: bytes) -> tuple[int, int]:
        lock_type, _whence, _start, _length, pid = struct.unpack_from(_FLOCK, answer)
        return lock_type, pid

elif sys.platform == "darwin":  # pragma: no cover - not run in CI
    _FLOCK = "@qqihh"  # l_start, l_len, l_pid, l_type, l_whence

    def _pack_query() -> bytes:
        return struct.pack(_FLOCK, 0, 0, 0, fcntl.F_WRLCK, os.SEEK_SET)

    def _unpack_answer(answer: bytes) -> tuple[int, int]:
        _start, _length, pid, lock_type, _whence = struct.unpack_from(_FLOCK, answer)
        return lock_type, pid

else:  # pragma: no cover - not run in CI
    _FLOCK = ""

#: The kernel writes its struct flock into this buffer; the slack covers trailing padding.
_QUERY_SLACK = b"\0" * 16


def _who_locks(fd: int, path: str) -> LeaseHolder | None:
    """Who holds a lock on the open file ``fd`` (``F_GETLK``: looks, takes nothing)."""
    if not _FLOCK:  # pragma: no cover - not run in CI
        raise StoreError(
            f"Cannot tell who holds the lease {path} on {sys.platform}: reading a lock's holder "
            "is implemented for Linux and macOS only. Taking and releasing leases still works."
        )
    answer = fcntl.fcntl(fd, fcntl.F_GETLK, _pack_query() + _QUERY_SLACK)
    lock_type, pid = _unpack_answer(answer)
    if lock_type == fcntl.F_UNLCK:
        return None
    recorded = _recorded_holder(fd)
    # The file may still hold an earlier holder's details (the new one writes them just after
    # locking); pid 0 means a holder outside this pid namespace, whose own view is all we have.
    if recorded is not None and (pid == 0 or recorded.process_id == pid):
        return recorded
    return LeaseHolder(process_id=pid or None)


def _recorded_holder(fd: int) -> LeaseHolder | None:
    try:
        details = json.loads(read_all(fd))
        holder = LeaseHolder(
            process_id=details["process_id"],
            host_name=details["host_name"],
            acquired_at=details["acquired_at"],
        )
    except (OSError, ValueError, KeyError, TypeError):
        return None  # being written right now, or not ours: the lock's pid still answers
    if not (
        isinstance(holder.process_id, int)
        and isinstance(holder.host_name, str)
        and isinstance(holder.acquired_at, str)
    ):
        return None
    return holder


class _Entry:
    """This process's hold on one lease file; ``fd`` is ``None`` while it is being taken or
    looked at (others in the process wait for that moment to pass)."""

    __slots__ = ("fd", "holder")

    def __init__(self) -> None:
        self.fd: int | None = None
        self.holder: LeaseHolder | None = None


class _Registry:
    """Every lease file this process has open, by real path. Guarded by ``changed``'s lock."""

    __slots__ = ("__weakref__", "changed", "entries")

    def __init__(self) -> None:
        self.changed = threading.Condition(threading.Lock())
        self.entries: dict[str, _Entry] = {}

    def _claim(self, key: str) -> _Entry:
        """Wait until nobody in this process is taking or looking at ``key``; return the held
        entry if there is one, else reserve it (the caller must :meth:`_settle` it)."""
        while True:
            entry = self.entries.get(key)
            if entry is None:
                entry = self.entries[key] = _Entry()
                return entry
            if entry.fd is not None:
                return entry
            self.changed.wait()

    def _settle(self, key: str, entry: _Entry, fd: int | None, holder: LeaseHolder | None) -> None:
        with self.changed:
            if fd is None:
                del self.entries[key]
            else:
                entry.fd, entry.holder = fd, holder
            self.changed.notify_all()

    def take(self, path: str, run_id: str) -> tuple[str, int, LeaseHolder]:
        """Lock ``path`` for this process, or raise :class:`RunLeaseHeldError`."""
        key = os.path.realpath(path)
        with self.changed:
            entry = self._claim(key)
            if entry.fd is not None:
                raise RunLeaseHeldError.held_by(run_id, entry.holder, where=path)
        fd: int | None = None
        holder: LeaseHolder | None = None
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
            try:
                fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError as error:
                if error.errno not in (errno.EACCES, errno.EAGAIN):
                    raise
                other = _who_locks(fd, path)
                raise RunLeaseHeldError.held_by(
                    run_id, other or LeaseHolder(), where=path
                ) from None
            holder = LeaseHolder.of_this_process()
            details = {
                "process_id": holder.process_id,
                "host_name": holder.host_name,
                "acquired_at": holder.acquired_at,
                "run_id": run_id,
            }
            line = (json.dumps(details, ensure_ascii=True) + "\n").encode("ascii")
            write_all(fd, line, 0)
            os.ftruncate(fd, len(line))
        except BaseException:
            # Nobody else in this process has this file open (the key is reserved), so closing
            # it drops no lock of ours but the one this attempt may have taken.
            if fd is not None:
                os.close(fd)
            self._settle(key, entry, None, None)
            raise
        self._settle(key, entry, fd, holder)
        return key, fd, holder

    def look(self, path: str) -> LeaseHolder | None:
        """Who holds ``path`` now: this process (from the registry) or another (``F_GETLK``)."""
        key = os.path.realpath(path)
        with self.changed:
            entry = self._claim(key)
            if entry.fd is not None:
                return entry.holder
        try:
            try:
                fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
            except FileNotFoundError:
                return None  # never taken (and looking creates nothing)
            try:
                return _who_locks(fd, path)
            finally:
                os.close(fd)
        finally:
            self._settle(key, entry, None, None)

    def give_back(self, key: str, fd: int) -> None:
        """Unlock and close a lease taken by :meth:`take`."""
        with self.changed:
            entry = self.entries.get(key)
            # Closed under the lock and before the entry goes: a taker in this process must
            # not open the file while this descriptor (and so the lock) is still about.
            with contextlib.suppress(OSError):
                os.close(fd)
            if entry is not None and entry.fd == fd:
                del self.entries[key]
            self.changed.notify_all()

    def forget_after_fork(self) -> None:
        # A forked child holds none of its parent's record locks; its registry starts empty
        # (and with a fresh lock: another thread may have held the old one at the fork).
        self.changed = threading.Condition(threading.Lock())
        self.entries = {}


_registry = forget_in_forked_child(_Registry())


class FileLease:
    """A lease taken by :class:`FileLeases`: the handle ``run``/``resume`` keep.

    Not a :class:`polyloop.leasing.ReleasedOnce`: that one counts as released before it gives
    back, outside any lock. Here the flag turns under the owner's lock together with closing
    the descriptor, because ``close()`` may give back the same lease concurrently, and a second
    ``os.close`` of the number could close a descriptor the process has reused since (and so
    drop another lease's lock). Nor is this process's table a
    :class:`polyloop.leasing.LeaseTable`: it is keyed by the lease file's real path across
    store objects, owns the file's one descriptor, and makes others wait (not refuse) while a
    key is being taken or looked at (design 0021).
    """

    __slots__ = ("_fd", "_key", "_owner", "_released", "_run_id")

    def __init__(self, owner: FileLeases, run_id: str, key: str, fd: int) -> None:
        self._owner = owner
        self._run_id = run_id
        self._key = key
        self._fd = fd
        self._released = False

    @property
    def run_id(self) -> str:
        return self._run_id

    async def release(self) -> None:
        """Give the lease back (idempotent; after the store was closed, it already is)."""
        if self._released:
            return
        try:
            await self._owner.pool.run(self._owner.give_back, self)
        except StoreError:  # the store's threads are closed: unlocking is two system calls
            self._owner.give_back(self)

    def _give_back(self) -> bool:
        """Unlock once; ``False`` when this lease was already given back. Caller holds the
        owner's lock."""
        if self._released:
            return False
        self._released = True
        _registry.give_back(self._key, self._fd)
        return True


class FileLeases:
    """The leases of one store object: lease files in ``directory``, I/O on ``pool``'s threads.

    Blocking methods (:meth:`take`, :meth:`look`, :meth:`give_back`, :meth:`close`) are meant to
    run on the store's worker threads.
    """

    def __init__(self, directory: str, pool: WorkerPool) -> None:
        self.directory = directory
        self.pool = pool
        self._lock = threading.Lock()
        self._held: dict[str, FileLease] = {}

    def path_for(self, run_id: str) -> str:
        """The lease file of ``run_id``."""
        return os.path.join(self.directory, lease_name_for(run_id))

    def holds(self, run_id: str) -> bool:
        """Whether this store object holds the lease of ``run_id`` now."""
        return run_id in self._held

    def take(self, run_id: str) -> FileLease:
        path = self.path_for(run_id)
        try:
            os.makedirs(self.directory, exist_ok=True)
            key, fd, _holder = _registry.take(path, run_id)
        except OSError as error:
            raise StoreError(
                f"Taking the lease of run {run_id!r} at {path} failed: "
                f"{error.strerror or error}. Nothing was read or written; check that the "
                "directory is writable."
            ) from error
        lease = FileLease(self, run_id, key, fd)
        with self._lock:
            self._held[run_id] = lease
        return lease

    def look(self, run_id: str) -> LeaseHolder | None:
        path = self.path_for(run_id)
        try:
            return _registry.look(path)
        except OSError as error:
            raise StoreError(
                f"Looking up the lease of run {run_id!r} at {path} failed: "
                f"{error.strerror or error}. Nothing was changed; check that it is readable."
            ) from error

    def give_back(self, lease: FileLease) -> None:
        with self._lock:
            if lease._give_back() and self._held.get(lease.run_id) is lease:
                del self._held[lease.run_id]

    def close(self) -> None:
        """Give back every lease this store object holds."""
        with self._lock:
            leases = list(self._held.values())
            self._held.clear()
            for lease in leases:
                lease._give_back()
