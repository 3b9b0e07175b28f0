"""A durable RunStore: one append-only JSON Lines file per run, in one directory.

Each record is one line of :func:`polyloop.serialization.dumps_log_record`, with repeated text
written by reference (:mod:`polyloop.stores._stored_form`, design 0041). A write returns
only after its line is on disk (``fdatasync``; the directory too when the file is first opened
by this process), so once write k of a run is acknowledged, writes 1..k are durable: prefix
durability follows from syncing every write before the next one of the same run starts.

- File names come from :func:`polyloop.stores._naming.file_name_for`: no run_id escapes the
  directory or shares a file with another.
- Only the last line of a file can be torn by a crash; it is ignored on read and cut off before
  the next append. A bad line anywhere else raises :class:`~polyloop.errors.CorruptLogError`
  naming the file and line.
- A log holds each record at most once (one ``RunStarted``, one intent per kind and result_id,
  one result per result_id, one step per index, one ``RunFinished``); a second one is refused
  (:class:`~polyloop.errors.DuplicateRecordError`, ``RunAlreadyStartedError`` for the head and
  tail), never dropped or kept.
- Run leases (:class:`polyloop.ports.RunLeasing`) are POSIX record locks on one small file per
  run in ``<directory>/.leases/`` (see :mod:`polyloop.stores._leases`): freed by the kernel when
  the holder dies, never inherited by a forked child.
- A write of a run whose lease this store object holds trusts the view of the file it keeps
  (size, keys), primed by the read that follows taking the lease: nobody else may write a
  leased run. Any other write holds an exclusive ``flock`` on the file and looks again under
  it whenever the file changed, so of two processes racing to start one run, exactly one
  succeeds and the other gets :class:`~polyloop.errors.RunAlreadyStartedError`.
- File I/O runs on a pool of worker threads, never on the event loop. Writes of one run are
  serialized; writes of different runs sync in parallel, so concurrent runs overlap their syncs.
  A caller on an otherwise idle event loop waits for its thread on a lock for up to
  ``idle_wait_ms`` before awaiting (see :mod:`polyloop.stores._threads`).
- Several records of one run can be written as one (:class:`polyloop.ports.RecordBatching`,
  design 0055): their lines, each the one its own write would append, go down in one
  ``pwrite`` and one ``fdatasync``. A crash keeps a prefix of them (the last one possibly
  torn, cut off as usual); a refused record stores none of them.

POSIX only (``fcntl``).
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import threading
from collections import OrderedDict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TypeVar

from polyloop.errors import ConfigurationError, CorruptLogError, StoreError
from polyloop.ports import LeaseHolder, RunLog
from polyloop.serialization import LogRecord
from polyloop.stores._copying import copied_lines, copyable
from polyloop.stores._durable import DurableStore, batch_run_id, utf8_of
from polyloop.stores._files import read_all, sync_directory, write_all
from polyloop.stores._jsonl_format import first_run_id, parse_file, scan_tail
from polyloop.stores._leases import FileLease, FileLeases
from polyloop.stores._naming import SUFFIX, file_name_for
from polyloop.stores._records import (
    KeySet,
    RecordKey,
    describe_key,
    duplicate_error,
    record_key,
)
from polyloop.stores._stored_form import StoredSteps, stored_line
from polyloop.stores._threads import DEFAULT_IDLE_WAIT_SECONDS, WorkerPool, check_idle_wait
from polyloop.types import RunStarted, StepCompleted, StepRecord

__all__ = ["JsonlRunStore"]

T = TypeVar("T")

_sync_data: Callable[[int], None] = getattr(os, "fdatasync", os.fsync)


#: The subdirectory of the store directory holding the run lease files.
LEASE_DIRECTORY = ".leases"
_FINISHED: RecordKey = ("run_finished",)


@dataclass(frozen=True, slots=True)
class _Parsed:
    """A file as read: its log, the end of its good part, its keys and its size."""

    log: RunLog
    valid_end: int
    keys: frozenset[RecordKey]
    size: int


class _RunFile:
    """This process's view of one run's file. Guarded by ``lock``; the flock guards the file."""

    __slots__ = ("fd", "keys", "lock", "path", "size", "torn")

    def __init__(self, path: str) -> None:
        self.path = path
        self.lock = threading.Lock()
        self.fd: int | None = None
        #: Where the next line goes (the end of the file's good part); -1: unknown, look again.
        self.size = -1
        #: The keys of the records the file holds up to ``size``.
        self.keys = KeySet()
        #: Bytes after ``size`` are a torn write, to cut off before the next line.
        self.torn = False

    def forget_view(self) -> None:
        self.size = -1
        self.keys = KeySet()
        self.torn = False


class JsonlRunStore(DurableStore):
    """Run logs as one JSON Lines file per run in ``directory`` (created on first write).

    Use it as ``async with JsonlRunStore(path) as store:`` or call :meth:`close` when done.
    ``max_open_files`` bounds the file descriptors kept open between writes; ``max_workers``
    bounds how many runs can be syncing at the same moment. ``idle_wait_ms`` is how long a call
    may wait for its thread on the event-loop thread, only while the loop has nothing else ready
    to run, before it awaits instead (0: always await; design 0017).
    """

    def __init__(
        self,
        directory: str | os.PathLike[str],
        *,
        max_open_files: int = 256,
        max_workers: int = 32,
        idle_wait_ms: float = DEFAULT_IDLE_WAIT_SECONDS * 1000,
    ) -> None:
        if max_open_files < 1 or max_workers < 1:
            raise ConfigurationError(
                "JsonlRunStore needs max_open_files >= 1 and max_workers >= 1; "
                f"got {max_open_files} and {max_workers}."
            )
        self._directory = os.path.abspath(os.fspath(directory))
        self._max_open = max_open_files
        self._workers = WorkerPool(
            f"JsonlRunStore({self._directory!r})",
            max_workers,
            idle_wait=check_idle_wait("JsonlRunStore", idle_wait_ms),
        )
        self._lock = threading.Lock()
        self._files: OrderedDict[str, _RunFile] = OrderedDict()
        self._directory_ready = False
        self._stored_steps = StoredSteps()
        self._leases = FileLeases(os.path.join(self._directory, LEASE_DIRECTORY), self._workers)

    # -- public surface ------------------------------------------------------------------

    def parameters(self) -> Mapping[str, str]:
        """``kind`` only: where the directory lives does not change what a run does, so a
        directory copied or moved elsewhere resumes its runs there (design 0040)."""
        return {"kind": "jsonl"}

    @property
    def directory(self) -> str:
        """Absolute path of the directory holding the run files."""
        return self._directory

    def path_for(self, run_id: str) -> str:
        """The path of the file that holds (or would hold) the log of ``run_id``."""
        return os.path.join(self._directory, file_name_for(run_id))

    async def read_log(self, run_id: str) -> RunLog:
        if utf8_of(run_id) is None:
            return RunLog()  # such a run_id can never have been written
        path = self.path_for(run_id)
        log: RunLog = await self._submit(self._read, run_id, path)
        if self._leases.holds(run_id):
            self._stored_steps.read(run_id, log.steps)
        return log

    async def acquire_run_lease(self, run_id: str) -> FileLease:
        """Take the lease of ``run_id`` now, or raise ``RunLeaseHeldError`` naming its holder.

        Held until released or until this store is closed; the kernel frees it when this
        process dies. The first read of the run after taking it primes this store object's
        view of the file, so the driver's writes skip the per-write ``flock`` and size check.
        """
        return await self._submit(self._take_lease, run_id)

    async def run_lease_holder(self, run_id: str) -> LeaseHolder | None:
        """Who holds the lease of ``run_id`` now (in any process), or ``None``; takes nothing."""
        return await self._submit(self._leases.look, run_id)

    async def list_run_ids(self) -> tuple[str, ...]:
        """Every run_id with at least one complete record, in file-name order
        (:class:`polyloop.ports.RunListing`).

        Raises :class:`~polyloop.errors.CorruptLogError` for a file whose first line is not a
        record, or whose name does not belong to the run_id it holds.
        """
        return await self._submit(self._run_ids)

    async def change_marker(self, run_id: str) -> str:
        """The run's change marker: its file's size, inode and modification time
        (:class:`polyloop.watching.ChangeMarking`); one ``stat``, no read."""
        if utf8_of(run_id) is None:
            return "-"  # such a run_id can never have been written
        return await self._submit(self._marker, self.path_for(run_id))

    async def change_markers(self, run_ids: Iterable[str] | None = None) -> Mapping[str, str]:
        """Every listed run's change marker (:class:`polyloop.watching.ChangeMarking`): the
        listing's read of each file's first line, and a ``stat`` each; or a ``stat`` of each
        of ``run_ids``."""
        if run_ids is None:
            return await self._submit(self._markers)
        chosen = [run_id for run_id in run_ids if utf8_of(run_id) is not None]
        return await self._submit(self._markers_of, chosen)

    def close(self) -> None:
        """Wait for writes in flight, then close every file and give back every lease this
        store object holds. Blocks; from async code use ``async with`` or :meth:`aclose`."""
        self._workers.close()
        with self._lock:
            for state in self._files.values():
                self._close_file(state)
            self._files.clear()
        self._leases.close()

    # -- plumbing --------------------------------------------------------------------------

    async def _submit(self, function: Callable[..., T], *args: object) -> T:
        return await self._workers.run(function, *args)

    async def _write(self, record: LogRecord) -> None:
        # One line holds a whole record (a step's action result with its step record).
        run_id = record.run_id
        known = self._files.get(run_id)  # its path was worked out (and run_id checked) before
        path = self.path_for(run_id) if known is None else known.path  # refuses a lone surrogate
        line = (stored_line(record, self._stored_steps.of(run_id)) + "\n").encode("utf-8")
        await self._submit(self._write_line, run_id, path, line, (record_key(record),))
        self._stored_steps.stored(record)

    async def write_records(self, records: Sequence[LogRecord]) -> None:
        """Append the lines of ``records``, all of one run, in one ``pwrite`` and one
        ``fdatasync`` (:class:`polyloop.ports.RecordBatching`); a refused record stores none."""
        run_id = batch_run_id(records, "JsonlRunStore")
        if run_id is None:
            return
        known = self._files.get(run_id)
        path = self.path_for(run_id) if known is None else known.path  # refuses a lone surrogate
        # Each line is the one its own write would give: a RunFinished may refer to a step
        # earlier in the batch, which a crash cannot keep it without (a prefix survives).
        stored: Mapping[int, StepRecord] | None = self._stored_steps.of(run_id)
        # Copied once, then added to: a batch of a thousand steps (a fork's copy) stays linear.
        own: dict[int, StepRecord] | None = None
        lines: list[str] = []
        for record in records:
            lines.append(stored_line(record, stored))
            if type(record) is StepCompleted:
                if own is None:
                    own = dict(stored or {})
                    stored = own
                own[record.step.step_idx] = record.step
        data = ("\n".join(lines) + "\n").encode("utf-8")
        keys = tuple(record_key(record) for record in records)
        await self._submit(self._write_line, run_id, path, data, keys)
        for record in records:
            self._stored_steps.stored(record)

    async def copy_records(
        self, started: RunStarted, source_run_id: str, records: Sequence[LogRecord]
    ) -> bool:
        """Append ``started`` and the source's lines of ``records``, each with only the run id
        changed, in one ``pwrite`` and one ``fdatasync`` (:class:`polyloop.ports.RecordCopying`);
        ``False``, storing nothing, when the source's first lines are not those records."""
        if not copyable(records, source_run_id):
            return False
        run_id = started.run_id
        known = self._files.get(run_id)
        path = self.path_for(run_id) if known is None else known.path  # refuses a lone surrogate
        source = await self._submit(
            self._head_lines, self.path_for(source_run_id), len(records) + 1
        )
        started_line = stored_line(started)
        lines = None if source is None else copied_lines(source, records, started_line)
        if lines is None:
            return False
        data = (started_line + "\n" + "\n".join(lines) + "\n").encode("utf-8")
        keys = (record_key(started), *(record_key(record) for record in records))
        await self._submit(self._write_line, run_id, path, data, keys)
        self._stored_steps.read(run_id, tuple(r for r in records if type(r) is StepCompleted))
        return True

    @staticmethod
    def _head_lines(path: str, count: int) -> list[str] | None:
        """The first ``count`` whole lines of the file at ``path`` (``None``: fewer, or none)."""
        try:
            fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
        except OSError:
            return None
        try:
            fcntl.flock(fd, fcntl.LOCK_SH)
            data = read_all(fd)
        except OSError:
            return None
        finally:
            os.close(fd)
        lines = data.split(b"\n", count)
        if len(lines) <= count:  # the last one has no line break: not a whole line
            return None
        try:
            return [line.decode("utf-8") for line in lines[:count]]
        except UnicodeDecodeError:
            return None

    def _take_lease(self, run_id: str) -> FileLease:
        # Whatever this object saw of the file before is stale: another driver may have
        # written since. Forgotten first, so no write can trust it once the lease is held.
        with self._lock:
            state = self._files.get(run_id)
        if state is not None:
            with state.lock:
                state.forget_view()
        return self._leases.take(run_id)

    def _state(self, run_id: str, path: str) -> _RunFile:
        with self._lock:
            state = self._files.get(run_id)
            if state is None:
                state = self._files[run_id] = _RunFile(path)
            self._files.move_to_end(run_id)
            return state

    def _forget(self, run_id: str, state: _RunFile) -> None:
        """Close and drop a run's file (the caller holds ``state.lock``)."""
        with self._lock:
            if self._files.get(run_id) is state:
                del self._files[run_id]
        self._close_file(state)

    @staticmethod
    def _close_file(state: _RunFile) -> None:
        state.forget_view()
        JsonlRunStore._close_descriptor(state)

    @staticmethod
    def _close_descriptor(state: _RunFile) -> None:
        if state.fd is not None:
            fd, state.fd = state.fd, None
            os.close(fd)

    def _evict(self) -> None:
        """Close the least recently used files beyond ``max_open_files``.

        A run whose lease this object holds keeps its view of the file (nobody else may write
        it), so its next write reopens the file without reading it again; views nobody can
        use any more (closed, and no lease) are dropped.
        """
        if len(self._files) <= self._max_open:
            return
        with self._lock:
            candidates = [(r, s) for r, s in self._files.items() if not s.lock.locked()]
            excess = sum(1 for s in self._files.values() if s.fd is not None) - self._max_open
        for run_id, state in candidates:
            if state.fd is not None and excess <= 0:
                continue
            if not state.lock.acquire(blocking=False):
                continue
            try:
                if self._leases.holds(run_id):
                    if state.fd is not None:
                        self._close_descriptor(state)
                        excess -= 1
                else:
                    excess -= state.fd is not None
                    self._forget(run_id, state)
            finally:
                state.lock.release()

    def _prepare_directory(self) -> None:
        if self._directory_ready:
            return
        os.makedirs(self._directory, exist_ok=True)
        sync_directory(os.path.dirname(self._directory) or self._directory)
        self._directory_ready = True

    def _open(self, state: _RunFile) -> int:
        if state.fd is None:
            self._prepare_directory()
            fd = os.open(state.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
            try:
                # The file may be new, or created by a process that died before syncing its
                # directory entry: either way an acknowledged line needs the entry durable.
                sync_directory(self._directory)
            except BaseException:
                os.close(fd)
                raise
            state.fd = fd
        return state.fd

    def _write_line(self, run_id: str, path: str, line: bytes, keys: tuple[RecordKey, ...]) -> None:
        """Append ``line`` (the lines of records with ``keys``, in order) and sync it."""
        state = self._state(run_id, path)
        with state.lock:
            try:
                fd = self._open(state)
                if state.size >= 0 and self._leases.holds(run_id):
                    self._append_line(run_id, state, fd, line, keys)
                else:
                    self._write_locked(run_id, state, fd, line, keys)
            except OSError as error:
                self._forget(run_id, state)
                what = " and ".join(describe_key(key) for key in keys)
                raise StoreError(
                    f"Writing a {what} of run {run_id!r} to {path} failed: "
                    f"{error.strerror or error} (errno {error.errno}). The record is NOT stored; "
                    "earlier acknowledged records are intact. Fix the disk (free space, "
                    "permissions) and resume the run."
                ) from error
            if _FINISHED in keys:
                self._forget(run_id, state)
        self._evict()

    def _write_locked(
        self, run_id: str, state: _RunFile, fd: int, line: bytes, keys: tuple[RecordKey, ...]
    ) -> None:
        """A write without the lease: under an exclusive ``flock``, after looking again."""
        fcntl.flock(fd, fcntl.LOCK_EX)
        try:
            size = os.fstat(fd).st_size
            if size != state.size:
                # Another process appended, or this is the first write here: look again.
                tail = scan_tail(read_all(fd))
                state.forget_view()
                if tail.valid_end < size:
                    os.ftruncate(fd, tail.valid_end)
                state.size, state.keys = tail.valid_end, KeySet(tail.keys)
            self._append_line(run_id, state, fd, line, keys)
        finally:
            fcntl.flock(fd, fcntl.LOCK_UN)

    @staticmethod
    def _append_line(
        run_id: str, state: _RunFile, fd: int, line: bytes, keys: tuple[RecordKey, ...]
    ) -> None:
        """Refuse a duplicate, else write ``line`` at the end of the good part and sync it."""
        # A set of the batch's earlier keys: a fork's copy is one batch of thousands of records.
        earlier: set[RecordKey] = set()
        for key in keys:
            if key in state.keys or key in earlier:
                raise duplicate_error(run_id, key, state.path)
            earlier.add(key)
        offset = state.size
        state.size = -1  # until the line is durable, the cached view is not trusted
        try:
            if state.torn:
                os.ftruncate(fd, offset)
                state.torn = False
            write_all(fd, line, offset)
            _sync_data(fd)
        except OSError:
            # Leave no partial line behind for readers; if even this fails, the torn tail is
            # cut off by the next write, which looks again because the size is unknown.
            with contextlib.suppress(OSError):
                os.ftruncate(fd, offset)
            raise
        state.size = offset + len(line)
        for key in keys:
            state.keys.add(key)

    def _run_ids(self) -> tuple[str, ...]:
        try:
            return self._list_run_ids()
        except OSError as error:
            raise StoreError(
                f"Listing the runs in {self._directory} failed: {error.strerror or error}. "
                "Nothing was changed; check that the directory is readable."
            ) from error

    def _list_run_ids(self) -> tuple[str, ...]:
        try:
            names = sorted(n for n in os.listdir(self._directory) if n.endswith(SUFFIX))
        except FileNotFoundError:
            return ()
        found: list[str] = []
        for name in names:
            path = os.path.join(self._directory, name)
            with open(path, "rb") as handle:
                head = handle.read(1 << 16)
                if b"\n" not in head[:-1]:
                    head += handle.read()  # a first line longer than the first chunk
            run_id = first_run_id(head, path)
            if run_id is None:
                continue
            if file_name_for(run_id) != name:
                raise CorruptLogError(
                    f"{path} holds records of run {run_id!r}, whose file would be "
                    f"{file_name_for(run_id)!r}; it was renamed or copied by hand. Move it "
                    "out of the store directory or give it its proper name."
                )
            found.append(run_id)
        return tuple(found)

    @staticmethod
    def _marker(path: str) -> str:
        try:
            found = os.stat(path)
        except FileNotFoundError:
            return "-"
        except OSError as error:
            raise StoreError(
                f"Looking at {path} failed: {error.strerror or error}. Nothing was changed; "
                "check that the store directory is readable."
            ) from error
        return f"{found.st_size}:{found.st_ino}:{found.st_mtime_ns}"

    def _markers(self) -> dict[str, str]:
        return {run_id: self._marker(self.path_for(run_id)) for run_id in self._run_ids()}

    def _markers_of(self, run_ids: list[str]) -> dict[str, str]:
        found = {run_id: self._marker(self.path_for(run_id)) for run_id in run_ids}
        return {run_id: marker for run_id, marker in found.items() if marker != "-"}

    def _read(self, run_id: str, path: str) -> RunLog:
        if not self._leases.holds(run_id):
            return self._parse(run_id, path).log
        # The driver reads right after taking the lease: what it reads is what it appends to.
        state = self._state(run_id, path)
        with state.lock:
            parsed = self._parse(run_id, path)
            if state.size < 0:
                state.size, state.keys = parsed.valid_end, KeySet(parsed.keys)
                state.torn = parsed.size > parsed.valid_end
            return parsed.log

    def _parse(self, run_id: str, path: str) -> _Parsed:
        try:
            fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
        except FileNotFoundError:
            return _Parsed(RunLog(), 0, frozenset(), 0)
        except OSError as error:
            raise StoreError(
                f"Cannot open the log of run {run_id!r} at {path}: {error.strerror or error}. "
                "Check that the directory is readable; nothing was changed."
            ) from error
        try:
            fcntl.flock(fd, fcntl.LOCK_SH)
            data = read_all(fd)
        except OSError as error:
            raise StoreError(
                f"Reading the log of run {run_id!r} at {path} failed: {error.strerror or error}. "
                "Nothing was changed; retry once the disk is readable."
            ) from error
        finally:
            os.close(fd)
        parsed = parse_file(data, run_id, path)
        return _Parsed(parsed.log, parsed.valid_end, parsed.keys, len(data))
