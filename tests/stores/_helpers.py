"""Records and store factories shared by the store tests."""

from __future__ import annotations

import asyncio
import contextlib
import os
import threading
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Any

import pytest

from polyloop.ports import RunLog, RunStore
from polyloop.serialization import LogRecord
from polyloop.stores.jsonl import JsonlRunStore
from polyloop.stores.memory import MemoryRunStore
from polyloop.stores.postgres import PostgresRunStore
from polyloop.stores.sqlite import SqliteRunStore
from polyloop.testing import (
    StepWrites,
    model_failure_step,
    run_finished,
    run_log_from,
    run_started,
    tool_step,
    write_records,
)
from polyloop.types import (
    Intent,
    IntentKind,
    ModelCallResult,
    RunFinished,
    RunStarted,
    StepCompleted,
    StepRecord,
    StopReason,
)
from tests.stores._postgres import open_postgres_store

STORE_KINDS = ("memory", "jsonl", "sqlite", "postgres")
DURABLE_KINDS = ("jsonl", "sqlite", "postgres")
#: The stores that keep their logs in local files.
FILE_KINDS = ("jsonl", "sqlite")

#: run_ids that must neither escape a jsonl directory nor collide with one another.
HOSTILE_RUN_IDS = (
    "../x",
    "a/b",
    "/etc/passwd",
    ".",
    "..",
    "",
    "x" * 5_000,
    "运行-ünïcødé-🚀",
    "Run",
    "run",
    "RUN",
    "nul\x00byte",
    "nul",
    "a\\b",
    "con",
    " spaced name ",
)


def open_store(kind: str, where: str, **options: Any) -> RunStore:
    """A fresh store of ``kind`` on the storage at ``where`` (a directory; for postgres, the
    schema standing for it on the test server)."""
    if kind == "memory":
        return MemoryRunStore()
    if kind == "jsonl":
        return JsonlRunStore(os.path.join(where, "runs"), **options)
    if kind == "sqlite":
        return SqliteRunStore(os.path.join(where, "runs.db"), **options)
    if kind == "postgres":
        return open_postgres_store(where, **options)
    raise AssertionError(kind)


async def close_store(store: object) -> None:
    if isinstance(store, JsonlRunStore | SqliteRunStore):
        await store.__aexit__(None, None, None)
    elif isinstance(store, PostgresRunStore):
        await store.aclose()


def storage_entries(where: str) -> list[str]:
    """Every path below ``where``, for checking that a read created nothing."""
    found: list[str] = []
    for root, dirs, files in os.walk(where):
        found.extend(os.path.join(root, name) for name in dirs + files)
    return sorted(found)


@dataclass(frozen=True, slots=True)
class Opened:
    """A store under test and how to open another one on the same storage."""

    kind: str
    store: RunStore
    reopen: Callable[[], RunStore]


def started(run_id: str, **extra: str) -> RunStarted:
    return run_started(run_id, {"model_client.kind": "scripted", "store.kind": "x", **extra})


def noop_step(run_id: str, k: int, observation: str = "ok") -> StepWrites:
    """Step ``k`` called the safe tool ``noop``, which answered ``observation``."""
    return tool_step(
        run_id,
        k,
        tool_name="noop",
        observation=observation,
        action="CALL noop {}",
        content=f"CALL noop {{}} #{k}",
        thinking="hm",
        call_id=f"c{k}",
        prompt_chars=100 + k,
        step_wall_ms=k,
    )


def intent(run_id: str, kind: IntentKind, k: int) -> Intent:
    writes = noop_step(run_id, k)
    if kind is IntentKind.MODEL_CALL:
        return writes.model_intent
    assert writes.action_intent is not None
    return writes.action_intent


def model_result(run_id: str, k: int, *, failed: bool = False) -> ModelCallResult:
    if failed:
        return model_failure_step(run_id, k, failure="RuntimeError: boom").model_result
    return noop_step(run_id, k).model_result


def step(k: int, observation: str = "ok") -> StepRecord:
    return noop_step("", k, observation).step


def step_completed(run_id: str, k: int, observation: str = "ok") -> StepCompleted:
    return noop_step(run_id, k, observation).step_completed


def finished(run_id: str, steps: int) -> RunFinished:
    return run_finished(run_id, [step(k) for k in range(steps)], StopReason.STEP_BUDGET)


def _run_records(run_id: str, steps: int, *, finish: bool) -> list[LogRecord]:
    records: list[LogRecord] = [started(run_id)]
    for k in range(steps):
        records += noop_step(run_id, k).records
    if finish:
        records.append(finished(run_id, steps))
    return records


async def write_run(store: RunStore, run_id: str, steps: int, *, finish: bool = True) -> RunLog:
    """Write a whole well-formed run through ``store``; return the log it should read back."""
    records = _run_records(run_id, steps, finish=finish)
    await write_records(store, records)
    return run_log_from(records)


def expected_log(run_id: str, steps: int, *, finish: bool = True) -> RunLog:
    return run_log_from(_run_records(run_id, steps, finish=finish))


# Small blocking file helpers: tests touch files between awaits, where blocking is harmless.


def read_bytes(path: str) -> bytes:
    with open(path, "rb") as handle:
        return handle.read()


def write_bytes(path: str, data: bytes, *, append: bool = False) -> None:
    with open(path, "ab" if append else "wb") as handle:
        handle.write(data)


def exists(path: str) -> bool:
    return os.path.exists(path)


def same_directory(directory: str, name: str) -> bool:
    real = os.path.realpath(os.path.join(directory, name))
    return os.path.dirname(real) == os.path.realpath(directory)


def stall_disk(kind: str, monkeypatch: pytest.MonkeyPatch, until: threading.Event) -> None:
    """Make the disk step of the next writes of a durable store wait for ``until`` (10 s at
    most, then the write fails with an AssertionError naming the stall)."""
    from polyloop.stores import _group_commit, jsonl

    def stalled(real: Callable[..., Any]) -> Callable[..., Any]:
        def wait_then_run(*args: Any) -> Any:
            if not until.wait(timeout=10):
                raise AssertionError("the event loop did not run while the disk was stalled")
            return real(*args)

        return wait_then_run

    if kind == "jsonl":
        monkeypatch.setattr(jsonl, "_sync_data", stalled(jsonl._sync_data))
    elif kind == "postgres":
        from polyloop.stores.postgres._session import WritingSession

        monkeypatch.setattr(WritingSession, "_insert", stalled(WritingSession._insert))
    else:
        writer = _group_commit.GroupCommitWriter
        monkeypatch.setattr(writer, "_insert", stalled(writer._insert))


class Ticker:
    """Counts the turns of a task that yields with ``sleep(0)`` forever, so it is always ready
    to run: while the event loop is blocked, ``ticks`` stands still."""

    def __init__(self) -> None:
        self.ticks = 0

    async def _run(self) -> None:
        while True:
            self.ticks += 1
            await asyncio.sleep(0)

    @contextlib.asynccontextmanager
    async def running(self) -> AsyncIterator[Ticker]:
        task = asyncio.create_task(self._run())
        try:
            yield self
        finally:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
