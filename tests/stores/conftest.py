"""The ``opened`` fixture: every shared store test runs on memory, jsonl, sqlite and postgres.

The postgres kind uses the server named by ``POLYLOOP_TEST_POSTGRES_URL`` (see
``tests.stores._postgres``); its schemas are dropped after every test.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any

import pytest

from polyloop.ports import RunStore
from polyloop.stores.postgres import PostgresRunStore
from tests.stores import _postgres
from tests.stores._helpers import DURABLE_KINDS, STORE_KINDS, Opened, close_store, open_store

# Fixed before any test starts a child process, so that children name their schemas alike.
_postgres.claim_session_prefix()


@pytest.fixture(autouse=True)
def _drop_postgres_schemas() -> Iterator[None]:
    yield
    _postgres.drop_used_schemas()


@pytest.fixture(scope="session", autouse=True)
def _sweep_postgres_schemas() -> Iterator[None]:
    yield
    _postgres.sweep_session_schemas()


@pytest.fixture(params=STORE_KINDS)
async def opened(request: pytest.FixtureRequest, tmp_path: object) -> AsyncIterator[Opened]:
    kind: str = request.param
    where = str(tmp_path)
    store = open_store(kind, where)
    extra: list[RunStore] = []

    def reopen() -> RunStore:
        if kind == "memory":
            return store  # nothing outlives a memory store: "reopening" is the same object
        other = open_store(kind, where)
        extra.append(other)
        return other

    yield Opened(kind, store, reopen)
    for each in [store, *extra]:
        await close_store(each)


@pytest.fixture(params=DURABLE_KINDS)
async def durable(request: pytest.FixtureRequest, tmp_path: object) -> AsyncIterator[Opened]:
    kind: str = request.param
    where = str(tmp_path)
    store = open_store(kind, where)
    extra: list[RunStore] = []

    def reopen() -> RunStore:
        other = open_store(kind, where)
        extra.append(other)
        return other

    yield Opened(kind, store, reopen)
    for each in [store, *extra]:
        await close_store(each)


@pytest.fixture
async def postgres_stores(tmp_path: object) -> AsyncIterator[Callable[..., PostgresRunStore]]:
    """Opens store objects (each with its own sessions) on one schema of the test server."""
    opened: list[PostgresRunStore] = []

    def make(**options: Any) -> PostgresRunStore:
        fresh = _postgres.open_postgres_store(str(tmp_path), **options)
        opened.append(fresh)
        return fresh

    yield make
    for each in opened:
        await each.aclose()
