"""``polyloop fork RUN --at K --agent MODULE:FACTORY``: the lineage, the parameter differences,
nothing of the prefix executed again; ``show`` names a fork's source (design 0067)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from polyloop.batch import Episode
from polyloop.session import run
from polyloop.stores.sqlite import SqliteRunStore
from tests.batch._agents import build
from tests.batch._kit import FACTORY, ROOT, batch_env
from tests.cli._kit import Completed, polyloop
from tests.stores._agent import ledger_effects


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    return batch_env(tmp_path / "home")


def _cli(sqlite_path: Path, env: dict[str, str], *args: str) -> Completed:
    return polyloop(*args, "--store", f"sqlite://{sqlite_path}", env=env, cwd=ROOT)


async def _source(store: SqliteRunStore, ledger: Path) -> None:
    """``r-1``: look, pay, look, then the final answer (steps 0-3)."""
    data = {"run_id": "r-1", "steps": 3, "ledger": str(ledger)}
    agent = build(Episode("r-1", data), store)
    await run(agent.definition, agent.request)


async def test_fork_prints_lineage_and_differences_and_repeats_nothing(
    sqlite_store: SqliteRunStore, sqlite_path: Path, env: dict[str, str], tmp_path: Path
) -> None:
    ledger = tmp_path / "ledger"
    await _source(sqlite_store, ledger)
    assert 3 == len(ledger_effects(str(ledger)))
    episode = json.dumps({"steps": 5, "variant": "b", "ledger": str(ledger)})
    done = _cli(
        sqlite_path,
        env,
        "fork",
        "r-1",
        "--at",
        "2",
        "--agent",
        FACTORY,
        "--episode",
        episode,
        "--json",
    )
    assert 0 == done.code, done.stderr
    document: dict[str, Any] = done.json()
    assert ("r-1-fork-at-2", "r-1", 2, False, "world_as_is") == (
        document["run_id"],
        document["forked_from_run_id"],
        document["forked_at_step"],
        document["fork_left_in_doubt"],
        document["environment"],
    )
    assert ("agent_finished", 6) == (document["stop_reason"], document["steps"])
    differences = {d["key"]: (d["source"], d["fork"]) for d in document["parameter_differences"]}
    assert (None, "b") == differences["request.model_binding.variant"]
    assert ("3", "5") == differences["model_client.steps"]
    # the fork's own steps only: look 2, pay 3, look 4; nothing of steps 0-1 again
    forked = [(e["tool"], e["n"]) for e in ledger_effects(str(ledger)) if e["run_id"] != "r-1"]
    assert [("look", 2), ("pay", 3), ("look", 4)] == forked
    shown = _cli(sqlite_path, env, "show", "r-1-fork-at-2", "--json")
    assert 0 == shown.code, shown.stderr
    assert {
        "forked_from_run_id": "r-1",
        "forked_at_step": 2,
        "fork_left_in_doubt": False,
        "complete": True,
        "environment": "world_as_is",
        "replayed_steps": [],
    } == shown.json()["fork"]
    assert None is _cli(sqlite_path, env, "show", "r-1", "--json").json()["fork"]
    text = _cli(sqlite_path, env, "show", "r-1-fork-at-2")
    assert "r-1 at step 2 (steps 0-1 inherited)" in text.stdout
    assert "the world as it is" in text.stdout


async def test_fork_text_and_its_refusals(
    sqlite_store: SqliteRunStore, sqlite_path: Path, env: dict[str, str], tmp_path: Path
) -> None:
    await _source(sqlite_store, tmp_path / "ledger")
    episode = json.dumps({"steps": 3, "variant": "c"})
    args = ("--agent", FACTORY, "--episode", episode)
    text = _cli(sqlite_path, env, "fork", "r-1", "--at", "1", "--run-id", "f", *args)
    assert 0 == text.code, text.stderr
    assert "fork of" in text.stdout
    assert "request.model_binding.variant" in text.stdout
    assert "Run f stopped: agent_finished after 4 steps (1 inherited)." in text.stdout
    taken = _cli(sqlite_path, env, "fork", "r-1", "--at", "1", "--run-id", "f", *args)
    assert 2 == taken.code
    assert "already exists" in taken.stderr
    late = _cli(sqlite_path, env, "fork", "r-1", "--at", "4", "--run-id", "g", *args)
    assert 2 == late.code
    assert "ends a run" in late.stderr
    assert 5 == _cli(sqlite_path, env, "fork", "nope", "--at", "0", *args).code
    # the test agents' executor declares no isolated, fresh session (design 0072)
    replay = _cli(
        sqlite_path, env, "fork", "r-1", "--at", "1", "--run-id", "h", "--replay-prefix", *args
    )
    assert 2 == replay.code
    assert "does not declare" in replay.stderr
    assert 5 == _cli(sqlite_path, env, "show", "h").code  # nothing was written
    kept = _cli(
        sqlite_path, env, "fork", "r-1", "--at", "1", "--run-id", "h", "--no-replay-prefix", *args
    )
    assert 0 == kept.code, kept.stderr
    assert "the world as it is" in kept.stdout


class _CutBatch:
    """The sqlite store, but its next batch keeps only its first ``keep`` records and the
    process "dies" (a BaseException): what a crash may leave of one write. Its copy capability
    is hidden (``None``), so the fork writes its copy with that one batch."""

    copy_records = None

    def __init__(self, inner: SqliteRunStore, keep: int) -> None:
        self.inner, self.keep = inner, keep

    async def write_records(self, records: Any) -> None:
        await self.inner.write_records(records[: self.keep])
        raise KeyboardInterrupt

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


async def test_show_names_a_fork_cut_short_and_forking_again_completes_it(
    sqlite_store: SqliteRunStore, sqlite_path: Path, env: dict[str, str], tmp_path: Path
) -> None:
    from polyloop.session import fork

    await _source(sqlite_store, tmp_path / "ledger")
    data = {"run_id": "cut", "steps": 3}
    agent = build(Episode("cut", data), _CutBatch(sqlite_store, 5))  # type: ignore[arg-type]
    with pytest.raises(KeyboardInterrupt):
        await fork(agent.definition, agent.request, source_run_id="r-1", at_step=2)
    shown = _cli(sqlite_path, env, "show", "cut", "--json")
    assert False is shown.json()["fork"]["complete"]
    assert "incomplete fork" in _cli(sqlite_path, env, "show", "cut").stdout
    # no driver is on it and resume refuses it: not "running" (design 0072)
    row = next(
        r for r in _cli(sqlite_path, env, "runs", "--json").json()["runs"] if r["run_id"] == "cut"
    )
    assert ("incomplete_fork", "created", None) == (row["status"], row["run_status"], row["tail"])
    assert "incomplete fork" in _cli(sqlite_path, env, "runs").stdout
    refused = _cli(sqlite_path, env, "plan", "cut")
    assert 15 == refused.code
    assert "copy a crash cut short" in refused.stderr
    episode = json.dumps({"steps": 3})
    done = _cli(
        sqlite_path,
        env,
        "fork",
        "r-1",
        "--at",
        "2",
        "--run-id",
        "cut",
        "--agent",
        FACTORY,
        "--episode",
        episode,
    )
    assert 0 == done.code, done.stderr
    assert True is _cli(sqlite_path, env, "show", "cut", "--json").json()["fork"]["complete"]
    row = next(
        r for r in _cli(sqlite_path, env, "runs", "--json").json()["runs"] if r["run_id"] == "cut"
    )
    assert ("finished", "succeeded") == (row["status"], row["run_status"])
