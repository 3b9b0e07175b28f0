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
from polyloop.stores.jsonl import JsonlRunStore
from polyloop.stores.memory import MemoryRunStore
from polyloop.stores.postgres import PostgresRunStore
from polyloop.stores.sqlite import SqliteRunStore
from polyloop.types import (
    ActionOutcome,
    ActionStatus,
    Intent,
    IntentKind,
    ModelCallResult,
    ModelReply,
    ReplayPolicy,
    RunFinished,
    RunResult,
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
    return RunStarted(run_id, {"model_client.kind": "scripted", "store.kind": "x", **extra})


def intent(run_id: str, kind: IntentKind, k: int) -> Intent:
    prefix = "model" if kind is IntentKind.MODEL_CALL else "action"
    return Intent(run_id, kind, k, f"{prefix}-{k}", ReplayPolicy.SAFE)


def model_result(run_id: str, k: int, *, failed: bool = False) -> ModelCallResult:
    if failed:
        return ModelCallResult(run_id, f"model-{k}", None, "RuntimeError: boom")
    return ModelCallResult(
        run_id, f"model-{k}", ModelReply(f"c{k}", f"CALL noop {{}} #{k}", "hm"), None
    )


def step(k: int, observation: str = "ok") -> StepRecord:
    return StepRecord(
        step_idx=k,
        raw_output=f"CALL noop {{}} #{k}",
        content_chars=14,
        thinking_chars=2,
        action="CALL noop {}",
        parse_ok=True,
        parse_error=None,
        observation=observation,
        observation_is_synthetic=False,
        observation_truncated_chars=0,
        prompt_chars=100 + k,
        call_id=f"c{k}",
        step_wall_ms=k,
        tool_name="noop",
        tool_arguments="{}",
        action_status=ActionStatus.EXECUTED,
    )


def step_completed(run_id: str, k: int, observation: str = "ok") -> StepCompleted:
    outcome = ActionOutcome(ActionStatus.EXECUTED, observation, False, False, 0)
    return StepCompleted(run_id, f"action-{k}", outcome, step(k, observation))


def finished(run_id: str, steps: int) -> RunFinished:
    return RunFinished(
        run_id,
        RunResult(run_id, StopReason.STEP_BUDGET, None, tuple(step(k) for k in range(steps))),
    )


async def write_run(store: RunStore, run_id: str, steps: int, *, finish: bool = True) -> RunLog:
    """Write a whole well-formed run through ``store``; return the log it should read back."""
    await store.write_run_started(started(run_id))
    for k in range(steps):
        await store.write_intent(intent(run_id, IntentKind.MODEL_CALL, k))
        await store.write_model_call_result(model_result(run_id, k))
        await store.write_intent(intent(run_id, IntentKind.ACTION, k))
        await store.write_step_completed(step_completed(run_id, k))
    if finish:
        await store.write_run_finished(finished(run_id, steps))
    return expected_log(run_id, steps, finish=finish)


def expected_log(run_id: str, steps: int, *, finish: bool = True) -> RunLog:
    intents: list[Intent] = []
    for k in range(steps):
        intents += [intent(run_id, IntentKind.MODEL_CALL, k), intent(run_id, IntentKind.ACTION, k)]
    return RunLog(
        started=started(run_id),
        intents=tuple(intents),
        model_results=tuple(model_result(run_id, k) for k in range(steps)),
        steps=tuple(step_completed(run_id, k) for k in range(steps)),
        finished=finished(run_id, steps) if finish else None,
    )


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
        from polyloop.stores._postgres_session import WritingSession

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
