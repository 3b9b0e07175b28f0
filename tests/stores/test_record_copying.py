"""``copy_records`` (design 0072): a fork's copy of a source's records from their stored form.

On every store, copying gives exactly the log, and on the durable stores exactly the stored
bytes, that ``write_records`` of the same records under the fork's run id gives; a source that
does not hold the records as they are handed over is not copied, and nothing is stored.
"""

from __future__ import annotations

import dataclasses
import os
import sqlite3
from collections.abc import AsyncIterator, Iterator, Sequence

import psycopg
import pytest

from polyloop.errors import RunAlreadyStartedError
from polyloop.ports import (
    BatchedRecord,
    RecordBatching,
    RecordCopying,
    RunLog,
    RunStore,
    supports_record_copying,
)
from polyloop.session import run
from polyloop.stores.jsonl import JsonlRunStore
from polyloop.stores.postgres import PostgresRunStore
from polyloop.stores.sqlite import SqliteRunStore
from polyloop.types import IntentKind, RunStarted, StepCompleted
from tests.loop_kit import Effects, MixedExecutor, make_definition, make_request, scenario_tools
from tests.stores import _postgres
from tests.stores._helpers import STORE_KINDS, close_store, open_store

_postgres.claim_session_prefix()

#: Steps 0-3: a long observation (stored once, ``same_observation``), a never tool, a safe
#: one, a tool-less action; then the run ends on its own.
SCRIPT = (
    "RUN: print('x' * 200)",
    'CALL write {"path": "a.txt"}',
    "CALL read {}",
    "RUN: pass",
    "FINAL: done",
)
#: Run ids whose quoted form differs from their text (the copy replaces the quoted form).
RUN_IDS = ("plain", 'say "hi" \\ there', "运行-ü-🚀")


@pytest.fixture(autouse=True)
def _drop_postgres_schemas() -> Iterator[None]:
    yield
    _postgres.drop_used_schemas()


class _Opened:
    def __init__(self, kind: str, root: str) -> None:
        self.kind, self.root, self.stores = kind, root, list[RunStore]()

    def open(self, name: str) -> RunStore:
        where = os.path.join(self.root, name)
        os.makedirs(where, exist_ok=True)
        store = open_store(self.kind, where)
        self.stores.append(store)
        return store


@pytest.fixture(params=STORE_KINDS)
async def opened(request: pytest.FixtureRequest, tmp_path: object) -> AsyncIterator[_Opened]:
    made = _Opened(request.param, str(tmp_path))
    yield made
    for store in made.stores:
        await close_store(store)


async def _source(store: RunStore, run_id: str) -> RunLog:
    effects = Effects()
    tools = scenario_tools(effects)
    replies = [f"{text}" for text in SCRIPT]
    from tests.loop_kit import replies as make_replies

    definition = make_definition(make_replies(*replies), store)
    request = make_request(run_id, tools=tools, executor=MixedExecutor(tools, effects))
    await run(definition, request)
    return await store.read_log(run_id)


def _records_before(log: RunLog, k: int) -> list[BatchedRecord]:
    """The records of steps ``0..k-1``, in the order the loop wrote them."""
    out: list[BatchedRecord] = []
    for step in range(k):
        for intent in log.intents:
            if intent.call_index == step and intent.kind is IntentKind.MODEL_CALL:
                out.append(intent)
        out.extend(r for r in log.model_results if r.result_id == f"model-{step}")
        out.extend(a for a in log.asks if a.step == step)
        out.extend(a for a in log.answers if a.step == step)
        for intent in log.intents:
            if intent.call_index == step and intent.kind is IntentKind.ACTION:
                out.append(intent)
        out.append(log.steps[step])
    return out


def _started(run_id: str, source: str, k: int) -> RunStarted:
    return RunStarted(
        run_id, {"model": "m"}, forked_from_run_id=source, forked_at_step=k, started_at="t"
    )


async def _copy(
    store: RunStore, started: RunStarted, source: str, records: Sequence[object]
) -> bool:
    assert isinstance(store, RecordCopying)
    lease = await store.acquire_run_lease(started.run_id)  # type: ignore[attr-defined]
    try:
        return await store.copy_records(started, source, records)  # type: ignore[arg-type]
    finally:
        await lease.release()


def _stored(store: RunStore, run_id: str) -> list[bytes]:
    """The stored form of the run's records, in order."""
    if isinstance(store, JsonlRunStore):
        with open(store.path_for(run_id), "rb") as handle:
            return handle.read().split(b"\n")
    if isinstance(store, SqliteRunStore):
        with sqlite3.connect(store.path) as connection:
            rows = connection.execute(
                "SELECT kind, CAST(body AS BLOB), record_key FROM run_records "
                "WHERE run_id = ? ORDER BY seq",
                (run_id,),
            ).fetchall()
        return [repr(row).encode() for row in rows]
    if isinstance(store, PostgresRunStore):
        with psycopg.connect(os.environ["POLYLOOP_TEST_POSTGRES_URL"]) as connection:
            rows = connection.execute(
                f'SELECT kind, record_key, run_id, body FROM "{store.schema}".run_records '
                "WHERE run_id = %s ORDER BY seq",
                (run_id.encode("utf-8"),),
            ).fetchall()
        return [
            repr(tuple(bytes(c) if isinstance(c, memoryview) else c for c in row)).encode()
            for row in rows
        ]
    return []


async def test_every_store_copies_records(opened: _Opened) -> None:
    assert supports_record_copying(opened.open("any"))


@pytest.mark.parametrize("source_id", RUN_IDS)
async def test_a_copy_is_what_writing_the_records_under_the_fork_s_id_gives(
    opened: _Opened, source_id: str
) -> None:
    copying = opened.open("copying")
    writing = opened.open("writing")
    log = await _source(copying, source_id)
    await _source(writing, source_id)
    assert 5 == len(log.steps)
    for k in range(1, 6):
        for fork_id in (f"fork {k}", f'fork "{k}" ü'):
            started = _started(fork_id, source_id, k)
            records = _records_before(log, k)
            assert await _copy(copying, started, source_id, records)
            moved = [dataclasses.replace(r, run_id=fork_id) for r in records]
            assert isinstance(writing, RecordBatching)
            await writing.write_records([started, *moved])
            copied = await copying.read_log(fork_id)
            assert await writing.read_log(fork_id) == copied
            assert k == len(copied.steps)
            assert all(isinstance(s, StepCompleted) and s.run_id == fork_id for s in copied.steps)
            assert _stored(writing, fork_id) == _stored(copying, fork_id)
    # the source is only read
    assert log == await copying.read_log(source_id)


async def test_records_the_source_does_not_hold_so_are_not_copied_and_nothing_is_stored(
    opened: _Opened,
) -> None:
    store = opened.open("store")
    log = await _source(store, "source")
    records = _records_before(log, 3)
    other = dataclasses.replace(log.steps[0], run_id="other")
    cases: dict[str, list[BatchedRecord]] = {
        "another run's": [*records[:-1], dataclasses.replace(records[-1], run_id="other")],
        "a record of another run among them": [other, *records[1:]],
        "a RunFinished": [*records, log.finished],  # type: ignore[list-item]
    }
    if opened.kind != "memory":  # memory keeps no order across kinds
        cases["out of order"] = [records[1], records[0], *records[2:]]
        cases["ending before a StepCompleted"] = records[:-1]
        cases["fewer than the source's first ones"] = records[1:]
    for number, (case, handed) in enumerate(cases.items()):
        fork_id = f"fork-{number}"
        copied = await _copy(store, _started(fork_id, "source", 3), "source", handed)
        assert copied is False, case
        assert RunLog() == await store.read_log(fork_id), case
    assert log == await store.read_log("source")
    # a source the store does not hold
    assert False is await _copy(store, _started("fork-x", "nowhere", 3), "nowhere", records)
    assert RunLog() == await store.read_log("fork-x")


async def test_a_copy_onto_a_run_that_has_records_stores_nothing(opened: _Opened) -> None:
    """Refused in write_records' words, or left to them (``False``): the log is unchanged."""
    store = opened.open("store")
    log = await _source(store, "source")
    records = _records_before(log, 2)
    assert await _copy(store, _started("taken", "source", 2), "source", records)
    before = await store.read_log("taken")
    try:
        copied = await _copy(store, _started("taken", "source", 2), "source", records)
    except RunAlreadyStartedError:
        copied = False
    assert copied is False
    assert before == await store.read_log("taken")
