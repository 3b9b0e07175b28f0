"""PolyLoop's own implementations, wired into the installed polyloop-contract plugin.

This directory is what a downstream project would write: fixtures only, no tests. CI runs it
with ``bash contract-suite/run.sh`` (``pytest contract-suite --polyloop-contract``).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import itertools
import os
import secrets
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import AbstractAsyncContextManager
from pathlib import Path

import psycopg
import pytest
from psycopg import sql

from polyloop.ports import (
    Action,
    ActionExecutor,
    DecisionParser,
    EventSink,
    ModelClient,
    RunStore,
    ToolCall,
)
from polyloop.stores.jsonl import JsonlRunStore
from polyloop.stores.memory import MemoryRunStore
from polyloop.stores.postgres import PostgresRunStore
from polyloop.stores.sqlite import SqliteRunStore
from polyloop.testing import (
    LineDecisionParser,
    NullEventSink,
    RecordingEventSink,
    ScriptedExecutor,
    ScriptedModelClient,
    reply,
)
from polyloop.tools import Tool, ToolRegistry, ToolSpec
from polyloop_contract import RefusedStore, StoreCapabilities

# ---------------------------------------------------------------------------
# RunStore: memory, jsonl, sqlite, postgres
# ---------------------------------------------------------------------------

#: The PostgreSQL server the postgres store is checked on (scripts/test.sh starts one).
POSTGRES_URL = "POLYLOOP_TEST_POSTGRES_URL"


@pytest.fixture(params=["memory", "jsonl", "sqlite", "postgres"])
def store_kind(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def opened_stores() -> Iterator[list[RunStore]]:
    """The file stores a rule opened, closed when it ends (postgres ones clean up themselves)."""
    stores: list[RunStore] = []
    yield stores
    for store in stores:
        if isinstance(store, JsonlRunStore | SqliteRunStore):
            store.close()


def _drop_schema(schema: str) -> None:
    with psycopg.connect(_postgres_url(), autocommit=True) as connection:
        connection.execute(
            sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema))
        )


@contextlib.asynccontextmanager
async def _postgres_store(schema: str, *, owns_schema: bool) -> AsyncIterator[RunStore]:
    """A postgres store the kit cleans up when it is done with it: the factory's store drops
    its schema (the kit leaves stores in reverse order, so every reopened one is closed by
    then); a reopened store only closes its sessions."""
    store = PostgresRunStore(_postgres_url(), schema=schema)
    try:
        yield store
    finally:
        await store.aclose()
        if owns_schema:
            await asyncio.to_thread(_drop_schema, schema)


def _postgres_url() -> str:
    url = os.environ.get(POSTGRES_URL)
    if not url:
        pytest.fail(
            f"{POSTGRES_URL} is not set: the postgres store is checked on a real server. Run "
            'bash scripts/test.sh (it starts one), or `dir="$(bash '
            'scripts/postgres-test-cluster.sh start)"; export '
            f'{POSTGRES_URL}="$(cat "$dir/url")"`, or point it at your own server.',
            pytrace=False,
        )
    return url


#: What the store callables below return: a store, or (postgres) a context manager of one.
MadeStore = RunStore | AbstractAsyncContextManager[RunStore]


@pytest.fixture
def polyloop_store_factory(
    store_kind: str, tmp_path: Path, opened_stores: list[RunStore]
) -> Callable[[], MadeStore]:
    counter = itertools.count()
    tag = secrets.token_hex(4)

    def make() -> MadeStore:
        store: RunStore
        if store_kind == "postgres":
            return _postgres_store(f"contract_{tag}_{next(counter)}", owns_schema=True)
        if store_kind == "memory":
            store = MemoryRunStore()
        elif store_kind == "jsonl":
            store = JsonlRunStore(tmp_path / f"jsonl-{next(counter)}")
        else:
            store = SqliteRunStore(tmp_path / f"runs-{next(counter)}.sqlite3")
        opened_stores.append(store)
        return store

    return make


@pytest.fixture
def polyloop_store_reopen(
    store_kind: str, opened_stores: list[RunStore]
) -> Callable[[RunStore], MadeStore] | None:
    if store_kind == "memory":
        return None

    def reopen(store: RunStore) -> MadeStore:
        fresh: RunStore
        if isinstance(store, PostgresRunStore):
            return _postgres_store(store.schema, owns_schema=False)
        if isinstance(store, JsonlRunStore):
            fresh = JsonlRunStore(store.directory)
        else:
            assert isinstance(store, SqliteRunStore)
            fresh = SqliteRunStore(store.path)
        opened_stores.append(fresh)
        return fresh

    return reopen


@pytest.fixture
def polyloop_store_child_opener(
    store_kind: str,
) -> Callable[[RunStore], Callable[[], RunStore]] | None:
    """For the kit's killed-holder rule: opens the same storage in a child process."""
    if store_kind == "memory":
        return None

    def opener(store: RunStore) -> Callable[[], RunStore]:
        if isinstance(store, JsonlRunStore):
            return functools.partial(JsonlRunStore, store.directory)
        if isinstance(store, PostgresRunStore):
            return functools.partial(PostgresRunStore, _postgres_url(), schema=store.schema)
        assert isinstance(store, SqliteRunStore)
        return functools.partial(SqliteRunStore, store.path)

    return opener


#: The password the refused postgres stores are given (the server knows another one).
REFUSED_PASSWORD = "contract-s3cret-password"


def _refused_conninfos() -> dict[str, str]:
    """A closed port and a wrong password, each as a URL and as libpq key=value text."""
    parts = psycopg.conninfo.conninfo_to_dict(_postgres_url())
    wrong = {**parts, "password": REFUSED_PASSWORD}
    closed = {**wrong, "host": "127.0.0.1", "port": "1"}
    user, database = parts.get("user", ""), parts.get("dbname", "")
    return {
        "closed port (URL)": f"postgresql://{user}:{REFUSED_PASSWORD}@127.0.0.1:1/{database}",
        "closed port (key=value)": psycopg.conninfo.make_conninfo("", **closed),
        "wrong password (URL)": (
            f"postgresql://{user}:{REFUSED_PASSWORD}@{parts['host']}:{parts['port']}/{database}"
        ),
        "wrong password (key=value)": psycopg.conninfo.make_conninfo("", **wrong),
    }


@pytest.fixture
def polyloop_store_refused(store_kind: str) -> list[RefusedStore] | None:
    if store_kind != "postgres":
        return None  # the file and memory stores take no credentials (declared off below)
    return [
        RefusedStore(
            functools.partial(_refused_postgres_store, conninfo),
            secrets=(REFUSED_PASSWORD,),
            name=name,
        )
        for name, conninfo in _refused_conninfos().items()
    ]


@contextlib.asynccontextmanager
async def _refused_postgres_store(conninfo: str) -> AsyncIterator[RunStore]:
    store = PostgresRunStore(conninfo, schema="contract_refused")
    try:
        yield store
    finally:
        await store.aclose()


@pytest.fixture
def polyloop_store_capabilities(store_kind: str) -> StoreCapabilities:
    no_credentials = "takes no credentials: nothing it is given is secret"
    if store_kind == "memory":
        return StoreCapabilities(
            off={
                "reopen": "MemoryRunStore keeps its logs in the object; nothing outlives it",
                "credentials": f"MemoryRunStore {no_credentials}",
            }
        )
    if store_kind in ("jsonl", "sqlite"):
        kind = "JsonlRunStore" if store_kind == "jsonl" else "SqliteRunStore"
        return StoreCapabilities(off={"credentials": f"{kind} {no_credentials}"})
    return StoreCapabilities()


# ---------------------------------------------------------------------------
# The other seams: the scripted kit of polyloop.testing and the registry executor
# ---------------------------------------------------------------------------


@pytest.fixture
def polyloop_decision_parser() -> DecisionParser:
    return LineDecisionParser()


@pytest.fixture
def polyloop_model_client() -> ModelClient:
    return ScriptedModelClient([reply("FINAL: 42", call_id="c-1")] * 4, name="contract")


@pytest.fixture
def polyloop_model_client_failing() -> ModelClient:
    return ScriptedModelClient([ConnectionError("backend unreachable")], name="failing")


def _echo(arguments: object) -> str:
    return f"echo: {arguments!r}"


@pytest.fixture(params=["scripted", "registry"])
def executor_kind(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def polyloop_action_executor(executor_kind: str) -> ActionExecutor:
    if executor_kind == "scripted":
        return ScriptedExecutor(name="contract")
    spec = ToolSpec(
        name="echo",
        description="Echo the text back.",
        parameters={
            "type": "object",
            "properties": {"text": {"type": "string"}},
            "required": ["text"],
        },
    )
    return ToolRegistry([Tool(spec, _echo)]).executor()


@pytest.fixture
def polyloop_action(executor_kind: str) -> Action:
    if executor_kind == "scripted":
        return Action(text="print('hello')", tool_call=None)
    return Action(text='CALL echo {"text": "hi"}', tool_call=ToolCall("echo", {"text": "hi"}))


@pytest.fixture
def polyloop_action_executor_failing() -> ActionExecutor:
    def gone(text: str) -> str:
        raise ConnectionResetError("sandbox session is gone")

    return ScriptedExecutor(gone, name="broken-session")


@pytest.fixture(params=["recording", "null"])
def polyloop_event_sink(request: pytest.FixtureRequest) -> EventSink:
    return RecordingEventSink() if request.param == "recording" else NullEventSink()
