"""A store copied, moved or restored elsewhere resumes its runs there (design 0040).

Where a log lives is not a parameter of the run: a SQLite file copied to another directory, a
JSON Lines directory moved, a PostgreSQL schema dumped and restored into another database (under
another schema name) all resume the runs they hold. Runs recorded before the change, whose
snapshot still holds ``store.path``, ``store.directory`` or ``store.database`` and
``store.schema``, resume from the new place too (``tests/stores/fixtures/before-0040`` was
written by the stores as they were then); any other difference is still refused.
"""

from __future__ import annotations

import asyncio
import secrets
import shutil
import subprocess
from pathlib import Path

import pytest
from psycopg import sql
from psycopg.conninfo import make_conninfo

from polyloop.errors import SnapshotMismatchError
from polyloop.ports import RunStore
from polyloop.session import resume, run, run_snapshot
from polyloop.stores.jsonl import JsonlRunStore
from polyloop.stores.postgres import PostgresRunStore
from polyloop.stores.sqlite import SqliteRunStore
from polyloop.types import RunStarted, StopReason
from tests.loop_kit import Crash, CrashingStore
from tests.stores import _agent
from tests.stores._helpers import close_store
from tests.stores._postgres import USED_SCHEMAS, admin, server_url, session_prefix

FIXTURES = Path(__file__).parent / "fixtures" / "before-0040"
#: The run the fixtures hold: 4 steps of the store agent, cut after step 2's model intent.
FIXTURE_RUN = "moved-1"
STEPS = 4


def _file_store(kind: str, where: Path) -> RunStore:
    where.mkdir(parents=True, exist_ok=True)
    if kind == "sqlite":
        return SqliteRunStore(where / "runs.sqlite")
    return JsonlRunStore(where / "runs")


async def _crash_midway(store: RunStore, run_id: str) -> None:
    """Start ``run_id`` and crash it after 7 writes (in step 1, after its model result)."""
    with pytest.raises(Crash):
        await run(
            _agent.definition(CrashingStore(store, 7), STEPS),  # type: ignore[arg-type]
            _agent.request(run_id, 0, STEPS),
        )


async def _resume_to_the_end(store: RunStore, run_id: str) -> None:
    result = await resume(_agent.definition(store, STEPS), _agent.request(run_id, 0, STEPS))
    assert StopReason.AGENT_FINISHED == result.stop_reason
    assert STEPS == len(result.steps)
    assert [k for k in range(STEPS)] == [step.step_idx for step in result.steps]


@pytest.mark.parametrize("kind", ["sqlite", "jsonl"])
async def test_a_store_moved_to_another_directory_resumes_its_runs(
    tmp_path: Path, kind: str
) -> None:
    """A run crashed in ``old/``; its storage is moved to ``new/`` (the old place is gone)
    and the run resumes there to its end."""
    old, new = tmp_path / "old", tmp_path / "elsewhere" / "new"
    new.parent.mkdir()
    store = _file_store(kind, old)
    await _crash_midway(store, "mv-1")
    await close_store(store)
    shutil.move(old, new)
    moved = _file_store(kind, new)
    try:
        await _resume_to_the_end(moved, "mv-1")
    finally:
        await close_store(moved)
    assert not old.exists()


@pytest.mark.parametrize("kind", ["sqlite", "jsonl"])
async def test_a_copy_of_a_store_resumes_the_run_the_original_holds(
    tmp_path: Path, kind: str
) -> None:
    """A copy (a backup restored, an artefact downloaded) resumes the run, and the original
    is left as it was."""
    store = _file_store(kind, tmp_path / "original")
    await _crash_midway(store, "cp-1")
    before = await store.read_log("cp-1")
    await close_store(store)
    shutil.copytree(tmp_path / "original", tmp_path / "copy")
    copy = _file_store(kind, tmp_path / "copy")
    try:
        await _resume_to_the_end(copy, "cp-1")
    finally:
        await close_store(copy)
    original = _file_store(kind, tmp_path / "original")
    try:
        assert before == await original.read_log("cp-1")
    finally:
        await close_store(original)


@pytest.mark.parametrize("kind", ["sqlite", "jsonl"])
async def test_a_run_recorded_before_0040_resumes_from_its_new_place(
    tmp_path: Path, kind: str
) -> None:
    """The fixture was written at ``/srv/old-place`` by the stores before design 0040 (its
    snapshot names that place); copied anywhere, its run resumes, and its RunStarted stays
    exactly as it was recorded."""
    shutil.copytree(FIXTURES, tmp_path / "new-place")
    store = _file_store(kind, tmp_path / "new-place")
    try:
        started = (await store.read_log(FIXTURE_RUN)).started
        assert started is not None
        key = "store.path" if kind == "sqlite" else "store.directory"
        assert started.parameter_snapshot[key].startswith("/srv/old-place/")
        await _resume_to_the_end(store, FIXTURE_RUN)
        assert started == (await store.read_log(FIXTURE_RUN)).started
    finally:
        await close_store(store)


@pytest.mark.parametrize("kind", ["sqlite", "jsonl"])
async def test_a_run_recorded_before_0040_is_still_refused_under_another_configuration(
    tmp_path: Path, kind: str
) -> None:
    """Leaving out the old location keys hides nothing else: a changed model binding is
    still refused, naming it and not the location."""
    shutil.copytree(FIXTURES, tmp_path / "new-place")
    store = _file_store(kind, tmp_path / "new-place")
    try:
        with pytest.raises(SnapshotMismatchError) as refused:
            await resume(
                _agent.definition(store, STEPS),
                _agent.request(FIXTURE_RUN, 0, STEPS, project="other"),
            )
    finally:
        await close_store(store)
    assert "request.model_binding.project" in str(refused.value)
    assert "store." not in str(refused.value)


def _database_url(database: str) -> str:
    return make_conninfo(server_url(), dbname=database)


def _restore_elsewhere(schema: str, database: str, target: str) -> None:
    """pg_dump ``schema``, restore it into a new ``database`` and rename it ``restored``."""
    with admin() as connection:
        connection.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(database)))
    dump = subprocess.run(
        ["pg_dump", "--no-owner", "--schema", schema, "--dbname", server_url()],
        capture_output=True,
        check=True,
    ).stdout
    subprocess.run(
        ["psql", "--quiet", "--set", "ON_ERROR_STOP=1", "--dbname", target],
        input=dump,
        capture_output=True,
        check=True,
    )
    with admin(target) as connection:
        connection.execute(
            sql.SQL("ALTER SCHEMA {} RENAME TO restored").format(sql.Identifier(schema))
        )


@pytest.mark.server
async def test_a_schema_restored_into_another_database_resumes_its_runs() -> None:
    """pg_dump of the store's schema, restored into another database and renamed there:
    the run resumes from the restored copy."""
    schema = f"{session_prefix()}_moved"
    USED_SCHEMAS.add(schema)
    database = f"plt_restore_{secrets.token_hex(4)}"
    store = PostgresRunStore(server_url(), schema=schema)
    try:
        await _crash_midway(store, "pg-mv-1")
    finally:
        await store.aclose()
    target = _database_url(database)
    try:
        await asyncio.to_thread(_restore_elsewhere, schema, database, target)
        restored = PostgresRunStore(target, schema="restored")
        try:
            await _resume_to_the_end(restored, "pg-mv-1")
        finally:
            await restored.aclose()
    finally:
        with admin() as connection:
            connection.execute(
                sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(database))
            )


@pytest.mark.server
async def test_a_postgres_run_recorded_before_0040_resumes_in_another_schema() -> None:
    """A RunStarted whose snapshot names another database and schema (as the store recorded
    before design 0040) resumes in this one."""
    schema = f"{session_prefix()}_old_keys"
    USED_SCHEMAS.add(schema)
    store = PostgresRunStore(server_url(), schema=schema)
    try:
        request = _agent.request("pg-old-1", 0, STEPS)
        snapshot = dict(run_snapshot(_agent.definition(store, STEPS), request))
        snapshot |= {"store.database": "experiments", "store.schema": "dissect"}
        await store.write_run_started(RunStarted("pg-old-1", snapshot))
        await _resume_to_the_end(store, "pg-old-1")
    finally:
        await store.aclose()
