"""``polyloop replay --parser MODULE:FACTORY RUN...``: recorded replies read again by another
parser; the steps it decides differently, as text and JSON (design 0067)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from polyloop.batch import Episode
from polyloop.session import run
from polyloop.stores.sqlite import SqliteRunStore
from tests.batch._agents import build
from tests.batch._kit import ROOT, batch_env
from tests.cli._kit import Completed, polyloop


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    return batch_env(tmp_path / "home")


async def _runs(store: SqliteRunStore, *run_ids: str) -> None:
    for run_id in run_ids:
        agent = build(Episode(run_id, {"run_id": run_id, "steps": 3}), store)
        await run(agent.definition, agent.request)


def _replay(sqlite_path: Path, env: dict[str, str], *args: str) -> Completed:
    return polyloop("replay", *args, "--store", f"sqlite://{sqlite_path}", env=env, cwd=ROOT)


async def test_replay_reports_the_one_decision_a_parser_changes(
    sqlite_store: SqliteRunStore, sqlite_path: Path, env: dict[str, str]
) -> None:
    await _runs(sqlite_store, "r-1", "r-2")
    before = await sqlite_store.read_log("r-1")
    done = _replay(
        sqlite_path, env, "--parser", "tests.cli._parsers:pay_is_invalid", "r-1", "r-2", "--json"
    )
    assert 0 == done.code, done.stderr
    document: dict[str, Any] = done.json()
    assert "tests.cli._parsers:pay_is_invalid" == document["parser"]
    for report in document["runs"]:
        assert 4 == report["steps_replayed"]
        assert [1] == report["differing_steps"]  # look, pay, look, final: only pay changes
        fields = {d["field"]: (d["recorded"], d["replayed"]) for d in report["differences"]}
        assert ("action", "invalid") == fields["decision"]
        assert (None, "pay is no longer allowed") == fields["parse_error"]
        assert ("pay", None) == fields["tool_name"]
    text = _replay(sqlite_path, env, "--parser", "tests.cli._parsers:pay_is_invalid", "r-1")
    assert 0 == text.code, text.stderr
    assert "Run r-1: 4 recorded replies replayed, 1 step(s) decided differently." in text.stdout
    assert "pay is no longer allowed" in text.stdout
    assert before == await sqlite_store.read_log("r-1")  # nothing written


async def test_replay_with_the_same_parser_and_its_refusals(
    sqlite_store: SqliteRunStore, sqlite_path: Path, env: dict[str, str]
) -> None:
    await _runs(sqlite_store, "r-1")
    same = _replay(sqlite_path, env, "--parser", "tests.cli._parsers:same", "r-1", "--json")
    assert 0 == same.code, same.stderr
    assert [] == json.loads(same.stdout)["runs"][0]["differences"]
    assert 5 == _replay(sqlite_path, env, "--parser", "tests.cli._parsers:same", "nope").code
    wrong = _replay(sqlite_path, env, "--parser", "tests.cli._parsers:not_a_parser", "r-1")
    assert 22 == wrong.code
    assert "no parse(reply) method" in wrong.stderr
    assert 22 == _replay(sqlite_path, env, "--parser", "no_such_module:x", "r-1").code
