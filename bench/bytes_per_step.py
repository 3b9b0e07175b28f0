"""Bytes per step on disk, before and after repeated text is written once (issue 27 item 5).

    uv run python bench/bytes_per_step.py [--steps 30] [--dir DIR]

One run per store and observation size drives the real loop: a scripted model calls a tool
returning an observation of 0, 200 and 20,000 characters (text with a line break every 80
characters), ``--steps`` times, then finishes. For each run:

- **after**: the bytes the store holds for the run (JSON Lines: the run file; SQLite and
  PostgreSQL: the stored bodies, without the database's own page and index overhead);
- **before**: the bytes of the same records as full lines of ``dumps_log_record``, which is
  what every store wrote before design 0041 (each observation three times);
- per step, and the **slope**: extra bytes per step for each extra observation character,
  ``(b(20,000) - b(200)) / 19,800``. The target is a slope of at most 1.2: bytes per step at most
  1.2x the observation plus a constant.

Every log is read back and compared with what the loop returned, so a shortcut in the stored form
that lost text would show here as an error. PostgreSQL is measured when
``POLYLOOP_TEST_POSTGRES_URL`` is set.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sqlite3
import tempfile

from polyloop.ports import RunStore
from polyloop.serialization import dumps_log_record
from polyloop.session import AgentDefinition, RunRequest, run
from polyloop.stores.jsonl import JsonlRunStore
from polyloop.stores.sqlite import SqliteRunStore
from polyloop.testing import LineDecisionParser, NullEventSink, ScriptedModelClient, reply
from polyloop.tools import Tool, ToolRegistry, ToolSpec
from polyloop.types import (
    Budget,
    Context,
    Message,
    ReplayPolicy,
    Role,
    SyntheticObservations,
    TextBlock,
)

SIZES = (0, 200, 20_000)
CONTEXT = Context(
    (Message(Role.SYSTEM, (TextBlock("You call tools."),)),),
    (Message(Role.USER, (TextBlock("Read the file until told to stop."),)),),
)


def observation(size: int) -> str:
    line = "The quick brown fox jumps over the lazy dog; 0123456789 and more text here...."
    text = (line[:79] + "\n") * (size // 80 + 1)
    return text[:size]


def _request(run_id: str, steps: int, text: str) -> RunRequest:
    registry = ToolRegistry(
        [
            Tool(
                ToolSpec("read", "Read the file.", {"type": "object"}, ReplayPolicy.SAFE),
                lambda a: text,
            )
        ]
    )
    return RunRequest(
        run_id=run_id,
        budget=Budget(steps + 2, steps + 2, 3, 100_000_000),
        action_executor=registry.executor(),
        tools=registry,
        context=CONTEXT,
        injections={},
        model_binding={},
        model_replay_policy=ReplayPolicy.SAFE,
        observation_template="Observation: {observation}",
        tool_section_template="Tools: {tools}",
        cancel_grace_seconds=1.0,
    )


def _definition(store: RunStore, steps: int) -> AgentDefinition:
    script = [reply("CALL read {}", call_id=f"c{k}") for k in range(steps)]
    return AgentDefinition(
        model_client=ScriptedModelClient([*script, reply("FINAL: done")], by_call_index=True),  # type: ignore[arg-type]
        decision_parser=LineDecisionParser(),
        store=store,
        event_sink=NullEventSink(),
        synthetic_observations=SyntheticObservations("rejected", "env failed", "model failed"),
    )


def _stored_bytes(kind: str, store: RunStore, run_id: str) -> int:
    if isinstance(store, JsonlRunStore):
        return os.path.getsize(store.path_for(run_id))
    if isinstance(store, SqliteRunStore):
        with sqlite3.connect(store.path) as connection:
            row = connection.execute(
                "SELECT sum(length(CAST(body AS BLOB))) FROM run_records WHERE run_id = ?",
                (run_id,),
            ).fetchone()
        return int(row[0])
    import psycopg
    from psycopg import sql

    assert kind == "postgres"
    with psycopg.connect(os.environ["POLYLOOP_TEST_POSTGRES_URL"]) as connection:
        query = sql.SQL("SELECT sum(octet_length(body)) FROM {} WHERE run_id = %s").format(
            sql.Identifier(store.schema, "run_records")  # type: ignore[attr-defined]
        )
        row = connection.execute(query, (run_id.encode(),)).fetchone()
    assert row is not None
    return int(row[0])


async def _measure(kind: str, store: RunStore, steps: int, size: int) -> tuple[float, float]:
    run_id = f"bytes-{kind}-{size}"
    result = await run(_definition(store, steps), _request(run_id, steps, observation(size)))
    log = await store.read_log(run_id)
    if log.finished is None or log.finished.result != result:
        raise SystemExit(f"{kind}: the log read back is not what the loop returned")
    records = [log.started, *log.intents, *log.model_results, *log.steps, log.finished]
    before = sum(len(dumps_log_record(r).encode()) + 1 for r in records if r is not None)
    after = _stored_bytes(kind, store, run_id)
    return before / steps, after / steps


def _open(kind: str, base: str) -> RunStore:
    if kind == "jsonl":
        return JsonlRunStore(os.path.join(base, "jsonl"))
    if kind == "sqlite":
        return SqliteRunStore(os.path.join(base, "runs.sqlite"))
    from polyloop.stores.postgres import PostgresRunStore

    return PostgresRunStore(
        os.environ["POLYLOOP_TEST_POSTGRES_URL"], schema=f"bench_bytes_{os.getpid()}"
    )


async def _close(store: RunStore) -> None:
    if hasattr(store, "aclose"):
        await store.aclose()


async def main(steps: int, base: str) -> None:
    kinds = ["jsonl", "sqlite"] + (
        ["postgres"] if os.environ.get("POLYLOOP_TEST_POSTGRES_URL") else []
    )
    print(f"bytes per step, {steps}-step runs (observation with a line break every 80 characters)")
    print(f"{'store':<9}{'observation':>12}{'before':>12}{'after':>12}{'after/obs':>11}")
    for kind in kinds:
        store = _open(kind, base)
        try:
            figures = {size: await _measure(kind, store, steps, size) for size in SIZES}
        finally:
            await _close(store)
            if kind == "postgres":
                import psycopg
                from psycopg import sql

                with psycopg.connect(
                    os.environ["POLYLOOP_TEST_POSTGRES_URL"], autocommit=True
                ) as c:
                    c.execute(
                        sql.SQL("DROP SCHEMA {} CASCADE").format(sql.Identifier(store.schema))
                    )  # type: ignore[attr-defined]
        for size, (before, after) in figures.items():
            ratio = f"{after / size:.2f}" if size else "-"
            print(f"{kind:<9}{size:>12,}{before:>12,.0f}{after:>12,.0f}{ratio:>11}")
        low, high = SIZES[1], SIZES[2]
        slope_before = (figures[high][0] - figures[low][0]) / (high - low)
        slope_after = (figures[high][1] - figures[low][1]) / (high - low)
        print(
            f"{kind:<9}{'slope':>12}{slope_before:>12.2f}{slope_after:>12.2f}"
            f"{'(target <= 1.2)':>17}"
        )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=30, help="steps per run (default 30)")
    parser.add_argument("--dir", default=None, help="where to put the files (default: a temp dir)")
    arguments = parser.parse_args()
    with tempfile.TemporaryDirectory(dir=arguments.dir) as base:
        asyncio.run(main(arguments.steps, base))
