"""The PostgreSQL store beyond the shared store tests: layout, durability settings, duplicate
refusal by the database, group commit, schema versions, parameters and secrets.

Every test runs against the real server named by ``POLYLOOP_TEST_POSTGRES_URL``, each in a
schema of its own that is dropped afterwards.
"""

from __future__ import annotations

import asyncio
import logging
import secrets
import subprocess
import sys
import threading
from collections.abc import Callable
from typing import Any

import pytest
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from polyloop.errors import (
    ConfigurationError,
    CorruptLogError,
    DuplicateRecordError,
    RunAlreadyStartedError,
    StoreError,
)
from polyloop.ports import RunLeasing, RunListing, RunLog, StoreClosing
from polyloop.session import resume, run
from polyloop.stores.postgres import PostgresRunStore
from polyloop.stores.postgres._session import WritingSession
from polyloop.stores.postgres._target import parse_target
from polyloop.types import Intent, IntentKind, ModelCallResult, ReplayPolicy
from tests.stores import _agent
from tests.stores._helpers import (
    expected_log,
    finished,
    intent,
    model_result,
    started,
    step_completed,
    write_run,
)
from tests.stores._postgres import (
    ROOT,
    USED_SCHEMAS,
    admin,
    open_postgres_store,
    schema_exists,
    server_url,
    session_prefix,
)

pytestmark = pytest.mark.server


@pytest.fixture
def store(postgres_stores: Callable[..., PostgresRunStore]) -> PostgresRunStore:
    return postgres_stores()


def _password() -> str:
    password = conninfo_to_dict(server_url()).get("password")
    assert password, "the test server's URL must carry a password for the secret tests"
    return str(password)


def _setting(store: PostgresRunStore, name: str) -> str:
    """A setting as the store's own writing session sees it (the session is idle here)."""
    connection = store._session._connection
    assert connection is not None, "the writing session is not connected"
    row = connection.execute(sql.SQL("SHOW {}").format(sql.Identifier(name))).fetchone()
    assert row is not None
    return str(row[0])


# -- packaging -------------------------------------------------------------------------------


def test_the_other_stores_never_import_the_postgres_driver() -> None:
    """Importing the memory, jsonl and sqlite stores (and the package, and the store URLs)
    leaves psycopg unloaded."""
    code = (
        "import sys, polyloop.stores, polyloop.stores.memory, polyloop.stores.jsonl, "
        "polyloop.stores.sqlite, polyloop.stores.urls; "
        "print(sorted(m for m in sys.modules if m.startswith('psycopg')))"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True
    )
    assert "[]" == done.stdout.strip()


def test_the_store_without_the_extra_says_how_to_install_it() -> None:
    """With psycopg missing, importing the store fails naming the extra to install."""
    code = (
        "import sys; sys.modules['psycopg'] = None\n"
        "try:\n    import polyloop.stores.postgres\n"
        "except ImportError as error:\n    print(error)"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True
    )
    assert "pip install 'polyloop-stores[postgres]'" in done.stdout


def test_the_store_declares_every_optional_capability(store: PostgresRunStore) -> None:
    """The store offers leasing, listing and closing, as the ports' protocols check them."""
    assert [True, True, True] == [
        isinstance(store, capability) for capability in (RunLeasing, RunListing, StoreClosing)
    ]


# -- parameters, repr, secrets -------------------------------------------------------------


def test_parameters_name_the_kind_only(store: PostgresRunStore) -> None:
    """parameters() holds the kind only: neither how to reach the logs (host, port, user,
    password) nor where they are (database, schema; design 0040)."""
    assert {"kind": "postgres"} == dict(store.parameters())
    assert conninfo_to_dict(server_url())["dbname"] == store.database


async def test_a_run_started_through_one_host_name_resumes_through_postgres_stores(
    tmp_path: object,
) -> None:
    """A store reaching the same database as 'localhost' instead of 127.0.0.1 has the same
    parameters, so resume accepts the snapshot the first store recorded."""
    first = open_postgres_store(str(tmp_path))
    other_host = make_conninfo(server_url(), host="localhost")
    second = PostgresRunStore(other_host, schema=first.schema)
    try:
        result = await run(_agent.definition(first, 3), _agent.request("hosts", 0, 3))
        assert first.parameters() == second.parameters()
        assert result == await resume(_agent.definition(second, 3), _agent.request("hosts", 0, 3))
    finally:
        await first.aclose()
        await second.aclose()


def test_parameters_follow_libpq_defaults_for_the_database_name(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Without dbname, the database is PGDATABASE, else the user name (as libpq decides)."""
    monkeypatch.delenv("PGDATABASE", raising=False)
    monkeypatch.delenv("PGUSER", raising=False)
    assert "alice" == parse_target("host=db user=alice", "t").database
    monkeypatch.setenv("PGDATABASE", "runs")
    assert "runs" == parse_target("host=db user=alice", "t").database
    assert "named" == parse_target("postgresql://alice@db/named", "t").database


async def test_the_password_never_leaves_the_store(
    tmp_path: object, caplog: pytest.LogCaptureFixture
) -> None:
    """The password of a URL and of key=value text appears in no parameter, repr, snapshot,
    error message or log line, also when the server refuses it or cannot be reached."""
    caplog.set_level(logging.DEBUG)
    password = _password()
    wrong = f"wrong-{secrets.token_hex(6)}"
    url = server_url()
    conninfo = make_conninfo(url)  # the same target as key=value text
    refused = make_conninfo(url, password=wrong)
    unreachable = make_conninfo(url, port="1")
    seen: list[str] = []
    schema = f"{session_prefix()}_secrets"
    USED_SCHEMAS.add(schema)
    for target in (url, conninfo):
        store = PostgresRunStore(target, schema=schema)
        try:
            seen += [repr(store), str(dict(store.parameters()))]
            result = await run(_agent.definition(store, 2), _agent.request(f"s{len(seen)}", 0, 2))
            log = await store.read_log(result.run_id)
            assert log.started is not None
            seen += [f"{k}={v}" for k, v in log.started.parameter_snapshot.items()]
        finally:
            await store.aclose()
    for target in (refused, unreachable):
        store = PostgresRunStore(target, schema=schema)
        seen.append(repr(store))
        for attempt in (store.write_run_started(started("x")), store.read_log("x")):
            with pytest.raises(StoreError) as caught:
                await attempt
            seen.append(str(caught.value))
        await store.aclose()
    with pytest.raises(ConfigurationError) as malformed:
        PostgresRunStore(f"postgresql://polyloop:%zz{wrong}@127.0.0.1/x")
    seen.append(str(malformed.value))
    seen.append(caplog.text)
    assert [] == [text for text in seen if password in text or wrong in text]
    # ... while saying enough to find the server
    assert "port=1" in " ".join(seen)


def test_repr_shows_host_port_user_database_and_schema(store: PostgresRunStore) -> None:
    """repr names where the store connects, to help an operator, without the password."""
    parts = conninfo_to_dict(server_url())
    expected = (
        f"PostgresRunStore(host={parts['host']!r}, port={parts['port']!r}, "
        f"user={parts['user']!r}, database={parts['dbname']!r}, schema={store.schema!r})"
    )
    assert expected == repr(store)


@pytest.mark.parametrize("schema", ["", "pg_mine", "x" * 64, "nul\x00", 7])
def test_an_unusable_schema_name_is_refused(schema: object) -> None:
    """Names PostgreSQL would refuse or silently cut are refused when the store is built."""
    with pytest.raises(ConfigurationError, match="schema="):
        PostgresRunStore("host=x", schema=schema)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("option", "value"),
    [("dead_connection_timeout_seconds", 1), ("readers", 0), ("idle_wait_ms", 101)],
)
def test_bad_options_are_refused_saying_what_to_pass(option: str, value: int) -> None:
    """Out-of-range options fail at construction with the range in the message."""
    with pytest.raises(ConfigurationError, match=option):
        PostgresRunStore("host=x", **{option: value})


# -- what a read creates ----------------------------------------------------------------------


async def test_reading_an_empty_database_creates_nothing_not_even_the_schema(
    store: PostgresRunStore,
) -> None:
    """read_log, list_run_ids and run_lease_holder on a fresh schema answer "nothing" and
    leave no schema behind."""
    assert (RunLog(), (), None) == (
        await store.read_log("never"),
        await store.list_run_ids(),
        await store.run_lease_holder("never"),
    )
    assert not schema_exists(store.schema)


async def test_the_first_write_creates_the_schema(store: PostgresRunStore) -> None:
    """Writing is what creates the schema and its tables."""
    await store.write_run_started(started("first"))
    assert schema_exists(store.schema)


async def test_many_store_objects_creating_one_schema_at_once_all_succeed(
    postgres_stores: Callable[..., PostgresRunStore],
) -> None:
    """Eight sessions opening the same fresh schema at the same moment all succeed (the
    creation runs under an advisory lock) and all write."""
    stores = [postgres_stores() for _ in range(8)]
    await asyncio.gather(*(s.open() for s in stores))
    await asyncio.gather(*(s.write_run_started(started(f"c{i}")) for i, s in enumerate(stores)))
    assert [f"c{i}" for i in range(8)] == sorted(await stores[0].list_run_ids())


# -- schema versions --------------------------------------------------------------------------


def _set_version(schema: str, column: str, value: int) -> None:
    with admin() as connection:
        connection.execute(
            sql.SQL("UPDATE {} SET {} = %s").format(
                sql.Identifier(schema, "polyloop_schema"), sql.Identifier(column)
            ),
            (value,),
        )


async def test_a_newer_major_schema_version_is_refused_with_what_to_do(
    store: PostgresRunStore, postgres_stores: Callable[..., PostgresRunStore]
) -> None:
    """A schema written by a newer major version is refused on read and on write."""
    await write_run(store, "old", 1)
    _set_version(store.schema, "major", 2)
    fresh = postgres_stores()
    with pytest.raises(StoreError, match=r"schema version 2\.1; .* reads version 1\.x only"):
        await fresh.read_log("old")
    with pytest.raises(StoreError, match=r"schema version 2\.1"):
        await fresh.write_run_started(started("new"))


async def test_a_newer_minor_schema_version_is_read_and_written(
    store: PostgresRunStore, postgres_stores: Callable[..., PostgresRunStore]
) -> None:
    """A newer minor version only adds, so this version reads and writes it."""
    expected = await write_run(store, "old", 2)
    _set_version(store.schema, "minor", 7)
    fresh = postgres_stores()
    assert expected == await fresh.read_log("old")
    assert expected_log("new", 1) == await write_run(fresh, "new", 1)


async def test_a_row_altered_outside_the_store_is_reported_as_corruption(
    store: PostgresRunStore,
) -> None:
    """A body that is not a log record fails the read with its seq and what to do."""
    await write_run(store, "r", 1)
    with admin() as connection:
        connection.execute(
            sql.SQL("UPDATE {} SET body = 'not json' WHERE kind = 'intent'").format(
                sql.Identifier(store.schema, "run_records")
            )
        )
    with pytest.raises(CorruptLogError, match=r"run_records seq \d+: not a valid log record"):
        await store.read_log("r")


# -- durability settings ----------------------------------------------------------------------


async def test_commits_are_synchronous_whatever_the_database_default_says(
    tmp_path: object,
) -> None:
    """In a database whose default is synchronous_commit = off, the store's session has it on."""
    database = f"{session_prefix()}_async"
    with admin() as connection:
        connection.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(database)))
        connection.execute(
            sql.SQL("ALTER DATABASE {} SET synchronous_commit = off").format(
                sql.Identifier(database)
            )
        )
    url = make_conninfo(server_url(), dbname=database)
    try:
        with admin(url) as plain:
            assert ("off",) == plain.execute("SHOW synchronous_commit").fetchone()
        store = PostgresRunStore(url, schema="runs")
        try:
            await store.write_run_started(started("durable"))
            assert "on" == _setting(store, "synchronous_commit")
        finally:
            await store.aclose()
    finally:
        with admin() as connection:
            connection.execute(
                sql.SQL("DROP DATABASE {} WITH (FORCE)").format(sql.Identifier(database))
            )


async def test_the_writing_session_sets_server_side_keepalive_from_the_timeout(
    postgres_stores: Callable[..., PostgresRunStore],
) -> None:
    """dead_connection_timeout_seconds=12 gives idle 6 s + 3 probes 2 s apart, and a 12 s
    user timeout, on the server's end of the session (which is what frees a dead worker's
    leases)."""
    store = postgres_stores(dead_connection_timeout_seconds=12)
    await store.open()
    assert ["6", "2", "3", "12000"] == [
        _setting(store, name)
        for name in (
            "tcp_keepalives_idle",
            "tcp_keepalives_interval",
            "tcp_keepalives_count",
            "tcp_user_timeout",
        )
    ]


# -- duplicates, refused by the database ------------------------------------------------------


async def test_every_record_a_log_holds_once_is_refused_the_second_time(
    store: PostgresRunStore, postgres_stores: Callable[..., PostgresRunStore]
) -> None:
    """A second intent of (kind, result_id), model result of a result_id, step of an index,
    RunStarted and RunFinished are refused — also through another session — and the first
    record stands."""
    await write_run(store, "d", 2)
    other = postgres_stores()
    for writer in (store, other):
        for attempt in (
            writer.write_intent(intent("d", IntentKind.MODEL_CALL, 1)),
            writer.write_intent(intent("d", IntentKind.ACTION, 0)),
            writer.write_model_call_result(model_result("d", 0, failed=True)),
            writer.write_step_completed(step_completed("d", 1, observation="again")),
        ):
            with pytest.raises(DuplicateRecordError, match="'d' already has") as caught:
                await attempt
            assert not isinstance(caught.value, RunAlreadyStartedError)
        for head_or_tail in (
            writer.write_run_started(started("d")),
            writer.write_run_finished(finished("d", 0)),
        ):
            with pytest.raises(RunAlreadyStartedError):
                await head_or_tail
    assert expected_log("d", 2) == await other.read_log("d")


async def test_records_that_differ_in_their_key_are_all_kept(store: PostgresRunStore) -> None:
    """An intent of the other kind with the same result_id, and results of other result_ids,
    are different records and are stored."""
    await store.write_run_started(started("k"))
    # In the loop's write order, so that the read checks only what this test is about.
    same_id = Intent("k", IntentKind.MODEL_CALL, 0, "r-1", ReplayPolicy.SAFE)
    other_kind = Intent("k", IntentKind.ACTION, 0, same_id.result_id, ReplayPolicy.SAFE)
    next_call = Intent("k", IntentKind.MODEL_CALL, 1, "r-2", ReplayPolicy.SAFE)
    await store.write_intent(same_id)
    await store.write_model_call_result(ModelCallResult("k", "r-1", None, "E: x"))
    await store.write_intent(other_kind)
    await store.write_intent(next_call)
    await store.write_model_call_result(ModelCallResult("k", "r-2", None, "E: x"))
    log = await store.read_log("k")
    assert (same_id, other_kind, next_call) == log.intents
    assert ["r-1", "r-2"] == [r.result_id for r in log.model_results]


async def test_a_refused_write_fails_alone_in_its_batch(
    postgres_stores: Callable[..., PostgresRunStore], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Writes that share one statement with a refused second RunStarted are stored; only that
    write fails. (The first statement is held until all writes are queued, so the refused one
    shares a statement with others: one writing session takes them all.)"""
    store = postgres_stores(writers=1)
    await store.write_run_started(started("taken"))
    release = threading.Event()
    batches: list[list[bytes]] = []
    real_insert = WritingSession._insert

    def held_insert(self: WritingSession, connection: Any, writes: list[Any]) -> list[bool]:
        batches.append([w.body for w in writes])
        if len(batches) == 1:
            assert release.wait(10)
        return real_insert(self, connection, writes)

    monkeypatch.setattr(WritingSession, "_insert", held_insert)
    writes = [store.write_run_started(started("blocker"))]
    writes += [store.write_run_started(started(f"mate-{i}")) for i in range(5)]
    writes.insert(3, store.write_run_started(started("taken", attempt="second")))
    tasks = [asyncio.ensure_future(w) for w in writes]
    await asyncio.sleep(0.05)  # every write is queued by now, the first held in its statement
    release.set()
    outcomes = await asyncio.gather(*tasks, return_exceptions=True)
    [refused_batch] = [b for b in batches if any(b'"attempt":"second"' in body for body in b)]
    assert len(refused_batch) > 1, batches
    assert ["RunAlreadyStartedError"] == [type(o).__name__ for o in outcomes if o is not None]
    assert isinstance(outcomes[3], RunAlreadyStartedError)
    for i in range(5):
        assert started(f"mate-{i}") == (await store.read_log(f"mate-{i}")).started
    assert started("taken") == (await store.read_log("taken")).started


async def test_a_group_with_a_refused_record_stores_nothing_and_its_batch_mates_are_stored(
    postgres_stores: Callable[..., PostgresRunStore], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Groups of several runs share one statement (tried first as one plain INSERT, design
    0073); one group repeats a stored intent: that group fails alone with nothing of it
    stored, the other groups are stored whole."""
    store = postgres_stores(writers=1)
    await store.write_intent(intent("dup", IntentKind.MODEL_CALL, 0))
    release = threading.Event()
    batches: list[tuple[int, bool]] = []
    real_insert = WritingSession._insert

    def held_insert(self: WritingSession, connection: Any, writes: list[Any]) -> list[Any]:
        runs = [w.run_id for item in writes for w in getattr(item, "writes", (item,))]
        batches.append((len(writes), b"dup" in runs))
        if len(batches) == 1:
            assert release.wait(10)
        return real_insert(self, connection, writes)

    monkeypatch.setattr(WritingSession, "_insert", held_insert)

    def group(run_id: str) -> list[Intent]:
        return [intent(run_id, IntentKind.MODEL_CALL, 0), intent(run_id, IntentKind.ACTION, 0)]

    tasks = [asyncio.ensure_future(store.write_run_started(started("blocker")))]
    tasks += [asyncio.ensure_future(store.write_records(group(f"g{i}"))) for i in range(4)]
    tasks.insert(3, asyncio.ensure_future(store.write_records(group("dup"))))
    await asyncio.sleep(0.05)  # every write is queued by now, the first held in its statement
    release.set()
    outcomes = await asyncio.gather(*tasks, return_exceptions=True)
    [dup_batch] = [size for size, has_dup in batches if has_dup]
    assert dup_batch > 1, batches
    assert isinstance(outcomes[3], DuplicateRecordError), outcomes
    assert [None] * 5 == [o for k, o in enumerate(outcomes) if k != 3]
    assert (intent("dup", IntentKind.MODEL_CALL, 0),) == (await store.read_log("dup")).intents
    for i in range(4):
        assert tuple(group(f"g{i}")) == (await store.read_log(f"g{i}")).intents


# -- group commit, listing -----------------------------------------------------------------


async def test_concurrent_runs_share_commits(store: PostgresRunStore) -> None:
    """50 runs written at once need far fewer commits than writes, and each reads back whole."""
    ids = [f"g{i}" for i in range(50)]
    await asyncio.gather(*(write_run(store, run_id, 4) for run_id in ids))
    writes = 50 * (1 + 4 * 4 + 1)
    assert store.commits <= writes // 2, store.commits
    for run_id in ids:
        assert expected_log(run_id, 4) == await store.read_log(run_id)


async def test_run_ids_of_any_text_are_listed_exactly_in_order_of_first_record(
    store: PostgresRunStore,
) -> None:
    """NUL, 10 kB, non-ASCII and case variants are listed back exactly, first-written first."""
    ids = ["b", "a\x00b", "x" * 10_000 + "\x00", "运行-🚀", "Run", "run", "RUN", ""]
    for run_id in ids:
        await store.write_run_started(started(run_id))
    await store.write_intent(intent("b", IntentKind.MODEL_CALL, 0))
    assert tuple(ids) == await store.list_run_ids()


async def test_a_reader_connection_the_server_ended_is_replaced_before_the_next_read(
    store: PostgresRunStore,
) -> None:
    """Reads are not fenced: after the server ends an idle reader's session, the next read
    opens a new one and reads."""
    expected = await write_run(store, "r", 1)
    assert expected == await store.read_log("r")
    # Only this store's reader: its last query names the store's schema. Other test processes
    # (xdist workers) share the server and have reader sessions of their own.
    with admin() as connection:
        ended = connection.execute(
            "SELECT count(pg_terminate_backend(pid, 5000)) FROM pg_stat_activity "
            "WHERE application_name = 'polyloop reader' AND pid <> pg_backend_pid() "
            "AND strpos(query, %s) > 0",
            (store.schema,),
        ).fetchone()
    assert (1,) == ended
    assert expected == await store.read_log("r")


# -- closing ---------------------------------------------------------------------------------


async def test_closing_twice_is_harmless_and_a_closed_store_refuses_writes(
    store: PostgresRunStore,
) -> None:
    """close waits for the write in flight; a second close does nothing; then writes fail."""
    pending = asyncio.ensure_future(store.write_run_started(started("last")))
    await asyncio.sleep(0)
    await store.aclose()
    store.close()
    await pending
    with pytest.raises(StoreError, match="is closed"):
        await store.write_intent(intent("last", IntentKind.MODEL_CALL, 0))
    fresh = PostgresRunStore(server_url(), schema=store.schema)
    try:
        assert started("last") == (await fresh.read_log("last")).started
    finally:
        await fresh.aclose()


def test_a_store_that_is_never_used_starts_no_thread_and_closes_at_once() -> None:
    """Building and closing (twice) an unused store starts no thread (so opens no session)."""
    store = PostgresRunStore("host=nowhere.invalid user=u dbname=d")
    store.close()
    store.close()
    assert [] == [t.name for t in threading.enumerate() if "nowhere.invalid" in t.name]
