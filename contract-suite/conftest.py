"""PolyLoop's own implementations, wired into the installed polyloop-contract plugin.

This directory is what a downstream project would write: fixtures only, no tests. CI runs it
with ``bash contract-suite/run.sh`` (``pytest contract-suite --polyloop-contract``).
"""

from __future__ import annotations

import functools
import itertools
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

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
# RunStore: memory, jsonl, sqlite
# ---------------------------------------------------------------------------


@pytest.fixture(params=["memory", "jsonl", "sqlite"])
def store_kind(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def opened_stores() -> Iterator[list[RunStore]]:
    stores: list[RunStore] = []
    yield stores
    for store in stores:
        if isinstance(store, JsonlRunStore | SqliteRunStore):
            store.close()


@pytest.fixture
def polyloop_store_factory(
    store_kind: str, tmp_path: Path, opened_stores: list[RunStore]
) -> Callable[[], RunStore]:
    counter = itertools.count()

    def make() -> RunStore:
        store: RunStore
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
) -> Callable[[RunStore], RunStore] | None:
    if store_kind == "memory":
        return None

    def reopen(store: RunStore) -> RunStore:
        fresh: RunStore
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
