"""Each durable store writes a step's observation once (design 0041), and reads back exactly
what the loop wrote: after a live run, after a crash and a resume by another store object,
and when the object writing the RunFinished never saw the steps."""

from __future__ import annotations

import sqlite3
from dataclasses import replace
from pathlib import Path

import pytest
from psycopg import sql

from polyloop.ports import RunStore
from polyloop.session import AgentDefinition, RunRequest, resume, run
from polyloop.stores.jsonl import JsonlRunStore
from polyloop.stores.postgres import PostgresRunStore
from polyloop.stores.sqlite import SqliteRunStore
from polyloop.testing import ScriptedModelClient, reply
from polyloop.tools import Tool, ToolRegistry, ToolSpec
from polyloop.types import ReplayPolicy, StopReason
from tests.loop_kit import Crash, CrashingStore
from tests.stores import _agent
from tests.stores._helpers import close_store, finished, started, step_completed
from tests.stores._postgres import USED_SCHEMAS, admin, server_url, session_prefix

STEPS = 3
KINDS = ["jsonl", "sqlite", "postgres"]


def _observation(k: int) -> str:
    return f"observation of step {k}: " + "".join(
        f"line {n} of the tool's output\n" for n in range(200)
    )


def _tools() -> ToolRegistry:
    counter = iter(range(1_000))
    return ToolRegistry(
        [
            Tool(
                ToolSpec("read", "Read.", {"type": "object"}, ReplayPolicy.SAFE),
                lambda arguments: _observation(next(counter)),
            )
        ]
    )


def _run(store: RunStore, run_id: str) -> tuple[AgentDefinition, RunRequest]:
    """The store agent, whose tool returns a long observation, different at every step."""
    registry = _tools()
    script = [reply("CALL read {}", call_id=f"c{k}") for k in range(STEPS)] + [reply("FINAL: ok")]
    definition = replace(
        _agent.definition(store, STEPS),
        model_client=ScriptedModelClient(script, by_call_index=True),  # type: ignore[arg-type]
    )
    request = replace(
        _agent.request(run_id, 0, STEPS), tools=registry, action_executor=registry.executor()
    )
    return definition, request


def _open(kind: str, where: Path) -> RunStore:
    if kind == "jsonl":
        return JsonlRunStore(where / "runs")
    if kind == "sqlite":
        return SqliteRunStore(where / "runs.sqlite")
    schema = f"{session_prefix()}_bytes_{where.name[-12:]}"
    USED_SCHEMAS.add(schema)
    return PostgresRunStore(server_url(), schema=schema)


def _stored(store: RunStore, run_id: str) -> list[bytes]:
    """What the store holds for the run, unit by unit (lines, or row bodies)."""
    if isinstance(store, JsonlRunStore):
        return Path(store.path_for(run_id)).read_bytes().splitlines()
    if isinstance(store, SqliteRunStore):
        with sqlite3.connect(store.path) as connection:
            rows = connection.execute(
                "SELECT CAST(body AS BLOB) FROM run_records WHERE run_id = ? ORDER BY seq",
                (run_id,),
            ).fetchall()
        return [bytes(row[0]) for row in rows]
    assert isinstance(store, PostgresRunStore)
    with admin() as connection:
        query = sql.SQL("SELECT body FROM {} WHERE run_id = %s ORDER BY seq").format(
            sql.Identifier(store.schema, "run_records")
        )
        return [bytes(row[0]) for row in connection.execute(query, (run_id.encode(),))]


def _reopened(kind: str, store: RunStore, where: Path) -> RunStore:
    if isinstance(store, PostgresRunStore):
        return PostgresRunStore(server_url(), schema=store.schema)
    return _open(kind, where)


def _each_observation_once(units: list[bytes]) -> None:
    data = b"\n".join(units)
    counts = [data.count(f"observation of step {k}:".encode()) for k in range(STEPS)]
    assert [1] * STEPS == counts
    assert b'"steps_of_log":[0,1,2,3]' in units[-1]


@pytest.mark.parametrize("kind", KINDS)
async def test_a_live_run_stores_each_observation_once_and_reads_back_whole(
    kind: str, tmp_path: Path
) -> None:
    """One text per observation on disk; a second store object reads the very result."""
    where = tmp_path
    store = _open(kind, where)
    other = _reopened(kind, store, where)
    try:
        result = await run(*_run(store, "once-1"))
        assert StopReason.AGENT_FINISHED == result.stop_reason
        _each_observation_once(_stored(store, "once-1"))
        log = await other.read_log("once-1")
        assert log.finished is not None
        assert result == log.finished.result
        assert [s.step for s in log.steps] == list(result.steps)
        assert [s.action_outcome.observation for s in log.steps[:STEPS]] == [  # type: ignore[union-attr]
            _observation(k) for k in range(STEPS)
        ]
    finally:
        await close_store(store)
        await close_store(other)


@pytest.mark.parametrize("kind", KINDS)
async def test_a_resumed_run_refers_to_the_steps_an_earlier_process_wrote(
    kind: str, tmp_path: Path
) -> None:
    """A crash after step 1; a fresh store object resumes (under the lease it reads the log)
    and its RunFinished still refers to every step, read back whole."""
    where = tmp_path
    store = _open(kind, where)
    definition, request = _run(store, "resumed-1")
    crashing = replace(definition, store=CrashingStore(store, 9))
    with pytest.raises(Crash):
        await run(crashing, request)
    await close_store(store)
    fresh = _reopened(kind, store, where)
    try:
        definition, request = _run(fresh, "resumed-1")
        result = await resume(definition, request)
        units = _stored(fresh, "resumed-1")
        assert b'"steps_of_log":[0,1,2,3]' in units[-1]
        log = await fresh.read_log("resumed-1")
        assert log.finished is not None
        assert result == log.finished.result
    finally:
        await close_store(fresh)


@pytest.mark.parametrize("kind", KINDS)
async def test_a_run_finished_from_an_object_that_never_saw_the_steps_is_written_whole(
    kind: str, tmp_path: Path
) -> None:
    """Without knowing the steps are stored, a store object writes the RunFinished in full."""
    where = tmp_path
    store = _open(kind, where)
    other = _reopened(kind, store, where)
    try:
        await store.write_run_started(started("whole-1"))
        await store.write_step_completed(step_completed("whole-1", 0, "seen"))
        record = finished("whole-1", 1)
        await other.write_run_finished(record)
        units = _stored(store, "whole-1")
        assert b"steps_of_log" not in units[-1]
        assert record == (await store.read_log("whole-1")).finished
    finally:
        await close_store(store)
        await close_store(other)
