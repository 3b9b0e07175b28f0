"""Change markers and write notifications (design 0069, :mod:`polyloop.watching`).

- every store gives markers: for any drawn sequence of writes to a few runs, each write moves
  the written run's marker to one it never had, leaves the others' alone, and
  ``change_markers()`` is each listed run's ``change_marker`` (``change_markers(run_ids)`` those
  of the given runs written), as another store object on the same storage sees it;
- PostgreSQL notifies: a listener hears each run written by another store object (a run_id
  with NUL and 10 kB too), only after the write committed, and a 1.0 schema (written before
  the trigger) gets it from the next writer.
"""

from __future__ import annotations

import asyncio
import tempfile

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from psycopg import sql

from polyloop.ports import RunStore
from polyloop.stores.postgres import PostgresRunStore
from polyloop.testing import tool_step, write_records
from polyloop.watching import (
    ChangeMarking,
    supports_change_marking,
    supports_change_notifying,
)
from tests.stores._helpers import STORE_KINDS, close_store, open_store, started
from tests.stores._postgres import admin

RUNS = ("a", "b/../c", "\u00e9\u6f22")


def _marking(store: RunStore) -> ChangeMarking:
    assert supports_change_marking(store)
    assert isinstance(store, ChangeMarking)
    return store


@pytest.mark.parametrize("kind", STORE_KINDS)
@settings(
    max_examples=15,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(order=st.lists(st.sampled_from(range(len(RUNS))), min_size=1, max_size=8))
def test_each_write_moves_only_its_runs_marker_to_a_new_one(kind: str, order: list[int]) -> None:
    async def scenario(where: str) -> None:
        writer = open_store(kind, where)
        watcher = writer if kind == "memory" else open_store(kind, where)
        try:
            seen: dict[str, set[str]] = {}
            now = {run_id: await _marking(watcher).change_marker(run_id) for run_id in RUNS}
            for run_id in RUNS:
                seen[run_id] = {now[run_id]}
            steps = dict.fromkeys(RUNS, 0)
            for index in order:
                run_id = RUNS[index]
                if run_id not in written:
                    await writer.write_run_started(started(run_id))
                    written.add(run_id)
                else:
                    await write_records(writer, tool_step(run_id, steps[run_id]).records)
                    steps[run_id] += 1
                after = {r: await _marking(watcher).change_marker(r) for r in RUNS}
                assert after[run_id] not in seen[run_id]
                seen[run_id].add(after[run_id])
                assert {r: m for r, m in after.items() if r != run_id} == {
                    r: m for r, m in now.items() if r != run_id
                }
                now = after
                listed = await _marking(watcher).change_markers()
                assert {r: now[r] for r in listed} == dict(listed)
                assert set(listed) == written
                chosen = await _marking(watcher).change_markers([*RUNS, "never-written"])
                assert {r: now[r] for r in written} == dict(chosen)
        finally:
            await close_store(writer)
            if watcher is not writer:
                await close_store(watcher)

    written: set[str] = set()
    with tempfile.TemporaryDirectory() as where:
        asyncio.run(scenario(where))


@pytest.mark.server
async def test_postgres_notifies_each_run_written_by_another_store_after_it_commits(
    tmp_path: object,
) -> None:
    from tests.stores._postgres import open_postgres_store

    listener = open_postgres_store(str(tmp_path))
    writer = open_postgres_store(str(tmp_path))
    assert isinstance(listener, PostgresRunStore)
    assert supports_change_notifying(listener)
    odd = "nul\x00" + "x" * 10_000
    try:
        await listener.open()
        async with listener.watch_changes() as written:
            heard = asyncio.ensure_future(anext(written))
            await asyncio.sleep(0.2)
            assert not heard.done()  # nothing written yet: nothing heard
            await writer.write_run_started(started(odd))
            assert odd == await asyncio.wait_for(heard, 30)
            await write_records(writer, tool_step(odd, 0).records)
            await writer.write_run_started(started("plain"))
            got = {await asyncio.wait_for(anext(written), 30)}
            while "plain" not in got:
                got.add(await asyncio.wait_for(anext(written), 30))
            assert got <= {odd, "plain"}
    finally:
        await close_store(listener)
        await close_store(writer)


@pytest.mark.server
async def test_a_schema_written_before_the_trigger_gets_it_from_the_next_writer(
    tmp_path: object,
) -> None:
    from tests.stores._postgres import open_postgres_store

    first = open_postgres_store(str(tmp_path))
    assert isinstance(first, PostgresRunStore)
    await first.write_run_started(started("old"))
    await close_store(first)
    with admin() as connection:  # as a 1.0 schema was: no trigger, minor 0
        table = sql.Identifier(first.schema, "run_records")
        connection.execute(sql.SQL("DROP TRIGGER polyloop_notify_written ON {}").format(table))
        connection.execute(
            sql.SQL("UPDATE {} SET minor = 0").format(
                sql.Identifier(first.schema, "polyloop_schema")
            )
        )
    listener = open_postgres_store(str(tmp_path))
    writer = open_postgres_store(str(tmp_path))
    assert isinstance(listener, PostgresRunStore)
    try:
        async with listener.watch_changes() as written:
            await writer.write_run_started(started("new"))
            assert "new" == await asyncio.wait_for(anext(written), 30)
        with admin() as connection:
            row = connection.execute(
                sql.SQL("SELECT minor FROM {}").format(
                    sql.Identifier(first.schema, "polyloop_schema")
                )
            ).fetchone()
        assert row is not None
        assert 1 == row[0]
    finally:
        await close_store(listener)
        await close_store(writer)
