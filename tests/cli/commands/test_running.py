"""``polyloop runs`` and ``polyloop plan`` tell a run being driven now from an unfinished one."""

from __future__ import annotations

import os
import socket

import pytest

from polyloop.stores.jsonl import JsonlRunStore
from polyloop.stores.sqlite import SqliteRunStore
from tests.cli._kit import polyloop
from tests.cli.test_commands import fill


@pytest.fixture(params=["sqlite", "jsonl"])
async def filled(
    request: pytest.FixtureRequest, sqlite_store: SqliteRunStore, jsonl_store: JsonlRunStore
) -> tuple[str, SqliteRunStore | JsonlRunStore]:
    store: SqliteRunStore | JsonlRunStore = (
        sqlite_store if request.param == "sqlite" else jsonl_store
    )
    await fill(store)
    where = store.path if isinstance(store, SqliteRunStore) else store.directory
    return f"{request.param}://{where}", store


def _rows(url: str, env: dict[str, str]) -> dict[str, dict[str, object]]:
    result = polyloop("runs", "--store", url, "--json", env=env)
    assert 6 == result.code, result.stderr  # `fill` also writes one corrupt run, run-bad
    return {row["run_id"]: row for row in result.json()["runs"]}


async def test_runs_shows_a_run_being_driven_now_as_running_with_its_holder(
    filled: tuple[str, SqliteRunStore | JsonlRunStore], env: dict[str, str]
) -> None:
    """While this process holds run-open's lease, `polyloop runs` (another process) lists it as
    running, naming this process; once released it is unfinished again."""
    url, store = filled
    lease = await store.acquire_run_lease("run-open")
    try:
        row = _rows(url, env)["run-open"]
        assert "running" == row["status"]
        holder = row["holder"]
        assert isinstance(holder, dict)
        assert (os.getpid(), socket.gethostname()) == (holder["process_id"], holder["host_name"])
        text = polyloop("runs", "--store", url, env=env).stdout
        assert f"running (pid {os.getpid()} on {socket.gethostname()})" in text
    finally:
        await lease.release()
    rows = _rows(url, env)
    assert ("unfinished", None) == (rows["run-open"]["status"], rows["run-open"]["holder"])
    assert "task_completed" == rows["run-done"]["stop_reason"]


async def test_plan_says_that_resume_would_be_refused_now_and_why(
    filled: tuple[str, SqliteRunStore | JsonlRunStore], env: dict[str, str]
) -> None:
    """`polyloop plan` of a run being driven says resume would be refused right now, naming
    the driver; the plan itself is still the recovery table's."""
    url, store = filled
    lease = await store.acquire_run_lease("run-open")
    try:
        document = polyloop("plan", "run-open", "--store", url, "--json", env=env).json()
        assert document["resume_refused_now"] is True
        assert os.getpid() == document["lease"]["holder"]["process_id"]
        assert "stop_state_unknown" == document["move"]
        text = polyloop("plan", "run-open", "--store", url, env=env).stdout
        assert f"resume would be refused: the run is being driven by process {os.getpid()}" in text
    finally:
        await lease.release()
    document = polyloop("plan", "run-open", "--store", url, "--json", env=env).json()
    assert (False, False) == (document["resume_refused_now"], document["lease"]["held"])
    text = polyloop("plan", "run-open", "--store", url, env=env).stdout
    assert "resume would be refused" not in text
