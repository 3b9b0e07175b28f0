"""SqliteRunStore: schema, WAL, atomic steps, group commit, a free event loop."""

from __future__ import annotations

import asyncio
import os
import sqlite3

import pytest

from polyloop.errors import (
    ConfigurationError,
    CorruptLogError,
    RunAlreadyStartedError,
    StoreError,
)
from polyloop.ports import RunLog
from polyloop.stores.sqlite import SqliteRunStore
from polyloop.types import IntentKind
from tests.stores._helpers import (
    exists,
    expected_log,
    intent,
    started,
    step_completed,
    write_run,
)


def _query(path: str, sql: str, *args: object) -> list[tuple[object, ...]]:
    connection = sqlite3.connect(path)
    try:
        return list(connection.execute(sql, args))
    finally:
        connection.close()


def _execute(path: str, sql: str, *args: object) -> None:
    connection = sqlite3.connect(path, isolation_level=None)
    try:
        connection.execute(sql, args)
    finally:
        connection.close()


async def test_the_file_is_in_wal_mode_with_a_schema_row(tmp_path: object) -> None:
    """A written file is in WAL mode and records schema 1.1."""
    path = os.path.join(str(tmp_path), "w.db")
    async with SqliteRunStore(path) as store:
        await store.write_run_started(started("x"))
    assert _query(path, "PRAGMA journal_mode") == [("wal",)]
    assert _query(path, "SELECT major, minor FROM polyloop_schema") == [(1, 1)]


async def test_a_file_of_a_newer_schema_major_is_refused_clearly(tmp_path: object) -> None:
    """A file of schema major 2 is refused by open, read and write alike, naming both versions, and
    nothing is written to it."""
    path = os.path.join(str(tmp_path), "new.db")
    async with SqliteRunStore(path) as store:
        await store.write_run_started(started("x"))
    _execute(path, "UPDATE polyloop_schema SET major = 2, minor = 3")
    store = SqliteRunStore(path)
    try:
        with pytest.raises(StoreError, match=r"schema 2\.3.*reads schema 1\.x"):
            await store.open()
        with pytest.raises(StoreError, match=r"schema 2\.3"):
            await store.read_log("x")
        with pytest.raises(StoreError, match=r"schema 2\.3"):
            await store.write_intent(intent("x", IntentKind.MODEL_CALL, 0))
    finally:
        await store.__aexit__(None, None, None)
    assert _query(path, "SELECT count(*) FROM run_records") == [(1,)]


async def test_a_newer_minor_of_the_same_major_is_read(tmp_path: object) -> None:
    """A file of a newer minor of schema 1 reads back as written."""
    path = os.path.join(str(tmp_path), "minor.db")
    async with SqliteRunStore(path) as store:
        expected = await write_run(store, "x", 1)
    _execute(path, "UPDATE polyloop_schema SET minor = 7")
    async with SqliteRunStore(path) as store:
        assert await store.read_log("x") == expected


async def test_a_step_completed_is_one_row_holding_outcome_and_step(tmp_path: object) -> None:
    """write_step_completed is one row in one commit, holding the action outcome and the step
    record."""
    path = os.path.join(str(tmp_path), "step.db")
    async with SqliteRunStore(path) as store:
        await store.write_run_started(started("s"))
        before = store.commits
        await store.write_step_completed(step_completed("s", 0))
        assert store.commits == before + 1
    rows = _query(path, "SELECT kind, body FROM run_records WHERE run_id = 's' ORDER BY seq")
    assert [kind for kind, _ in rows] == ["run_started", "step_completed"]
    body = str(rows[1][1])
    assert '"action_outcome":{' in body
    assert '"step":{' in body


async def test_a_step_the_database_refuses_stores_nothing_of_it(tmp_path: object) -> None:
    """A step row the database refuses fails as a plain StoreError and leaves no half of the step;
    the next attempt stores it."""
    path = os.path.join(str(tmp_path), "fail.db")
    async with SqliteRunStore(path) as store:
        await store.write_run_started(started("f"))
        # A trigger (added behind the store's back) refuses the step row: the write must fail
        # as a StoreError, not as "already started", and leave neither half of the step.
        _execute(
            path,
            "CREATE TRIGGER no_steps BEFORE INSERT ON run_records "
            "WHEN NEW.kind = 'step_completed' BEGIN SELECT RAISE(ABORT, 'disk says no'); END",
        )
        with pytest.raises(StoreError, match="disk says no") as caught:
            await store.write_step_completed(step_completed("f", 0))
        assert not isinstance(caught.value, RunAlreadyStartedError)
        _execute(path, "DROP TRIGGER no_steps")
        assert await store.read_log("f") == RunLog(started=started("f"))
        await store.write_step_completed(step_completed("f", 0))
        assert (await store.read_log("f")).steps == (step_completed("f", 0),)


async def test_concurrent_runs_share_commits(tmp_path: object) -> None:
    """Forty runs written at once need fewer commits than writes, and each reads back whole."""
    path = os.path.join(str(tmp_path), "group.db")
    ids = [f"g{i}" for i in range(40)]
    async with SqliteRunStore(path) as store:
        await asyncio.gather(*(write_run(store, run_id, 5) for run_id in ids))
        writes = len(ids) * (1 + 4 * 5 + 1)
        assert store.commits < writes
        for run_id in ids:
            assert await store.read_log(run_id) == expected_log(run_id, 5)


async def test_read_of_a_missing_file_creates_no_file(tmp_path: object) -> None:
    """Reading from a path with no database returns RunLog() and creates no file."""
    path = os.path.join(str(tmp_path), "absent.db")
    store = SqliteRunStore(path)
    try:
        assert await store.read_log("x") == RunLog()
    finally:
        await store.__aexit__(None, None, None)
    assert not exists(path)


async def test_a_row_that_does_not_decode_is_corruption_naming_the_row(tmp_path: object) -> None:
    """A row whose body is no record is CorruptLogError naming its seq."""
    path = os.path.join(str(tmp_path), "bad.db")
    async with SqliteRunStore(path) as store:
        await write_run(store, "b", 1)
    _execute(path, 'UPDATE run_records SET body = \'{"type":"intent"}\' WHERE seq = 2')
    async with SqliteRunStore(path) as store:
        with pytest.raises(CorruptLogError, match="seq 2"):
            await store.read_log("b")


async def test_a_body_that_is_not_utf8_is_corruption_naming_its_row_and_run(
    tmp_path: object,
) -> None:
    """A body of invalid UTF-8 (stored as text by another program) is the CorruptLogError
    naming its seq and its run, not a generic store error; the other runs still read."""
    path = os.path.join(str(tmp_path), "bytes.db")
    async with SqliteRunStore(path) as store:
        await write_run(store, "b", 1)
        expected = await write_run(store, "fine", 1)
    _execute(path, "UPDATE run_records SET body = CAST(X'7bff7d' AS TEXT) WHERE seq = 3")
    async with SqliteRunStore(path) as store:
        with pytest.raises(CorruptLogError) as refused:
            await store.read_log("b")
        assert expected == await store.read_log("fine")
    assert (
        f"{path}, run_records seq 3: not a valid log record of run 'b'"
        == str(refused.value).split(" (")[0]
    )


@pytest.mark.parametrize("level", ["NORMAL", "OFF", "fast"])
def test_non_durable_synchronous_levels_are_refused(tmp_path: object, level: str) -> None:
    """synchronous levels weaker than FULL are refused with ConfigurationError."""
    with pytest.raises(ConfigurationError, match="FULL or EXTRA"):
        SqliteRunStore(os.path.join(str(tmp_path), "x.db"), synchronous=level)


async def test_extra_is_accepted_and_applied(tmp_path: object) -> None:
    """synchronous='extra' (any case) is accepted and the store reads back what it wrote."""
    path = os.path.join(str(tmp_path), "extra.db")
    async with SqliteRunStore(path, synchronous="extra") as store:
        expected = await write_run(store, "e", 1)
        assert await store.read_log("e") == expected


def test_parameters_name_the_kind_only_and_do_no_io(tmp_path: object) -> None:
    """parameters() are the kind only (the file's place is not a parameter: design 0040),
    computed without creating the file; the store still knows its absolute path."""
    path = os.path.join(str(tmp_path), "p.db")
    store = SqliteRunStore(path, busy_timeout_ms=5)
    assert store.parameters() == {"kind": "sqlite"}
    assert os.path.abspath(path) == store.path
    assert not os.path.exists(path)
    store.close()


async def test_a_missing_parent_directory_is_reported_with_advice(tmp_path: object) -> None:
    """A write to a path whose directory does not exist is StoreError saying to create it first."""
    store = SqliteRunStore(os.path.join(str(tmp_path), "no", "such", "x.db"))
    try:
        with pytest.raises(StoreError, match="Create it first"):
            await store.write_run_started(started("x"))
    finally:
        await store.__aexit__(None, None, None)


async def test_listing_a_missing_file_finds_no_run_and_creates_nothing(tmp_path: object) -> None:
    """list_run_ids of a path with no database is empty and creates no file."""
    path = os.path.join(str(tmp_path), "none.db")
    store = SqliteRunStore(path)
    try:
        assert await store.list_run_ids() == ()
    finally:
        await store.__aexit__(None, None, None)
    assert not exists(path)
