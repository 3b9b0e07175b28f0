"""`polyloop demo --approval`: the refund waits for a person; the printed `polyloop approve`
command approves it and continues the run, offline, in seconds (issue 24)."""

from __future__ import annotations

import shlex
import time
from collections import Counter
from pathlib import Path
from typing import Any

from tests.cli._kit import (
    assert_one_line_error,
    clean_env,
    pasted,
    polyloop,
    printed_commands,
    users_shell,
)
from tests.cli.demo.test_demo import ledger_counts


def test_the_refund_waits_and_the_printed_approve_command_continues_the_run(
    tmp_path: Path,
) -> None:
    """The demo parks before issue_refund (no refund in the ledger, the run waiting_approval);
    the approve command it prints, pasted into the user's shell, refunds once and closes the
    ticket (task_completed); the whole flow takes seconds."""
    home = tmp_path / "home"
    env = clean_env(home)
    started = time.monotonic()
    shown = polyloop("demo", "--approval", env=env, cwd=tmp_path)
    assert 0 == shown.code, shown.stderr
    document = polyloop("demo", "--approval", "--json", env=env, cwd=tmp_path).json()
    run_id, ledger = document["run_id"], Path(document["ledger"])
    assert ("waiting_approval", "issue_refund", 0) == (
        document["run_status"],
        document["pending_ask"]["tool_name"],
        document["refunds_so_far"],
    )
    assert Counter({"lookup_order": 1}) == ledger_counts(ledger, run_id)
    row = {r["run_id"]: r for r in polyloop("runs", "--json", env=env, cwd=tmp_path).json()["runs"]}
    assert "waiting_approval" == row[run_id]["run_status"]
    command = next(line.strip() for line in shown.stdout.splitlines() if " approve " in line)
    assert "--agent polyloop_cli.demo.approval:agent" in command
    approved = pasted(command, env=users_shell(home), cwd=tmp_path)
    assert 0 == approved.code, approved.stderr
    assert "task_completed" in approved.stdout
    shown_run = shown.stdout.split("Run ", 1)[1].split(" ", 1)[0]
    assert Counter({"lookup_order": 1, "issue_refund": 1, "close_ticket": 1}) == ledger_counts(
        ledger, shown_run
    )
    again = polyloop(*shlex.split(document["approve_command"])[1:], env=env, cwd=tmp_path)
    assert 0 == again.code, again.stderr
    assert Counter({"lookup_order": 1, "issue_refund": 1, "close_ticket": 1}) == ledger_counts(
        ledger, run_id
    )
    assert time.monotonic() - started < 60


def _parked_demo(tmp_path: Path, env: dict[str, str]) -> dict[str, Any]:
    document: dict[str, Any] = polyloop(
        "demo", "--approval", "--json", env=env, cwd=tmp_path
    ).json()
    return document


def test_the_demo_agent_without_its_episode_is_refused_before_anything_is_written(
    tmp_path: Path,
) -> None:
    """`approve RUN --agent …demo_approval:agent` without --episode (the ledger): exit 22, one
    line saying to pass --episode, and the run still waits (nothing recorded); `resume`
    without it exits 22 too instead of an internal error."""
    env = clean_env(tmp_path / "home")
    document = _parked_demo(tmp_path, env)
    run_id = document["run_id"]
    step = str(document["pending_ask"]["step"])
    agent = ("--agent", "polyloop_cli.demo.approval:agent")
    refused = polyloop("approve", run_id, "--step", step, *agent, env=env, cwd=tmp_path)
    assert_one_line_error(refused, 22)
    assert "--episode" in refused.stderr
    assert "ledger" in refused.stderr
    waiting = polyloop("pending", "--json", env=env, cwd=tmp_path).json()["pending"]
    assert [run_id] == [ask["run_id"] for ask in waiting]
    assert_one_line_error(polyloop("resume", run_id, *agent, env=env, cwd=tmp_path), 22)


def test_pending_prints_for_a_demo_run_the_command_that_approves_and_continues_it(
    tmp_path: Path,
) -> None:
    """For a run of the approval demo, `pending` (at COLUMNS=80) prints approve with the demo's
    own --agent and --episode: pasted into the user's shell, it refunds once and finishes."""
    home = tmp_path / "home"
    env = clean_env(home)
    document = _parked_demo(tmp_path, env)
    listed = polyloop("pending", env={**env, "COLUMNS": "80"}, cwd=tmp_path)
    lines = listed.stdout.splitlines()
    assert [] == [line for line in lines if len(line) > 80], listed.stdout
    start = next(i for i, line in enumerate(lines) if "decide with" in line)
    approve = printed_commands(lines[start + 1 :])[0]
    assert "polyloop_cli.demo.approval:agent" in approve
    approved = pasted(approve, env={**users_shell(home), "COLUMNS": "80"}, cwd=tmp_path)
    assert 0 == approved.code, approved.stderr
    assert "task_completed" in approved.stdout
    counts = ledger_counts(Path(document["ledger"]), document["run_id"])
    assert Counter({"lookup_order": 1, "issue_refund": 1, "close_ticket": 1}) == counts


def test_approve_without_agent_prints_the_resume_command_that_continues_a_demo_run(
    tmp_path: Path,
) -> None:
    """`approve RUN` records the decision and prints how to resume: for a demo run, the demo's
    agent and episode, so the printed command (pasted) finishes the run."""
    home = tmp_path / "home"
    env = clean_env(home)
    document = _parked_demo(tmp_path, env)
    step = str(document["pending_ask"]["step"])
    approved = polyloop("approve", document["run_id"], "--step", step, env=env, cwd=tmp_path)
    assert 0 == approved.code, approved.stderr
    assert "MODULE:FACTORY" not in approved.stdout
    lines = approved.stdout.splitlines()
    start = next(i for i, line in enumerate(lines) if line.endswith("e.g. with:"))
    (resume,) = printed_commands(lines[start + 1 :])
    resumed = pasted(resume, env=users_shell(home), cwd=tmp_path)
    assert 0 == resumed.code, resumed.stderr
    assert "task_completed" in resumed.stdout


async def test_the_approval_demos_runs_are_told_by_their_snapshot(tmp_path: Path) -> None:
    """`agent_words` gives the demo's agent and an episode that rebuilds the same snapshot
    (scripted or through a gateway) for the approval demo's snapshot, and nothing for the
    crash demo's or another agent's."""
    import json

    from polyloop.batch import Episode
    from polyloop.session import run_snapshot
    from polyloop.stores.sqlite import SqliteRunStore
    from polyloop_cli.demo.approval import AGENT, agent, agent_words
    from polyloop_cli.demo.task import ModelConfig, build_agent, model_client
    from polyloop_cli.shared.stores import StoreUrl

    path = tmp_path / "runs.sqlite"
    url = StoreUrl.of_file("sqlite", path)
    async with SqliteRunStore(path) as store:
        for config in (ModelConfig(), ModelConfig("http://127.0.0.1:9/v1", "some-model")):
            client = model_client(config)
            try:
                built = build_agent(
                    run_id="r",
                    store=store,
                    ledger=tmp_path / "elsewhere.jsonl",
                    model=client,
                    approval=True,
                )
                crash = build_agent(run_id="r", store=store, ledger=tmp_path / "l", model=client)
            finally:
                aclose = getattr(client, "aclose", None)
                if callable(aclose):
                    await aclose()
            snapshot = run_snapshot(*built)
            words = agent_words(snapshot, url)
            assert words is not None
            assert ("--agent", AGENT, "--episode") == words[:3]
            data = json.loads(words[3])
            assert str(tmp_path / "runs-ledger.jsonl") == data["ledger"]
            async with agent(Episode("r", data), store) as rebuilt:
                again = run_snapshot(rebuilt.definition, rebuilt.request)
            assert snapshot == again
            assert agent_words(run_snapshot(*crash), url) is None
    assert agent_words({"model_client.kind": "scripted"}, url) is None
