"""PolyLoop's own implementations, wired into the installed polyloop-contract plugin.

This directory is what a downstream project would write: fixtures only, no tests. CI runs it
with ``bash contract-suite/run.sh`` (``pytest contract-suite --polyloop-contract``).
"""

from __future__ import annotations

import functools
import itertools
import os
import secrets
from collections.abc import Callable, Iterator
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
from polyloop_contract import StoreCapabilities

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
    stores: list[RunStore] = []
    yield stores
    schemas = set()
    for store in stores:
        if isinstance(store, JsonlRunStore | SqliteRunStore | PostgresRunStore):
            store.close()
        if isinstance(store, PostgresRunStore):
            schemas.add(store.schema)
    if schemas:
        with psycopg.connect(os.environ[POSTGRES_URL], autocommit=True) as connection:
            for schema in sorted(schemas):
                connection.execute(
                    sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema))
                )


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


@pytest.fixture
def polyloop_store_factory(
    store_kind: str, tmp_path: Path, opened_stores: list[RunStore]
) -> Callable[[], RunStore]:
    counter = itertools.count()
    tag = secrets.token_hex(4)

    def make() -> RunStore:
        store: RunStore
        if store_kind == "memory":
            store = MemoryRunStore()
        elif store_kind == "jsonl":
            store = JsonlRunStore(tmp_path / f"jsonl-{next(counter)}")
        elif store_kind == "sqlite":
            store = SqliteRunStore(tmp_path / f"runs-{next(counter)}.sqlite3")
        else:
            store = PostgresRunStore(_postgres_url(), schema=f"contract_{tag}_{next(counter)}")
        opened_stores.append(store)
        return store

    return make


@pytest.fixture
def polyloop_store_reopen(
    store_kind: str, opened_stores: list[RunStore]
) -> Callable[[RunStore], RunStore] | None:
    if store_kind == "memory":
        return None

    def reopen(store: RunStore) -> RunStore:
        fresh: RunStore
        if isinstance(store, JsonlRunStore):
            fresh = JsonlRunStore(store.directory)
        elif isinstance(store, PostgresRunStore):
            fresh = PostgresRunStore(_postgres_url(), schema=store.schema)
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


@pytest.fixture
def polyloop_store_capabilities(store_kind: str) -> StoreCapabilities:
    if store_kind == "memory":
        return StoreCapabilities(
            off={"reopen": "MemoryRunStore keeps its logs in the object; nothing outlives it"}
        )
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
