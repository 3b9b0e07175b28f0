"""Deliberately broken RunStores, each with one realistic defect, and the rule that must catch it.

They all build on :class:`ReferenceStore`, a small correct store whose "disk" (:class:`Disk`)
outlives the store objects, so reopening is a new object on the same disk. The reference store
itself must pass the whole suite: that proves every failure below comes from the defect.

Its run leases are Linux open-file-description locks on one file per run in the disk's lease
directory: they exclude every other open of the file (in this process too), vanish when the
holder dies, and can be looked at without taking. (A real store must not use them as they are:
a forked child shares them. See ``polyloop.stores._leases`` for the locks the shipped stores
use.) A child process reopening the disk (:func:`reopen_in_child`) shares the lease directory,
not the records.
"""

from __future__ import annotations

import asyncio
import errno
import fcntl
import hashlib
import os
import struct
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from types import MappingProxyType

from polyloop.asking import UserAnswered, UserAsked
from polyloop.errors import (
    DuplicateRecordError,
    RunAlreadyStartedError,
    RunLeaseHeldError,
    StoreError,
)
from polyloop.ports import LeaseHolder, RunLease, RunLog
from polyloop.serialization import LogRecord, dumps_log_record, loads_log_record
from polyloop.testing import run_log_from
from polyloop.types import (
    Intent,
    IntentKind,
    ModelCallResult,
    RunFinished,
    RunStarted,
    StepCompleted,
)


@dataclass
class Disk:
    """The storage: encoded records per run_id, in write order, and a directory of lease
    files (one per run). Survives store objects."""

    lease_directory: str
    lines: dict[str, list[str]] = field(default_factory=dict)
    #: A "server" that refuses this password: every read and write fails (None: it accepts).
    refuses: str | None = field(default=None, repr=False)


class DriverError(Exception):
    """A database driver's error: like psycopg's, it keeps the connection options it used."""

    def __init__(self, message: str, conninfo: str) -> None:
        super().__init__(message)
        self.conninfo = conninfo


def _connect(password: str) -> None:
    raise DriverError("password authentication failed", f"host=db.internal password={password}")


_FLOCK = "@hhqqi"  # struct flock on Linux: l_type, l_whence, l_start, l_len, l_pid


def _lock_file(fd: int, command: int) -> int:
    """An open-file-description lock request on the whole file; returns the lock type seen."""
    request = struct.pack(_FLOCK, fcntl.F_WRLCK, os.SEEK_SET, 0, 0, 0) + b"\0" * 16
    lock_type: int = struct.unpack_from(_FLOCK, fcntl.fcntl(fd, command, request))[0]
    return lock_type


def _key_of(record: LogRecord) -> tuple[object, ...]:
    if isinstance(record, Intent):
        return ("intent", record.kind, record.result_id)
    if isinstance(record, ModelCallResult):
        return ("result", record.result_id)
    if isinstance(record, StepCompleted):
        return ("step", record.step.step_idx)
    if isinstance(record, UserAsked | UserAnswered):
        return (type(record).__name__, record.step)
    return (type(record).__name__,)


class Lease:
    """A lease of :class:`ReferenceStore`: the open descriptor holding the lock."""

    def __init__(self, store: ReferenceStore, run_id: str, fd: int) -> None:
        self.store = store
        self._run_id = run_id
        self.fd: int | None = fd

    @property
    def run_id(self) -> str:
        return self._run_id

    async def release(self) -> None:
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None
            self.store.leases.discard(self)


class ReferenceStore:
    """A correct store: every write is encoded onto the disk before it returns."""

    def __init__(self, disk: Disk) -> None:
        self.disk = disk
        self.leases: set[Lease] = set()

    def key(self, run_id: str) -> str:
        return run_id

    def refuse_duplicate(self, record: LogRecord, decoded: list[LogRecord]) -> None:
        if isinstance(record, RunStarted) and any(isinstance(r, RunStarted) for r in decoded):
            raise RunAlreadyStartedError(f"run {record.run_id!r} is already started")
        if isinstance(record, RunFinished) and any(isinstance(r, RunFinished) for r in decoded):
            raise RunAlreadyStartedError(f"run {record.run_id!r} is already finished")
        if any(_key_of(r) == _key_of(record) for r in decoded):
            raise DuplicateRecordError(f"run {record.run_id!r} already has {_key_of(record)}")

    def reach(self) -> None:
        """Connect to the "server": a refused password raises a clean StoreError, raised
        outside the except block so that the driver's error does not travel along."""
        if self.disk.refuses is None:
            return
        try:
            _connect(self.disk.refuses)
        except DriverError as error:
            reason = str(error)
        raise StoreError(f"cannot connect to db.internal ({reason}); check the password")

    def commit(self, record: LogRecord) -> None:
        self.reach()
        lines = self.disk.lines.setdefault(self.key(record.run_id), [])
        self.refuse_duplicate(record, [loads_log_record(line) for line in lines])
        lines.append(dumps_log_record(record))

    async def append(self, record: LogRecord) -> None:
        await asyncio.sleep(0)  # a real store awaits its I/O here
        self.commit(record)

    async def write_run_started(self, record: RunStarted) -> None:
        await self.append(record)

    async def write_intent(self, record: Intent) -> None:
        await self.append(record)

    async def write_model_call_result(self, record: ModelCallResult) -> None:
        await self.append(record)

    async def write_step_completed(self, record: StepCompleted) -> None:
        await self.append(record)

    async def write_run_finished(self, record: RunFinished) -> None:
        await self.append(record)

    async def write_user_asked(self, record: UserAsked) -> None:
        await self.append(record)

    async def write_user_answered(self, record: UserAnswered) -> None:
        await self.append(record)

    async def write_records(self, records: Sequence[LogRecord]) -> None:
        """Every record checked against the log and the batch before any is put on disk."""
        await asyncio.sleep(0)
        if any(record.run_id != records[0].run_id for record in records):
            raise ValueError("the records of one write_records call must be of one run")
        self.reach()
        lines = self.disk.lines.get(self.key(records[0].run_id), []) if records else []
        decoded = [loads_log_record(line) for line in lines]
        for number, record in enumerate(records):
            self.refuse_duplicate(record, decoded + list(records[:number]))
        for record in records:
            self.commit(record)

    def records(self, run_id: str) -> list[LogRecord]:
        self.reach()
        return [loads_log_record(line) for line in self.disk.lines.get(self.key(run_id), [])]

    async def read_log(self, run_id: str) -> RunLog:
        await asyncio.sleep(0)
        return run_log_from(self.records(run_id))

    def parameters(self) -> Mapping[str, str]:
        return {"kind": "reference"}

    def lease_path(self, run_id: str) -> str:
        digest = hashlib.sha256(run_id.encode("utf-8", "surrogatepass")).hexdigest()
        return os.path.join(self.disk.lease_directory, f"{digest}.lease")

    async def acquire_run_lease(self, run_id: str) -> RunLease:
        self.reach()
        os.makedirs(self.disk.lease_directory, exist_ok=True)
        fd = os.open(self.lease_path(run_id), os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        try:
            _lock_file(fd, fcntl.F_OFD_SETLK)
        except OSError as error:
            os.close(fd)
            if error.errno in (errno.EAGAIN, errno.EACCES):
                raise RunLeaseHeldError.held_by(run_id, LeaseHolder()) from None
            raise
        lease = Lease(self, run_id, fd)
        self.leases.add(lease)
        return lease

    async def run_lease_holder(self, run_id: str) -> LeaseHolder | None:
        try:
            fd = os.open(self.lease_path(run_id), os.O_RDONLY | os.O_CLOEXEC)
        except FileNotFoundError:
            return None
        try:
            return None if _lock_file(fd, fcntl.F_OFD_GETLK) == fcntl.F_UNLCK else LeaseHolder()
        finally:
            os.close(fd)

    def close(self) -> None:
        for lease in list(self.leases):
            if lease.fd is not None:
                os.close(lease.fd)
                lease.fd = None
        self.leases.clear()


def reopen(store: ReferenceStore) -> ReferenceStore:
    """A new store object of the same class on the same disk."""
    return type(store)(store.disk)


def reopen_in_child(store_class: type[ReferenceStore], lease_directory: str) -> ReferenceStore:
    """In another process: a store of ``store_class`` sharing the lease directory."""
    return store_class(Disk(lease_directory))


# ---------------------------------------------------------------------------
# The broken ones
# ---------------------------------------------------------------------------


class LosesLastWriteOnReopen(ReferenceStore):
    """Holds the latest write in the object and puts it on disk only when the next one comes."""

    def __init__(self, disk: Disk) -> None:
        super().__init__(disk)
        self.held: LogRecord | None = None

    async def append(self, record: LogRecord) -> None:
        await asyncio.sleep(0)
        if self.held is not None:
            held, self.held = self.held, None
            self.commit(held)
        if isinstance(record, RunStarted | RunFinished):
            self.commit(record)  # keeps the refusal rules intact
            self.held = None
        else:
            self.held = record

    def records(self, run_id: str) -> list[LogRecord]:
        on_disk = super().records(run_id)
        if self.held is not None and self.held.run_id == run_id:
            on_disk.append(self.held)
        return on_disk


class LeaksBetweenRuns(ReferenceStore):
    """Batches model results in one buffer and flushes the whole batch into the writer's run."""

    def __init__(self, disk: Disk) -> None:
        super().__init__(disk)
        self.batch: list[ModelCallResult] = []

    async def write_model_call_result(self, record: ModelCallResult) -> None:
        self.batch.append(record)
        await asyncio.sleep(0)
        batch, self.batch = self.batch, []
        for pending in batch:
            # The defect: every batched record is filed under the run that flushes.
            lines = self.disk.lines.setdefault(record.run_id, [])
            lines.append(dumps_log_record(pending))


class RaisesOnUnknownRun(ReferenceStore):
    """Treats reading a run it has never seen as an error."""

    async def read_log(self, run_id: str) -> RunLog:
        if run_id not in self.disk.lines:
            raise KeyError(f"no such run: {run_id!r}")
        return await super().read_log(run_id)


class HalfWrittenStep(ReferenceStore):
    """Writes the step record first and the action result in a second, separate update."""

    async def write_step_completed(self, record: StepCompleted) -> None:
        lines = self.disk.lines.setdefault(record.run_id, [])
        lines.append(dumps_log_record(StepCompleted(record.run_id, None, None, record.step)))
        await asyncio.sleep(0.001)  # the second statement's I/O
        lines[-1] = dumps_log_record(record)


class ReordersIntents(ReferenceStore):
    """Returns intents grouped by kind: all model-call intents before any action intent."""

    async def read_log(self, run_id: str) -> RunLog:
        log = await super().read_log(run_id)
        ordered = sorted(
            log.intents, key=lambda i: (i.kind is not IntentKind.MODEL_CALL, i.call_index)
        )
        return RunLog(log.started, tuple(ordered), log.model_results, log.steps, log.finished)


class MutatesReturnedRecords(ReferenceStore):
    """Keeps the very objects it was given, hands them out, and later stamps the RunStarted."""

    def __init__(self, disk: Disk) -> None:
        super().__init__(disk)
        self.kept: dict[str, list[LogRecord]] = {}

    def commit(self, record: LogRecord) -> None:
        super().commit(record)
        self.kept.setdefault(record.run_id, []).append(record)
        if isinstance(record, RunFinished):
            for earlier in self.kept[record.run_id]:
                if isinstance(earlier, RunStarted):
                    stamped = {**earlier.parameter_snapshot, "store.finished": "yes"}
                    object.__setattr__(earlier, "parameter_snapshot", MappingProxyType(stamped))

    def records(self, run_id: str) -> list[LogRecord]:
        self.reach()
        return list(self.kept.get(run_id, []))


class HiddenCurrentRun(ReferenceStore):
    """Files every record after a RunStarted under the run started last."""

    def __init__(self, disk: Disk) -> None:
        super().__init__(disk)
        self.current: str | None = None

    def commit(self, record: LogRecord) -> None:
        if isinstance(record, RunStarted):
            self.current = record.run_id
            super().commit(record)
            return
        target = self.current if self.current is not None else record.run_id
        self.disk.lines.setdefault(target, []).append(dumps_log_record(record))


class IoInParameters(ReferenceStore):
    """Reads its version from a file every time parameters() is called."""

    VERSION_FILE = os.path.join(tempfile.gettempdir(), "polyloop-broken-store", "VERSION")

    def parameters(self) -> Mapping[str, str]:
        try:
            with open(self.VERSION_FILE, encoding="utf-8") as source:
                version = source.read().strip()
        except OSError:
            version = "unknown"
        return {"kind": "io-in-parameters", "version": version}


class NewerRunUnderOldId(ReferenceStore):
    """Keys runs by the case-folded run_id and lets a new RunStarted replace a different run."""

    def key(self, run_id: str) -> str:
        return run_id.casefold()

    def commit(self, record: LogRecord) -> None:
        if isinstance(record, RunStarted):
            lines = self.disk.lines.get(self.key(record.run_id), [])
            if lines and loads_log_record(lines[0]).run_id != record.run_id:
                self.disk.lines[self.key(record.run_id)] = []  # "a stale run": start over
        super().commit(record)


class DropsModelFailure(ReferenceStore):
    """Keeps only a generic text for a failed model call instead of the recorded failure."""

    def commit(self, record: LogRecord) -> None:
        if isinstance(record, ModelCallResult) and record.failure is not None:
            record = ModelCallResult(record.run_id, record.result_id, None, "model call failed")
        super().commit(record)


class OverwritesSecondStart(ReferenceStore):
    """Lets a second RunStarted replace the first."""

    def commit(self, record: LogRecord) -> None:
        if isinstance(record, RunStarted):
            lines = self.disk.lines.setdefault(record.run_id, [])
            kept = [line for line in lines if not isinstance(loads_log_record(line), RunStarted)]
            lines[:] = [dumps_log_record(record), *kept]
            return
        super().commit(record)


class OverwritesSecondFinish(ReferenceStore):
    """Lets a second RunFinished replace the first."""

    def commit(self, record: LogRecord) -> None:
        if isinstance(record, RunFinished):
            lines = self.disk.lines.setdefault(record.run_id, [])
            lines[:] = [
                line for line in lines if not isinstance(loads_log_record(line), RunFinished)
            ]
            lines.append(dumps_log_record(record))
            return
        super().commit(record)


class RacyStart(ReferenceStore):
    """Checks for an existing RunStarted, awaits, then writes without checking again."""

    async def write_run_started(self, record: RunStarted) -> None:
        if any(isinstance(r, RunStarted) for r in self.records(record.run_id)):
            raise RunAlreadyStartedError(f"run {record.run_id!r} is already started")
        await asyncio.sleep(0)
        lines = self.disk.lines.setdefault(record.run_id, [])
        lines.insert(0, dumps_log_record(record))


class TrustsItsOwnStartCache(ReferenceStore):
    """Remembers which runs it has seen started and checks only that, not the storage."""

    def __init__(self, disk: Disk) -> None:
        super().__init__(disk)
        self.started: set[str] = set()

    async def read_log(self, run_id: str) -> RunLog:
        log = await super().read_log(run_id)
        if log.started is not None:
            self.started.add(run_id)
        return log

    async def write_run_started(self, record: RunStarted) -> None:
        if record.run_id in self.started:
            raise RunAlreadyStartedError(f"run {record.run_id!r} is already started")
        self.started.add(record.run_id)
        await asyncio.sleep(0)
        self.disk.lines.setdefault(record.run_id, []).insert(0, dumps_log_record(record))


class RewritesTheWholeFile(ReferenceStore):
    """Loads the storage when opened and writes its whole copy back on every write."""

    def __init__(self, disk: Disk) -> None:
        super().__init__(disk)
        self.copy = {run_id: list(lines) for run_id, lines in disk.lines.items()}

    def commit(self, record: LogRecord) -> None:
        view = ReferenceStore(Disk(self.disk.lease_directory, self.copy))
        view.commit(record)
        self.disk.lines.clear()
        self.disk.lines.update({run_id: list(lines) for run_id, lines in self.copy.items()})


class NonStringParameters(ReferenceStore):
    """Reports a number as a number in parameters()."""

    def parameters(self) -> Mapping[str, str]:
        return {"kind": "non-string", "max_open_files": 256}  # type: ignore[dict-item]


class DropsDuplicateWrites(ReferenceStore):
    """Acknowledges a record written twice but stores only the first ("deduplication")."""

    def refuse_duplicate(self, record: LogRecord, decoded: list[LogRecord]) -> None:
        if isinstance(record, RunStarted | RunFinished):
            super().refuse_duplicate(record, decoded)

    def commit(self, record: LogRecord) -> None:
        lines = self.disk.lines.setdefault(record.run_id, [])
        decoded = [loads_log_record(line) for line in lines]
        self.refuse_duplicate(record, decoded)
        if not any(_key_of(r) == _key_of(record) for r in decoded):
            lines.append(dumps_log_record(record))


class MergesDuplicateWrites(ReferenceStore):
    """Lets a record written twice replace the first one, in place ("upsert")."""

    def commit(self, record: LogRecord) -> None:
        lines = self.disk.lines.setdefault(record.run_id, [])
        decoded = [loads_log_record(line) for line in lines]
        for index, earlier in enumerate(decoded):
            if _key_of(earlier) == _key_of(record) and not isinstance(
                record, RunStarted | RunFinished
            ):
                lines[index] = dumps_log_record(record)
                return
        super().commit(record)


class LeasePerStoreObject(ReferenceStore):
    """Keeps its leases in the store object: another object on the same storage ignores them."""

    def __init__(self, disk: Disk) -> None:
        super().__init__(disk)
        self.held: set[str] = set()

    async def acquire_run_lease(self, run_id: str) -> RunLease:
        if run_id in self.held:
            raise RunLeaseHeldError.held_by(run_id, LeaseHolder())
        self.held.add(run_id)
        return _ObjectLease(self, run_id)

    async def run_lease_holder(self, run_id: str) -> LeaseHolder | None:
        return LeaseHolder() if run_id in self.held else None


class _ObjectLease:
    def __init__(self, store: LeasePerStoreObject, run_id: str) -> None:
        self.store = store
        self._run_id = run_id

    @property
    def run_id(self) -> str:
        return self._run_id

    async def release(self) -> None:
        self.store.held.discard(self._run_id)


class ReleaseKeepsLease(ReferenceStore):
    """``release()`` only forgets the handle; the lock stays until the store is closed."""

    async def acquire_run_lease(self, run_id: str) -> RunLease:
        await super().acquire_run_lease(run_id)  # held until close()
        return _ForgetfulLease(run_id)


class _ForgetfulLease:
    def __init__(self, run_id: str) -> None:
        self._run_id = run_id

    @property
    def run_id(self) -> str:
        return self._run_id

    async def release(self) -> None:
        return None


class CloseKeepsLeases(ReferenceStore):
    """``close()`` closes nothing: the leases it held stay taken."""

    def close(self) -> None:
        return None


class PidFileLease(ReferenceStore):
    """A lease is a pid file created with O_EXCL and deleted on release: a killed holder's
    file stays behind, and with it the lease."""

    async def acquire_run_lease(self, run_id: str) -> RunLease:
        self.reach()
        os.makedirs(self.disk.lease_directory, exist_ok=True)
        try:
            fd = os.open(self.lease_path(run_id), os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        except FileExistsError:
            raise RunLeaseHeldError.held_by(run_id, LeaseHolder()) from None
        os.write(fd, str(os.getpid()).encode())
        os.close(fd)
        return _PidFileLease(self.lease_path(run_id), run_id)

    async def run_lease_holder(self, run_id: str) -> LeaseHolder | None:
        return LeaseHolder() if _exists(self.lease_path(run_id)) else None


def _exists(path: str) -> bool:
    return os.path.exists(path)


class _PidFileLease:
    def __init__(self, path: str, run_id: str) -> None:
        self.path = path
        self._run_id = run_id

    @property
    def run_id(self) -> str:
        return self._run_id

    async def release(self) -> None:
        if _exists(self.path):
            os.remove(self.path)


class TruncatesLongText(ReferenceStore):
    """Keeps observations in a 64 KiB text column: a longer one is cut to 65 535 characters."""

    LIMIT = 65_535

    def commit(self, record: LogRecord) -> None:
        if isinstance(record, StepCompleted):
            step = replace(record.step, observation=record.step.observation[: self.LIMIT])
            outcome = record.action_outcome
            if outcome is not None:
                outcome = replace(outcome, observation=outcome.observation[: self.LIMIT])
            record = StepCompleted(record.run_id, record.result_id, outcome, step)
        super().commit(record)


class StaleReadCache(ReferenceStore):
    """Caches each log it has read in the store object; only its own writes refresh it, so a
    write made through another object on the same storage stays unseen."""

    def __init__(self, disk: Disk) -> None:
        super().__init__(disk)
        self.cache: dict[str, RunLog] = {}

    async def append(self, record: LogRecord) -> None:
        await super().append(record)
        self.cache.pop(record.run_id, None)

    async def read_log(self, run_id: str) -> RunLog:
        if run_id not in self.cache:
            self.cache[run_id] = await super().read_log(run_id)
        return self.cache[run_id]


class PasswordInConnectionUrl(ReferenceStore):
    """Reports the URL it connects with, password included, as its database."""

    def parameters(self) -> Mapping[str, str]:
        return {"kind": "reference", "database": "postgresql://polyloop:hunter2@db.internal/runs"}


class PasswordInConnectionString(ReferenceStore):
    """Reports its libpq connection string, password included."""

    def parameters(self) -> Mapping[str, str]:
        return {"kind": "reference", "dsn": "host=db.internal dbname=runs password=hunter2"}


class PasswordInErrorContext(ReferenceStore):
    """Raises its StoreError with ``from None`` inside the except block: the message is
    clean, but the driver's error, password and all, stays attached as ``__context__``."""

    def reach(self) -> None:
        if self.disk.refuses is None:
            return
        try:
            _connect(self.disk.refuses)
        except DriverError as error:
            raise StoreError(f"cannot connect to db.internal ({error})") from None


class NamesItsLocation(ReferenceStore):
    """Reports where its logs live, so a copy of its storage elsewhere cannot resume a run."""

    def parameters(self) -> Mapping[str, str]:
        return {"kind": "reference", "directory": self.disk.lease_directory}


class TruncatesLongRunIds(ReferenceStore):
    """Keys runs by the first 255 characters of their run_id (a VARCHAR(255) column)."""

    def key(self, run_id: str) -> str:
        return run_id[:255]


class KeepsOnlyTheLastStep(ReferenceStore):
    """Keeps one StepCompleted per run, the latest ("upsert the run's current step")."""

    def commit(self, record: LogRecord) -> None:
        if isinstance(record, StepCompleted):
            lines = self.disk.lines.setdefault(record.run_id, [])
            lines[:] = [
                line for line in lines if not isinstance(loads_log_record(line), StepCompleted)
            ]
            lines.append(dumps_log_record(record))
            return
        super().commit(record)


class TwoDefects(DropsModelFailure):
    """Two unrelated defects: the failure text of a model call is lost, and a second
    RunFinished is refused with ValueError instead of RunAlreadyStartedError."""

    def refuse_duplicate(self, record: LogRecord, decoded: list[LogRecord]) -> None:
        if isinstance(record, RunFinished) and any(isinstance(r, RunFinished) for r in decoded):
            raise ValueError(f"run {record.run_id!r} has a result already")
        super().refuse_duplicate(record, decoded)


class SecondDecisionWins(ReferenceStore):
    """Keeps every decision written for an ask: a run could act twice on one ask."""

    def refuse_duplicate(self, record: LogRecord, decoded: list[LogRecord]) -> None:
        if isinstance(record, UserAnswered):
            return
        super().refuse_duplicate(record, decoded)


class AsksKeyedByContent(ReferenceStore):
    """Keys asks and decisions by their arguments' digest instead of their step: the same call
    asked about twice is refused as a duplicate, and a decision could stand for either ask."""

    def refuse_duplicate(self, record: LogRecord, decoded: list[LogRecord]) -> None:
        if isinstance(record, UserAsked | UserAnswered):
            for earlier in decoded:
                if (
                    type(earlier) is type(record)
                    and isinstance(earlier, UserAsked | UserAnswered)
                    and earlier.arguments_sha256 == record.arguments_sha256
                ):
                    raise DuplicateRecordError(f"run {record.run_id!r} already has this ask")
            return
        super().refuse_duplicate(record, decoded)


class BatchStoresUpToARefusal(ReferenceStore):
    """Writes a batch record by record: a refused record leaves the ones before it stored."""

    async def write_records(self, records: Sequence[LogRecord]) -> None:
        await asyncio.sleep(0)
        for record in records:
            self.commit(record)


class BatchFiledUnderItsFirstRun(ReferenceStore):
    """Files a whole batch under the run of its first record, whatever run the others are of."""

    async def write_records(self, records: Sequence[LogRecord]) -> None:
        await asyncio.sleep(0)
        first = records[0].run_id if records else ""
        decoded = [loads_log_record(line) for line in self.disk.lines.get(first, [])]
        for number, record in enumerate(records):
            self.refuse_duplicate(record, decoded + list(records[:number]))
        for record in records:
            self.disk.lines.setdefault(first, []).append(dumps_log_record(record))


class WithoutLeases(ReferenceStore):
    """A correct store that does not offer the lease capability at all."""

    acquire_run_lease = None  # type: ignore[assignment]
    run_lease_holder = None  # type: ignore[assignment]


#: Every store the kit is run against: the correct reference and the broken ones.
STORES: Mapping[str, type[ReferenceStore]] = {
    "reference": ReferenceStore,
    "reference_without_leases": WithoutLeases,
    "drops_duplicate_writes": DropsDuplicateWrites,
    "merges_duplicate_writes": MergesDuplicateWrites,
    "lease_per_store_object": LeasePerStoreObject,
    "release_keeps_lease": ReleaseKeepsLease,
    "close_keeps_leases": CloseKeepsLeases,
    "pid_file_lease": PidFileLease,
    "loses_last_write_on_reopen": LosesLastWriteOnReopen,
    "leaks_between_runs": LeaksBetweenRuns,
    "raises_on_unknown_run": RaisesOnUnknownRun,
    "half_written_step": HalfWrittenStep,
    "reorders_intents": ReordersIntents,
    "mutates_returned_records": MutatesReturnedRecords,
    "hidden_current_run": HiddenCurrentRun,
    "io_in_parameters": IoInParameters,
    "newer_run_under_old_id": NewerRunUnderOldId,
    "drops_model_failure": DropsModelFailure,
    "overwrites_second_start": OverwritesSecondStart,
    "overwrites_second_finish": OverwritesSecondFinish,
    "racy_start": RacyStart,
    "non_string_parameters": NonStringParameters,
    "trusts_its_own_start_cache": TrustsItsOwnStartCache,
    "rewrites_the_whole_file": RewritesTheWholeFile,
    "truncates_long_text": TruncatesLongText,
    "stale_read_cache": StaleReadCache,
    "password_in_connection_url": PasswordInConnectionUrl,
    "password_in_connection_string": PasswordInConnectionString,
    "password_in_error_context": PasswordInErrorContext,
    "names_its_location": NamesItsLocation,
    "truncates_long_run_ids": TruncatesLongRunIds,
    "keeps_only_the_last_step": KeepsOnlyTheLastStep,
    "two_defects": TwoDefects,
    "second_decision_wins": SecondDecisionWins,
    "asks_keyed_by_content": AsksKeyedByContent,
    "batch_stores_up_to_a_refusal": BatchStoresUpToARefusal,
    "batch_filed_under_its_first_run": BatchFiledUnderItsFirstRun,
}


@dataclass(frozen=True)
class Expected:
    """The suite test that must fail for a broken store, and the rule its message must name."""

    test: str
    rule: str
    #: Text the failure message must also hold (how it says what it saw).
    says: tuple[str, ...] = ()


#: Broken stores the stateful test (random interleavings against a model) must also catch.
CAUGHT_BY_STATEFUL: tuple[str, ...] = (
    "hidden_current_run",
    "loses_last_write_on_reopen",
    "mutates_returned_records",
)

#: Broken stores with several defects, each of which the stateful test must report by its rule.
REPORTED_AS_SEVERAL: tuple[str, ...] = ("two_defects",)

#: Correct stores, which must pass every rule that applies to them.
CORRECT: tuple[str, ...] = ("reference", "reference_without_leases")

#: Stores the kit runs its killed-holder rule on (each costs a child process).
CHILD_OPENED: tuple[str, ...] = ("reference", "pid_file_lease")

#: For each broken store: the rule that catches it.
CAUGHT_BY: Mapping[str, Expected] = {
    "drops_duplicate_writes": Expected(
        "run_store::test_duplicate_writes_are_never_dropped_or_merged[model_intent]",
        "duplicate writes are never dropped or merged",
    ),
    "merges_duplicate_writes": Expected(
        "run_store::test_duplicate_writes_are_never_dropped_or_merged[step]",
        "duplicate writes are never dropped or merged",
    ),
    "second_decision_wins": Expected(
        "run_store_user_asking::test_a_second_decision_for_one_ask_is_refused",
        "a decision is given once",
    ),
    "asks_keyed_by_content": Expected(
        "run_store_user_asking::test_alike_asks_of_two_steps_stay_two_asks",
        "an ask is named by its step",
    ),
    "batch_stores_up_to_a_refusal": Expected(
        "run_store_record_batching::test_a_refused_record_stores_none_of_its_batch",
        "a refused record stores none of its batch",
    ),
    "batch_filed_under_its_first_run": Expected(
        "run_store_record_batching::test_records_of_two_runs_are_refused",
        "a batch is of one run",
    ),
    "lease_per_store_object": Expected(
        "run_store_leases::test_a_held_lease_is_refused_to_a_second_store_object",
        "a held lease is refused to a second store object on the same storage",
    ),
    "release_keeps_lease": Expected(
        "run_store_leases::test_a_lease_is_free_again_after_release",
        "a lease is free again after release",
    ),
    "close_keeps_leases": Expected(
        "run_store_leases::test_a_lease_is_free_again_after_its_store_is_closed",
        "a lease is free again after close",
    ),
    "pid_file_lease": Expected(
        "run_store_leases::test_a_lease_is_free_within_a_second_after_its_holder_is_killed",
        "a lease is free within one second after its holder is SIGKILLed",
    ),
    "loses_last_write_on_reopen": Expected(
        "run_store::test_prefix_durability_across_reopen", "prefix durability"
    ),
    "leaks_between_runs": Expected(
        "run_store::test_runs_isolated_under_concurrency", "runs isolated"
    ),
    "raises_on_unknown_run": Expected(
        "run_store::test_unknown_run_reads_as_empty_log", "unknown run reads as empty"
    ),
    "half_written_step": Expected(
        "run_store::test_step_completed_atomic_for_readers", "write_step_completed is atomic"
    ),
    "reorders_intents": Expected("run_store::test_write_order_kept", "write order kept"),
    "mutates_returned_records": Expected(
        "run_store::test_records_never_alias", "records never alias"
    ),
    "hidden_current_run": Expected(
        "run_store::test_no_hidden_current_run", "no hidden current run"
    ),
    "io_in_parameters": Expected(
        "run_store::test_parameters_do_no_io_and_are_cheap", "parameters() does no I/O"
    ),
    "newer_run_under_old_id": Expected(
        "run_store::test_lookalike_run_ids_never_collide", "distinct run_ids never collide"
    ),
    "drops_model_failure": Expected(
        "run_store::test_records_round_trip_exactly[model_result_failure]",
        "records round-trip exactly",
    ),
    "overwrites_second_start": Expected(
        "run_store::test_second_run_started_refused", "second RunStarted refused"
    ),
    "overwrites_second_finish": Expected(
        "run_store::test_second_run_finished_refused", "second RunFinished refused"
    ),
    "racy_start": Expected(
        "run_store::test_racing_starts_have_one_winner", "racing starts have one winner"
    ),
    "trusts_its_own_start_cache": Expected(
        "run_store::test_racing_starts_across_store_objects_have_one_winner",
        "racing starts have one winner",
    ),
    "rewrites_the_whole_file": Expected(
        "run_store::test_two_store_objects_keep_each_others_writes",
        "store objects sharing storage keep each other's writes",
    ),
    "non_string_parameters": Expected(
        "run_store::test_parameters_are_synchronous_and_str_valued",
        "parameters() is synchronous and str-valued",
    ),
    "truncates_long_text": Expected(
        "run_store::test_records_round_trip_exactly[step_completed_long_observation]",
        "records round-trip exactly",
        says=("field observation is", "(65535 characters) instead of", "(87500 characters)"),
    ),
    "stale_read_cache": Expected(
        "run_store::test_a_write_is_seen_at_once_through_another_store_object",
        "a write is seen at once through every store object on the storage",
    ),
    "password_in_connection_url": Expected(
        "run_store::test_parameters_are_stable_and_hold_no_secrets",
        "parameters() holds no secrets",
        says=("carries a password (URL userinfo)",),
    ),
    "password_in_connection_string": Expected(
        "run_store::test_parameters_are_stable_and_hold_no_secrets",
        "parameters() holds no secrets",
        says=("carries a password (password=)",),
    ),
    "password_in_error_context": Expected(
        "run_store::test_errors_hold_no_secrets",
        "errors hold no secrets",
        says=("in the error.__context__ (DriverError)",),
    ),
    "names_its_location": Expected(
        "run_store::test_parameters_name_no_location",
        "parameters() name no location",
        says=("report different parameters 'directory'",),
    ),
    "truncates_long_run_ids": Expected(
        "run_store::test_exotic_run_ids_never_collide",
        "distinct run_ids never collide",
        says=("(10000 characters)",),
    ),
    "keeps_only_the_last_step": Expected(
        "run_store::test_write_order_kept", "write order kept", says=("1 of 12 steps read back",)
    ),
    "two_defects": Expected(
        "run_store::test_records_round_trip_exactly[model_result_failure]",
        "records round-trip exactly",
    ),
}
