"""Run leases and duplicate refusal at the store level (memory, jsonl, sqlite; real files)."""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import json
import os
import re
import socket
import sqlite3
import subprocess
import sys
import threading
from typing import Any

import pytest

from polyloop.errors import CorruptLogError, DuplicateRecordError, RunLeaseHeldError
from polyloop.ports import LeaseHolder, RunLease, RunLeasing, RunStore
from polyloop.stores.jsonl import JsonlRunStore
from polyloop.stores.sqlite import SqliteRunStore
from polyloop.types import IntentKind
from tests.stores._helpers import (
    DURABLE_KINDS,
    FILE_KINDS,
    Opened,
    close_store,
    expected_log,
    intent,
    model_result,
    open_store,
    read_bytes,
    started,
    step_completed,
    storage_entries,
    write_bytes,
    write_run,
)
from tests.stores._procs import ROOT

ISO_UTC = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ$")


def _leasing(store: RunStore) -> RunLeasing:
    assert isinstance(store, RunLeasing)
    return store


def _this_process(holder: LeaseHolder | None) -> None:
    assert holder is not None
    assert (os.getpid(), socket.gethostname()) == (holder.process_id, holder.host_name)
    assert holder.acquired_at is not None
    assert ISO_UTC.match(holder.acquired_at)


# ---------------------------------------------------------------------------
# Leases
# ---------------------------------------------------------------------------


def test_every_store_offers_run_leases(opened: Opened) -> None:
    """All three shipped stores implement the optional RunLeasing capability."""
    assert isinstance(opened.store, RunLeasing)


async def test_a_held_lease_is_refused_to_a_second_taker_naming_the_holder(
    opened: Opened,
) -> None:
    """While held, the lease is refused to the same store object and to another one on the
    same storage, and the refusal names this process as the holder."""
    store = _leasing(opened.store)
    lease = await store.acquire_run_lease("r")
    assert "r" == lease.run_id
    others = [store] if opened.kind == "memory" else [store, _leasing(opened.reopen())]
    for other in others:
        with pytest.raises(
            RunLeaseHeldError, match=f"Run 'r' is being driven.*{os.getpid()}"
        ) as refused:
            await other.acquire_run_lease("r")
        assert "r" == refused.value.run_id
        _this_process(refused.value.holder)
        _this_process(await other.run_lease_holder("r"))
    # Other runs are not affected.
    await (await store.acquire_run_lease("other")).release()
    await lease.release()


async def test_a_lease_is_free_again_after_release_and_release_is_idempotent(
    opened: Opened,
) -> None:
    """After release nobody holds it, a second release does nothing, and it can be taken again
    (by another store object on the same storage, where there is one)."""
    store = _leasing(opened.store)
    lease = await store.acquire_run_lease("r")
    await lease.release()
    await lease.release()
    assert await store.run_lease_holder("r") is None
    taker = store if opened.kind == "memory" else _leasing(opened.reopen())
    again = await taker.acquire_run_lease("r")
    await lease.release()  # the old handle must not give back the new holder's lease
    _this_process(await store.run_lease_holder("r"))
    await again.release()


@pytest.mark.parametrize("kind", DURABLE_KINDS)
async def test_closing_a_store_gives_its_leases_back(kind: str, tmp_path: object) -> None:
    """close() releases every lease the store object holds; releasing the handle afterwards is
    harmless."""
    first = _leasing(open_store(kind, str(tmp_path)))
    second = _leasing(open_store(kind, str(tmp_path)))
    try:
        lease = await first.acquire_run_lease("r")
        await close_store(first)
        assert await second.run_lease_holder("r") is None
        await (await second.acquire_run_lease("r")).release()
        await lease.release()
    finally:
        await close_store(second)


@pytest.mark.parametrize("kind", DURABLE_KINDS)
async def test_looking_at_a_lease_creates_nothing(kind: str, tmp_path: object) -> None:
    """run_lease_holder of a run never leased answers None and creates no file or directory."""
    before = storage_entries(str(tmp_path))
    store = _leasing(open_store(kind, str(tmp_path)))
    try:
        assert await store.run_lease_holder("never") is None
    finally:
        await close_store(store)
    assert before == storage_entries(str(tmp_path))


@pytest.mark.parametrize("kind", DURABLE_KINDS)
async def test_looking_never_makes_a_taker_fail(kind: str, tmp_path: object) -> None:
    """Another store object looking at the lease all the time never makes taking it fail (a
    look takes nothing, and never disturbs this process's own lock)."""
    taker = _leasing(open_store(kind, str(tmp_path)))
    looker = _leasing(open_store(kind, str(tmp_path)))
    done = asyncio.Event()
    looks = 0

    async def look() -> None:
        nonlocal looks
        while not done.is_set():
            await looker.run_lease_holder("r")
            looks += 1

    lookers = [asyncio.create_task(look()) for _ in range(3)]
    try:
        for _ in range(150):
            lease = await taker.acquire_run_lease("r")
            # ... and while it is held, another process would be refused: the lock is intact.
            assert os.getpid() == (await looker.run_lease_holder("r") or LeaseHolder()).process_id
            await lease.release()
    finally:
        done.set()
        await asyncio.gather(*lookers)
        await close_store(taker)
        await close_store(looker)
    assert looks > 0


def _lease_descriptors() -> list[int]:
    found = []
    for name in os.listdir("/proc/self/fd"):
        try:
            if os.readlink(f"/proc/self/fd/{name}").endswith(".lease"):
                found.append(int(name))
        except OSError:
            continue
    return found


@pytest.mark.parametrize("kind", FILE_KINDS)
async def test_lease_files_are_closed_on_exec(kind: str, tmp_path: object) -> None:
    """The one descriptor of a held lease file is close-on-exec, and goes on release."""
    store = _leasing(open_store(kind, str(tmp_path)))
    try:
        lease = await store.acquire_run_lease("r")
        descriptors = _lease_descriptors()
        assert 1 == len(descriptors)
        assert fcntl.fcntl(descriptors[0], fcntl.F_GETFD) & fcntl.FD_CLOEXEC
        await lease.release()
        assert [] == _lease_descriptors()
    finally:
        await close_store(store)


@pytest.mark.parametrize("kind", FILE_KINDS)
def test_a_forked_child_holds_none_of_its_parents_leases(kind: str, tmp_path: object) -> None:
    """After a plain fork of a process holding a lease, the child is refused the lease (the
    parent holds it, named by the kernel) and cannot give it back by closing what it inherited.

    Synchronous on purpose: the fork must not happen inside a running event loop."""
    where = str(tmp_path)
    store = _leasing(open_store(kind, where))
    lease = asyncio.run(store.acquire_run_lease("r"))
    try:
        report = _fork_and_report(kind, where)
        assert {"refused_by": os.getpid(), "seen_holder": os.getpid()} == report
        _this_process(asyncio.run(store.run_lease_holder("r")))
        assert [] != _lease_descriptors()  # the parent's own descriptor is untouched
    finally:
        asyncio.run(lease.release())
        asyncio.run(close_store(store))


def _fork_and_report(kind: str, where: str) -> dict[str, Any]:
    """Fork; in the child, close every inherited lease descriptor, then try to take and look
    at the lease with a new store object; report what happened through a pipe."""
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - runs in the child
        code = 1
        try:
            os.close(read_end)
            for fd in _lease_descriptors():
                os.close(fd)  # harmless: a child holds none of its parent's record locks
            report = asyncio.run(_child_attempt(kind, where))
            os.write(write_end, json.dumps(report).encode())
            code = 0
        finally:
            os._exit(code)
    os.close(write_end)
    with os.fdopen(read_end, "rb") as pipe:
        data = pipe.read()
    _pid, status = os.waitpid(pid, 0)
    assert 0 == os.waitstatus_to_exitcode(status), data
    result: dict[str, Any] = json.loads(data)
    return result


async def _child_attempt(kind: str, where: str) -> dict[str, Any]:  # pragma: no cover - child
    store = _leasing(open_store(kind, where))
    try:
        try:
            await store.acquire_run_lease("r")
        except RunLeaseHeldError as refused:
            refused_by = refused.holder.process_id if refused.holder else None
        else:
            refused_by = None
        seen = await store.run_lease_holder("r")
        return {"refused_by": refused_by, "seen_holder": seen.process_id if seen else None}
    finally:
        await close_store(store)


@pytest.mark.race
async def test_memory_leases_exclude_threads_with_their_own_event_loops() -> None:
    """Eight threads, each running its own event loop, race for one run's lease on one memory
    store: exactly one gets it."""
    from polyloop.stores.memory import MemoryRunStore

    store = MemoryRunStore()
    barrier = threading.Barrier(8)
    won: list[RunLease] = []

    def contend() -> None:
        barrier.wait()

        async def attempt() -> None:
            with contextlib.suppress(RunLeaseHeldError):
                won.append(await store.acquire_run_lease("r"))

        asyncio.run(attempt())

    threads = [threading.Thread(target=contend) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert 1 == len(won)
    await won[0].release()
    assert await store.run_lease_holder("r") is None


# ---------------------------------------------------------------------------
# The jsonl writer trusts its view only under the lease
# ---------------------------------------------------------------------------


def _count_exclusive_flocks(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    calls: list[int] = []
    real = fcntl.flock

    def counting(fd: int, operation: int) -> None:
        if operation == fcntl.LOCK_EX:
            calls.append(fd)
        real(fd, operation)

    monkeypatch.setattr(fcntl, "flock", counting)
    return calls


async def test_jsonl_writes_under_the_lease_skip_the_per_write_flock(
    tmp_path: object, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The lease holder's writes after its read take no flock; writes without the lease each
    take one (they must look at the file again)."""
    store = JsonlRunStore(os.path.join(str(tmp_path), "runs"))
    try:
        flocks = _count_exclusive_flocks(monkeypatch)
        lease = await store.acquire_run_lease("held")
        await store.read_log("held")
        await write_run(store, "held", 3)
        await lease.release()
        assert [] == flocks
        await write_run(store, "free", 3)
        assert 1 + 3 * 4 + 1 == len(flocks)
        assert expected_log("held", 3) == await store.read_log("held")
        assert expected_log("free", 3) == await store.read_log("free")
    finally:
        store.close()


async def test_jsonl_lease_holder_keeps_its_view_when_its_file_is_closed_for_space(
    tmp_path: object, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With more leased runs than max_open_files, files are closed and reopened as needed, the
    holder's writes still take no flock (nothing is read again), and every log is whole."""
    store = JsonlRunStore(os.path.join(str(tmp_path), "runs"), max_open_files=2)
    try:
        flocks = _count_exclusive_flocks(monkeypatch)
        run_ids = [f"many-{n}" for n in range(5)]
        leases = [await store.acquire_run_lease(run_id) for run_id in run_ids]
        for run_id in run_ids:
            await store.read_log(run_id)
        await asyncio.gather(*(write_run(store, run_id, 3) for run_id in run_ids))
        assert [] == flocks
        for lease in leases:
            await lease.release()
        for run_id in run_ids:
            assert expected_log(run_id, 3) == await store.read_log(run_id)
        await write_run(store, "after", 1, finish=False)
        assert ["after"] == list(store._files)  # finished runs are forgotten
    finally:
        store.close()


async def test_jsonl_view_is_taken_again_with_each_lease(tmp_path: object) -> None:
    """Two store objects take turns driving one run; each sees what the other wrote, and none
    writes over it (a fresh lease makes the writer's cached view of the file stale)."""
    directory = os.path.join(str(tmp_path), "runs")
    first, second = JsonlRunStore(directory), JsonlRunStore(directory)
    records = [
        started("turns"),
        intent("turns", IntentKind.MODEL_CALL, 0),
        model_result("turns", 0),
        intent("turns", IntentKind.ACTION, 0),
        step_completed("turns", 0),
        intent("turns", IntentKind.MODEL_CALL, 1),
    ]
    writers = [first, second, first, second, first, second]
    try:
        for store, record in zip(writers, records, strict=True):
            lease = await store.acquire_run_lease("turns")
            await store.read_log("turns")
            await _write(store, record)
            await lease.release()
        log = await JsonlRunStore(directory).read_log("turns")
        assert (records[0], records[1:2] + records[3:4] + records[5:], records[2:3]) == (
            log.started,
            list(log.intents),
            list(log.model_results),
        )
    finally:
        first.close()
        second.close()


async def _write(store: RunStore, record: Any) -> None:
    method = {
        "RunStarted": store.write_run_started,
        "Intent": store.write_intent,
        "ModelCallResult": store.write_model_call_result,
        "StepCompleted": store.write_step_completed,
    }[type(record).__name__]
    await method(record)


async def test_jsonl_lease_holder_cuts_a_torn_tail_before_appending(tmp_path: object) -> None:
    """A torn last line left by a crash is cut off by the lease holder's first write."""
    directory = os.path.join(str(tmp_path), "runs")
    store = JsonlRunStore(directory)
    try:
        await write_run(store, "torn", 2, finish=False)
        write_bytes(store.path_for("torn"), b'{"type":"intent","record":{"run_id":"to', append=True)
        lease = await store.acquire_run_lease("torn")
        assert expected_log("torn", 2, finish=False) == await store.read_log("torn")
        await store.write_intent(intent("torn", IntentKind.MODEL_CALL, 2))
        await lease.release()
        assert read_bytes(store.path_for("torn")).endswith(b'"replay_policy":"safe"}}\n')
        log = await JsonlRunStore(directory).read_log("torn")
        assert intent("torn", IntentKind.MODEL_CALL, 2) == log.intents[-1]
    finally:
        store.close()


# ---------------------------------------------------------------------------
# Duplicates are refused, never dropped or kept
# ---------------------------------------------------------------------------

DUPLICATES = {
    "intent": lambda: intent("d", IntentKind.ACTION, 0),
    "model_result": lambda: model_result("d", 0, failed=True),
    "step": lambda: step_completed("d", 0, observation="another observation"),
}


@pytest.mark.parametrize("what", sorted(DUPLICATES))
async def test_a_second_record_of_one_key_is_refused_and_nothing_changes(
    opened: Opened, what: str
) -> None:
    """A second intent of a (kind, result_id), result of a result_id or step of an index is
    refused with DuplicateRecordError naming the run and record, on this store object and on
    another one on the same storage; the log is unchanged."""
    await write_run(opened.store, "d", 2, finish=False)
    stores = [opened.store] if opened.kind == "memory" else [opened.store, opened.reopen()]
    for store in stores:
        with pytest.raises(DuplicateRecordError, match=r"Run 'd' already has an? .*second one"):
            await _write(store, DUPLICATES[what]())
    assert expected_log("d", 2, finish=False) == await opened.store.read_log("d")


async def test_jsonl_reader_refuses_a_record_stored_twice(tmp_path: object) -> None:
    """A file holding one record twice (e.g. two drivers before leases existed) reads as
    corrupt, naming both lines."""
    store = JsonlRunStore(os.path.join(str(tmp_path), "runs"))
    try:
        await write_run(store, "twice", 1, finish=False)
        lines = read_bytes(store.path_for("twice")).splitlines(keepends=True)
        write_bytes(store.path_for("twice"), lines[1], append=True)  # step 0's model intent
        with pytest.raises(
            CorruptLogError,
            match=r"line 6: a second model_call intent with result_id 'model-0'.*line 2",
        ):
            await store.read_log("twice")
    finally:
        store.close()


# ---------------------------------------------------------------------------
# SQLite schema 1.0 -> 1.1
# ---------------------------------------------------------------------------

#: The layout of schema 1.0, as the previous release created it.
SCHEMA_1_0 = (
    "CREATE TABLE polyloop_schema (id INTEGER PRIMARY KEY CHECK (id = 1), "
    "major INTEGER NOT NULL, minor INTEGER NOT NULL)",
    "CREATE TABLE run_records (seq INTEGER PRIMARY KEY, run_id TEXT NOT NULL, "
    "kind TEXT NOT NULL, body TEXT NOT NULL)",
    "CREATE INDEX run_records_by_run ON run_records (run_id, seq)",
    "CREATE UNIQUE INDEX run_records_one_started ON run_records (run_id) "
    "WHERE kind = 'run_started'",
    "CREATE UNIQUE INDEX run_records_one_finished ON run_records (run_id) "
    "WHERE kind = 'run_finished'",
    "INSERT INTO polyloop_schema (id, major, minor) VALUES (1, 1, 0)",
)


async def _old_file(path: str) -> None:
    """A schema-1.0 database holding run 'clean' and run 'doubled', whose action intent of
    step 0 was written twice (as two drivers did before leases)."""
    connection = sqlite3.connect(path, isolation_level=None)
    try:
        connection.execute("PRAGMA journal_mode = WAL")
        for statement in SCHEMA_1_0:
            connection.execute(statement)
    finally:
        connection.close()
    memory = open_store("memory", "")
    for run_id in ("clean", "doubled"):
        await write_run(memory, run_id, 2, finish=False)
    from polyloop.serialization import dumps_log_record, log_record_tag

    rows = []
    for run_id in ("clean", "doubled"):
        log = await memory.read_log(run_id)
        records: list[Any] = [log.started]
        for k, completed in enumerate(log.steps):  # in the order the loop writes them
            records += [log.intents[2 * k], log.model_results[k], log.intents[2 * k + 1], completed]
        if run_id == "doubled":
            records.append(log.intents[1])
        rows += [(run_id, log_record_tag(r), dumps_log_record(r)) for r in records]
    connection = sqlite3.connect(path, isolation_level=None)
    try:
        connection.executemany(
            "INSERT INTO run_records (run_id, kind, body) VALUES (?, ?, ?)", rows
        )
    finally:
        connection.close()


def _schema(path: str) -> tuple[Any, ...]:
    connection = sqlite3.connect(path)
    try:
        version = connection.execute("SELECT major, minor FROM polyloop_schema").fetchone()
        index = connection.execute(
            "SELECT COUNT(*) FROM sqlite_master WHERE name = 'run_records_one_key'"
        ).fetchone()[0]
        nulls = connection.execute(
            "SELECT run_id, COUNT(*) FROM run_records WHERE record_key IS NULL "
            "AND kind NOT IN ('run_started', 'run_finished') GROUP BY run_id"
        ).fetchall()
    finally:
        connection.close()
    return version, index, nulls


async def test_sqlite_migrates_a_1_0_file_and_reports_old_duplicates_as_corruption(
    tmp_path: object,
) -> None:
    """Opening a schema-1.0 file adds the key column and its unique index (schema 1.1); rows
    that already repeat a record keep no key, and their run reads as corrupt naming both rows,
    never as a raw IntegrityError; other runs read and refuse duplicates as usual."""
    path = os.path.join(str(tmp_path), "old.db")
    await _old_file(path)
    async with SqliteRunStore(path) as store:
        assert ((1, 1), 1, [("doubled", 2)]) == _schema(path)
        clean = await store.read_log("clean")
        assert expected_log("clean", 2, finish=False).intents == clean.intents
        with pytest.raises(
            CorruptLogError,
            match=r"run_records seq \d+: a second action intent with result_id 'action-0'"
            r".*for run 'doubled' \(the first is at run_records seq \d+\)",
        ):
            await store.read_log("doubled")
        with pytest.raises(DuplicateRecordError, match="Run 'clean' already has a"):
            await store.write_intent(clean.intents[0])
        await store.write_intent(intent("clean", IntentKind.MODEL_CALL, 2))


@pytest.mark.race
def test_several_processes_opening_a_1_0_file_at_once_migrate_it_once(tmp_path: object) -> None:
    """Four processes open one schema-1.0 file at the same moment: all succeed, and the file
    ends at schema 1.1 with one key per record."""
    path = os.path.join(str(tmp_path), "old.db")
    asyncio.run(_old_file(path))
    script = (
        "import asyncio, sys\n"
        "from polyloop.stores.sqlite import SqliteRunStore\n"
        "sys.stdin.readline()\n"
        "async def main():\n"
        "    async with SqliteRunStore(sys.argv[1]) as store:\n"
        "        await store.read_log('clean')\n"
        "asyncio.run(main())\n"
    )
    openers = [
        subprocess.Popen(
            [sys.executable, "-c", script, path],
            cwd=ROOT,
            stdin=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(4)
    ]
    for opener in openers:
        assert opener.stdin is not None
        opener.stdin.write("go\n")
        opener.stdin.flush()
    for opener in openers:
        _out, err = opener.communicate(timeout=60)
        assert 0 == opener.returncode, err
    assert ((1, 1), 1, [("doubled", 2)]) == _schema(path)
