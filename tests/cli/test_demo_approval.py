"""`polyloop demo --approval`: the refund waits for a person; the printed `polyloop approve`
command approves it and continues the run, offline, in seconds (issue 24)."""

from __future__ import annotations

import shlex
import time
from collections import Counter
from pathlib import Path

from tests.cli._kit import clean_env, pasted, polyloop, users_shell
from tests.cli.test_demo import ledger_counts


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
    assert "--agent polyloop_cli.demo_approval:agent" in command
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
