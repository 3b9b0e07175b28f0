"""Run leases of the PostgreSQL store: who holds them, when the server frees them, and fencing
(a store that lost its lease's session never writes that run again).

Leases are session advisory locks of the store's writing session (design 0030). These tests
run against the real server of ``POLYLOOP_TEST_POSTGRES_URL`` and kill real processes.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable

import pytest

from polyloop.errors import ConfigurationError, LeaseLostError, RunLeaseHeldError, StoreError
from polyloop.ports import LeaseHolder, RunLease, RunLog
from polyloop.stores.postgres import PostgresRunStore
from polyloop.stores.postgres._lease import lease_lock_key
from polyloop.stores.postgres._store import _run_key
from polyloop.types import IntentKind
from tests.stores._helpers import intent, started, write_run
from tests.stores._postgres import ROOT, admin, open_postgres_store, schema_for

pytestmark = pytest.mark.server


def _holder_process(schema: str, run_id: str, command: str = "hold") -> subprocess.Popen[str]:
    """A child process holding the lease of ``run_id`` (it prints ``held`` once it does)."""
    process = subprocess.Popen(
        [sys.executable, "-m", "tests.stores._postgres_child", command, schema, run_id],
        cwd=ROOT,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert process.stdout is not None
    line = process.stdout.readline().strip()
    assert line.startswith("held"), process.stderr.read() if process.stderr else line
    process.held_line = line  # type: ignore[attr-defined]
    return process


def _reap(process: subprocess.Popen[str]) -> None:
    process.wait(timeout=30)
    for stream in (process.stdin, process.stdout, process.stderr):
        if stream is not None:
            stream.close()


def _end_session_holding(schema: str, run_id: str) -> int:
    """End (pg_terminate_backend, waiting for it) the server session holding a run's lock."""
    key = lease_lock_key(schema, _run_key(run_id) or b"")
    with admin() as connection:
        row = connection.execute(
            "SELECT pid, pg_terminate_backend(pid, 5000) FROM pg_locks WHERE locktype = "
            "'advisory' AND granted AND objsubid = 2 AND classid = %s::oid AND objid = %s::oid",
            (key[0] & 0xFFFFFFFF, key[1] & 0xFFFFFFFF),
        ).fetchone()
    assert row is not None, "no session held that lock"
    assert row[1] is True, "the session holding that lock did not end within 5 s"
    return int(row[0])


async def test_a_held_lease_is_refused_naming_the_holder(
    postgres_stores: Callable[..., PostgresRunStore],
) -> None:
    """While one store object holds a run's lease, the same object and another one are refused
    at once with RunLeaseHeldError naming this process, host and the time it was taken."""
    first, second = postgres_stores(), postgres_stores()
    lease = await first.acquire_run_lease("busy")
    assert isinstance(lease, RunLease)
    assert "busy" == lease.run_id
    holder = await second.run_lease_holder("busy")
    assert holder is not None
    assert (os.getpid(), socket.gethostname()) == (holder.process_id, holder.host_name)
    assert holder.acquired_at is not None
    assert holder.acquired_at.endswith("Z")
    for contender in (first, second):
        with pytest.raises(RunLeaseHeldError, match=f"process {os.getpid()} on host") as caught:
            await contender.acquire_run_lease("busy")
        assert ("busy", holder) == (caught.value.run_id, caught.value.holder)
    await lease.release()


async def test_a_lease_is_free_again_after_release_and_release_is_idempotent(
    postgres_stores: Callable[..., PostgresRunStore],
) -> None:
    """After release (twice is harmless) nobody holds the lease and another store takes it."""
    first, second = postgres_stores(), postgres_stores()
    lease = await first.acquire_run_lease("r")
    await lease.release()
    await lease.release()
    assert await second.run_lease_holder("r") is None
    again = await second.acquire_run_lease("r")
    with pytest.raises(RunLeaseHeldError):
        await first.acquire_run_lease("r")
    await again.release()
    await (await first.acquire_run_lease("r")).release()


async def test_closing_the_store_frees_its_leases(
    postgres_stores: Callable[..., PostgresRunStore],
) -> None:
    """close gives back every lease its session held (before it returns); releasing them
    afterwards does nothing."""
    first, second = postgres_stores(), postgres_stores()
    leases = [await first.acquire_run_lease(f"c{i}") for i in range(3)]
    await first.aclose()
    for lease in leases:
        await lease.release()
    taken = [await second.acquire_run_lease(f"c{i}") for i in range(3)]
    assert ["c0", "c1", "c2"] == [lease.run_id for lease in taken]


@pytest.mark.crash
@pytest.mark.slow
async def test_a_holder_killed_with_sigkill_frees_its_lease_within_a_second(
    postgres_stores: Callable[..., PostgresRunStore], tmp_path: object
) -> None:
    """A process holding a lease is SIGKILLed: within one second the lease is free (the server
    saw the connection close; no TTL)."""
    store = postgres_stores()
    for attempt in range(3):
        run_id = f"killed-{attempt}"
        process = _holder_process(schema_for(str(tmp_path)), run_id)
        holder = await store.run_lease_holder(run_id)
        assert holder is not None
        assert process.pid == holder.process_id
        with pytest.raises(RunLeaseHeldError, match=f"process {process.pid}"):
            await store.acquire_run_lease(run_id)
        os.kill(process.pid, signal.SIGKILL)
        _reap(process)
        await (await _acquire_within(store, run_id, 1.0)).release()


async def _acquire_within(store: PostgresRunStore, run_id: str, seconds: float) -> RunLease:
    began = time.monotonic()
    while True:
        try:
            return await store.acquire_run_lease(run_id)
        except RunLeaseHeldError:
            assert time.monotonic() - began < seconds, f"the lease was still held after {seconds} s"
            await asyncio.sleep(0.01)


@pytest.mark.crash
@pytest.mark.slow
async def test_a_forked_child_of_the_holder_neither_keeps_the_lease_nor_writes(
    postgres_stores: Callable[..., PostgresRunStore], tmp_path: object
) -> None:
    """The holder forks a child: the child's write through the inherited store is refused
    (and never ends the parent's session, which writes on); then the holder is SIGKILLed and
    the lease is free within a second, though the child, with copies of every socket, lives."""
    store = postgres_stores()
    process = _holder_process(schema_for(str(tmp_path)), "forked", "hold-and-fork")
    _, pid, *outcome = process.held_line.split()  # type: ignore[attr-defined]
    grandchild = int(pid)
    try:
        assert ["refused", "StoreError"] == outcome
        os.kill(process.pid, signal.SIGKILL)
        _reap(process)
        await (await _acquire_within(store, "forked", 1.0)).release()
        os.kill(grandchild, 0)  # raises if the child were gone: it lives, sockets and all
        assert [intent("forked", IntentKind.ACTION, 0)] == list(
            (await store.read_log("forked")).intents
        )
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(grandchild, signal.SIGKILL)


async def test_looking_at_the_holder_takes_nothing(
    postgres_stores: Callable[..., PostgresRunStore],
) -> None:
    """run_lease_holder answers None for a free lease, never takes it, and never makes a
    concurrent acquire of another store object fail."""
    looker, taker = postgres_stores(), postgres_stores()
    assert await looker.run_lease_holder("free") is None
    for round_index in range(20):
        run_id = f"look-{round_index}"
        looks = [looker.run_lease_holder(run_id) for _ in range(3)]
        lease, *_ = await asyncio.gather(taker.acquire_run_lease(run_id), *looks)
        assert await looker.run_lease_holder(run_id) is not None
        await lease.release()
        assert await looker.run_lease_holder(run_id) is None


async def test_taking_a_lease_creates_no_run_log(
    postgres_stores: Callable[..., PostgresRunStore],
) -> None:
    """A lease taken and released leaves no record: the run reads as empty and is not listed."""
    store = postgres_stores()
    await (await store.acquire_run_lease("ghost")).release()
    assert (RunLog(), ()) == (await store.read_log("ghost"), await store.list_run_ids())


async def test_leases_of_one_run_id_in_two_schemas_are_independent(tmp_path: object) -> None:
    """The lock key includes the schema: the same run_id in another schema is another lease."""
    one = open_postgres_store(os.path.join(str(tmp_path), "one"))
    two = open_postgres_store(os.path.join(str(tmp_path), "two"))
    try:
        first = await one.acquire_run_lease("same")
        second = await two.acquire_run_lease("same")
        await first.release()
        await second.release()
    finally:
        await one.aclose()
        await two.aclose()


async def test_a_run_id_without_a_utf8_form_cannot_be_leased(
    postgres_stores: Callable[..., PostgresRunStore],
) -> None:
    """A run_id holding a lone surrogate is refused, as for writes."""
    with pytest.raises(StoreError, match="ordinary characters"):
        await postgres_stores().acquire_run_lease("bad \ud800")


async def test_a_lost_lease_session_fails_that_runs_next_write_and_never_reconnects_it(
    postgres_stores: Callable[..., PostgresRunStore],
) -> None:
    """The server ends the session holding a run's lease: that run's next writes fail with
    LeaseLostError and are not stored, while a run without a lease in the same store goes on
    (through a new session); another driver may take the lease; after releasing the lost
    lease and taking it again, the run is written once more."""
    store, rival = postgres_stores(), postgres_stores()
    lease = await store.acquire_run_lease("fenced")
    await store.write_run_started(started("fenced"))
    await store.write_run_started(started("free"))
    _end_session_holding(store.schema, "fenced")
    for k in range(2):
        with pytest.raises(LeaseLostError, match="'fenced' is gone") as caught:
            await store.write_intent(intent("fenced", IntentKind.MODEL_CALL, k))
        assert "NOT stored" in str(caught.value)
    await store.write_intent(intent("free", IntentKind.MODEL_CALL, 0))
    taken = await rival.acquire_run_lease("fenced")
    await rival.write_intent(intent("fenced", IntentKind.ACTION, 0))
    with pytest.raises(LeaseLostError):
        await store.write_intent(intent("fenced", IntentKind.MODEL_CALL, 0))
    await taken.release()
    await lease.release()
    await (await store.acquire_run_lease("fenced")).release()
    log = await store.read_log("fenced")
    assert [intent("fenced", IntentKind.ACTION, 0)] == list(log.intents)
    assert [intent("free", IntentKind.MODEL_CALL, 0)] == list(
        (await store.read_log("free")).intents
    )


async def test_a_fresh_lease_after_a_lost_session_writes_again(
    postgres_stores: Callable[..., PostgresRunStore],
) -> None:
    """Once the lost lease is released and taken again (on the new session), the run's writes
    are stored."""
    store = postgres_stores()
    lease = await store.acquire_run_lease("again")
    await store.write_run_started(started("again"))
    _end_session_holding(store.schema, "again")
    with pytest.raises(LeaseLostError):
        await store.write_intent(intent("again", IntentKind.MODEL_CALL, 0))
    await lease.release()
    lease = await store.acquire_run_lease("again")
    await store.write_intent(intent("again", IntentKind.MODEL_CALL, 0))
    holder = await store.run_lease_holder("again")
    await lease.release()
    assert (intent("again", IntentKind.MODEL_CALL, 0),) == (await store.read_log("again")).intents
    assert holder is not None
    assert os.getpid() == holder.process_id


async def test_a_lock_held_by_another_program_reads_as_an_unnamed_holder(
    postgres_stores: Callable[..., PostgresRunStore],
) -> None:
    """A session that is not a PolyLoop store holding the same advisory lock still counts as
    a holder, one the store cannot name."""
    store = postgres_stores()
    await store.open()
    key = lease_lock_key(store.schema, _run_key("foreign") or b"")
    with admin() as connection:
        connection.execute("SELECT pg_advisory_lock(%s, %s)", key)
        assert LeaseHolder() == await store.run_lease_holder("foreign")
        with pytest.raises(RunLeaseHeldError, match="a holder the store cannot name"):
            await store.acquire_run_lease("foreign")
        connection.execute("SELECT pg_advisory_unlock(%s, %s)", key)
    await (await store.acquire_run_lease("foreign")).release()


async def test_many_runs_leased_at_once_by_one_store_all_write(
    postgres_stores: Callable[..., PostgresRunStore],
) -> None:
    """One session holds the leases of 30 concurrent runs and writes them all."""
    store = postgres_stores()
    leases = await asyncio.gather(*(store.acquire_run_lease(f"m{i}") for i in range(30)))
    expected = await asyncio.gather(*(write_run(store, f"m{i}", 3) for i in range(30)))
    await asyncio.gather(*(lease.release() for lease in leases))
    for i in range(30):
        assert expected[i] == await store.read_log(f"m{i}")


def _runs_on_each_session(store: PostgresRunStore, count: int) -> list[str]:
    """A run_id for each of the store's writing sessions, found by the store's own choice."""
    chosen: dict[int, str] = {}
    index = 0
    while len(chosen) < count:
        run_id = f"w{index}"
        session = store._session_of(_run_key(run_id) or b"")
        chosen.setdefault(store._sessions.index(session), run_id)
        index += 1
    return [chosen[k] for k in range(count)]


async def test_runs_spread_over_the_writing_sessions_and_a_lost_one_fences_only_its_runs(
    postgres_stores: Callable[..., PostgresRunStore],
) -> None:
    """With three writing sessions (design 0073) each run's lease and writes go through the
    one its run_id picks: three runs picked apart hold locks on three server sessions, and
    when the server ends one of them only that run's writes fail; the others go on."""
    store = postgres_stores(writers=3)
    runs = _runs_on_each_session(store, 3)
    leases = [await store.acquire_run_lease(run_id) for run_id in runs]
    for run_id in runs:
        await store.write_run_started(started(run_id))
    pids = {_lock_holder_pid(store.schema, run_id) for run_id in runs}
    assert 3 == len(pids), pids
    _end_session_holding(store.schema, runs[1])
    with pytest.raises(LeaseLostError, match=f"{runs[1]!r} is gone"):
        await store.write_intent(intent(runs[1], IntentKind.MODEL_CALL, 0))
    for run_id in (runs[0], runs[2]):
        await store.write_intent(intent(run_id, IntentKind.MODEL_CALL, 0))
    for lease in leases:
        await lease.release()
    for run_id in runs:
        log = await store.read_log(run_id)
        expected = [] if run_id == runs[1] else [intent(run_id, IntentKind.MODEL_CALL, 0)]
        assert expected == list(log.intents)
        assert log.started == started(run_id)


async def test_a_held_run_is_refused_by_its_own_store_whatever_its_session(
    postgres_stores: Callable[..., PostgresRunStore],
) -> None:
    """A second lease of a run from the same store object is refused as before: the run's
    session holds it, and the store always picks that same session for the run."""
    store = postgres_stores(writers=4)
    for run_id in _runs_on_each_session(store, 4):
        lease = await store.acquire_run_lease(run_id)
        with pytest.raises(RunLeaseHeldError, match="this very store object"):
            await store.acquire_run_lease(run_id)
        await lease.release()


@pytest.mark.parametrize("writers", [0, 65, True, 2.0, "2"])
def test_writers_must_be_an_int_from_1_to_64(
    postgres_stores: Callable[..., PostgresRunStore], writers: object
) -> None:
    with pytest.raises(ConfigurationError, match="writers must be an int from 1 to 64"):
        postgres_stores(writers=writers)


def _lock_holder_pid(schema: str, run_id: str) -> int:
    key = lease_lock_key(schema, _run_key(run_id) or b"")
    with admin() as connection:
        row = connection.execute(
            "SELECT pid FROM pg_locks WHERE locktype = 'advisory' AND granted AND objsubid = 2 "
            "AND classid = %s::oid AND objid = %s::oid",
            (key[0] & 0xFFFFFFFF, key[1] & 0xFFFFFFFF),
        ).fetchone()
    assert row is not None, "no session holds that lock"
    return int(row[0])
