"""Fixtures of the CLI tests: an isolated POLYLOOP_HOME and stores filled by hand."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from polyloop.stores.jsonl import JsonlRunStore
from polyloop.stores.sqlite import SqliteRunStore
from tests.cli._kit import clean_env


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    return clean_env(tmp_path / "home")


@pytest.fixture
def sqlite_path(tmp_path: Path) -> Path:
    return tmp_path / "runs.sqlite"


@pytest.fixture
async def sqlite_store(sqlite_path: Path) -> AsyncIterator[SqliteRunStore]:
    async with SqliteRunStore(sqlite_path) as store:
        yield store


@pytest.fixture
async def jsonl_store(tmp_path: Path) -> AsyncIterator[JsonlRunStore]:
    async with JsonlRunStore(tmp_path / "runs-jsonl") as store:
        yield store
