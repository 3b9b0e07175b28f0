"""``polyloop pending``, ``approve``, ``reject``, ``edit``, ``answer`` and ``resume`` on a real
SQLite store, each run as the real command in its own process (issue 24, design 0053)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from rich.cells import cell_len

from polyloop.batch import Episode
from polyloop.session import run_or_park
from polyloop.stores.sqlite import SqliteRunStore
from polyloop.types import ActionStatus
from tests.batch._agents import build
from tests.batch._kit import FACTORY, ROOT, batch_env
from tests.cli._kit import Completed, assert_one_line_error, pasted, polyloop, printed_commands
from tests.stores._agent import ledger_effects as read_lines

#: Long enough that the arguments fold; wide characters count two columns.
NOTE = "refund for order A-17, customer asked twice; 退款理由: 商品破损 " * 4


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    return batch_env(tmp_path / "home")


async def _park(store: SqliteRunStore, run_id: str, **data: Any) -> dict[str, Any]:
    """Drive run ``run_id`` of the batch tests' agent until it parks; its episode data."""
    episode = {"run_id": run_id, **data}
    parked = await run_or_park(*_agent(store, episode))
    assert not hasattr(parked, "stop_reason"), parked
    return episode


def _agent(store: SqliteRunStore, episode: dict[str, Any]) -> tuple[Any, Any]:
    agent = build(Episode(episode["run_id"], episode), store)
    return agent.definition, agent.request


def _cli(sqlite_path: Path, env: dict[str, str], *args: str) -> Completed:
    return polyloop(*args, "--store", f"sqlite://{sqlite_path}", env=env, cwd=ROOT)


def _resume(sqlite_path: Path, env: dict[str, str], episode: dict[str, Any]) -> Completed:
    data = json.dumps({k: v for k, v in episode.items() if k != "run_id"})
    return _cli(
        sqlite_path, env, "resume", episode["run_id"], "--agent", FACTORY, "--episode", data
    )


def _pays(tmp_path: Path) -> list[dict[str, Any]]:
    return [line for line in read_lines(str(tmp_path / "ledger")) if line["tool"] == "pay"]


async def test_pending_shows_the_arguments_at_80_columns_and_their_digest(
    sqlite_store: SqliteRunStore, sqlite_path: Path, env: dict[str, str]
) -> None:
    """Every line `pending` prints for the arguments fits 80 columns, and together they hold
    the whole note; --json has the ask's fields, the arguments as JSON and the full digest."""
    await _park(sqlite_store, "r-1", gated=True, note=NOTE)
    listed = _cli(sqlite_path, env, "pending")
    assert 0 == listed.code, listed.stderr
    lines = listed.stdout.splitlines()
    start = next(i for i, line in enumerate(lines) if "arguments (sha256" in line)
    end = next(i for i, line in enumerate(lines) if "decide with:" in line)
    block = lines[start + 1 : end]
    assert [] == [line for line in block if cell_len(line) > 80]
    assert NOTE.replace(" ", "") in "".join(line.strip() for line in block).replace(" ", "")
    assert "run r-1 · approval of pay at step 1" in listed.stdout
    document = _cli(sqlite_path, env, "pending", "--json").json()
    (ask,) = document["pending"]
    assert ("r-1", 1, "approval", "pay", {"n": 1, "note": NOTE}) == (
        ask["run_id"],
        ask["step"],
        ask["kind"],
        ask["tool_name"],
        ask["arguments"],
    )
    assert 64 == len(ask["arguments_sha256"])
    assert f"--step 1 --sha256 {ask['arguments_sha256'][:12]}" in listed.stdout


async def test_approve_bound_to_the_shown_digest_then_resume_runs_the_action_once(
    sqlite_store: SqliteRunStore, sqlite_path: Path, env: dict[str, str], tmp_path: Path
) -> None:
    """A digest of other arguments is refused (exit 11, nothing written); the shown one is
    recorded once (a second approve exits 10); resume carries the approved pay out once."""
    episode = await _park(sqlite_store, "r-2", gated=True, ledger=str(tmp_path / "ledger"))
    before = await sqlite_store.read_log("r-2")
    stale = _cli(sqlite_path, env, "approve", "r-2", "--step", "1", "--sha256", "deadbeef00")
    assert_one_line_error(stale, 11)
    assert before == await sqlite_store.read_log("r-2")
    digest = _cli(sqlite_path, env, "pending", "--json").json()["pending"][0]["arguments_sha256"]
    approved = _cli(
        sqlite_path, env, "approve", "r-2", "--step", "1", "--sha256", digest[:8], "--by", "ana"
    )
    assert 0 == approved.code, approved.stderr
    assert "approval of pay at step 1 approved" in approved.stdout
    again = _cli(sqlite_path, env, "approve", "r-2", "--step", "1")
    assert_one_line_error(again, 10)
    assert "already decided" in again.stderr
    resumed = _resume(sqlite_path, env, episode)
    assert 0 == resumed.code, resumed.stderr
    assert "agent_finished" in resumed.stdout
    assert [("r-2", 1)] == [(line["run_id"], line["n"]) for line in _pays(tmp_path)]
    log = await sqlite_store.read_log("r-2")
    assert ("approve", "ana") == (log.answers[0].verdict.value, log.answers[0].decided_by)


async def test_reject_then_resume_ends_the_step_not_executed_with_the_reason(
    sqlite_store: SqliteRunStore, sqlite_path: Path, env: dict[str, str], tmp_path: Path
) -> None:
    """`reject` needs --reason; after it, resume records the pay step not_executed with an
    observation that carries the reason, and pay never ran."""
    episode = await _park(sqlite_store, "r-3", gated=True, ledger=str(tmp_path / "ledger"))
    assert 2 == _cli(sqlite_path, env, "reject", "r-3", "--step", "1").code
    rejected = _cli(
        sqlite_path, env, "reject", "r-3", "--step", "1", "--reason", "over the monthly limit"
    )
    assert 0 == rejected.code, rejected.stderr
    assert 0 == _resume(sqlite_path, env, episode).code
    step = (await sqlite_store.read_log("r-3")).steps[1].step
    assert (ActionStatus.NOT_EXECUTED, True) == (
        step.action_status,
        "over the monthly limit" in step.observation,
    )
    assert [] == _pays(tmp_path)


async def test_edit_is_validated_by_the_tools_schema_then_the_edited_call_runs(
    sqlite_store: SqliteRunStore, sqlite_path: Path, env: dict[str, str], tmp_path: Path
) -> None:
    """Arguments the schema refuses exit 13 and write nothing; accepted ones are what resume
    executes."""
    episode = await _park(sqlite_store, "r-4", gated=True, ledger=str(tmp_path / "ledger"))
    data = json.dumps({k: v for k, v in episode.items() if k != "run_id"})
    agent = ("--step", "1", "--agent", FACTORY, "--episode", data)
    refused = _cli(sqlite_path, env, "edit", "r-4", "--arguments", '{"n": "x"}', *agent)
    assert_one_line_error(refused, 13)
    assert () == (await sqlite_store.read_log("r-4")).answers
    not_json = _cli(sqlite_path, env, "edit", "r-4", "--arguments", "{n:", *agent)
    assert_one_line_error(not_json, 2)
    edited = _cli(sqlite_path, env, "edit", "r-4", "--arguments", '{"n": 99}', *agent)
    assert 0 == edited.code, edited.stderr
    assert 0 == _resume(sqlite_path, env, episode).code
    assert [99] == [line["n"] for line in _pays(tmp_path)]


async def test_a_question_is_answered_and_the_answer_is_the_steps_observation(
    sqlite_store: SqliteRunStore, sqlite_path: Path, env: dict[str, str]
) -> None:
    """`pending` shows the question; approving it exits 13; `answer` records the text, which
    resume makes step 0's observation."""
    episode = await _park(sqlite_store, "r-5", question="Which colour?")
    listed = _cli(sqlite_path, env, "pending")
    assert "question at step 0" in listed.stdout
    assert "Which colour?" in listed.stdout
    assert_one_line_error(_cli(sqlite_path, env, "approve", "r-5", "--step", "0"), 13)
    answered = _cli(sqlite_path, env, "answer", "r-5", "blue, please", "--step", "0")
    assert 0 == answered.code, answered.stderr
    assert 0 == _resume(sqlite_path, env, episode).code
    step = (await sqlite_store.read_log("r-5")).steps[0].step
    assert "blue, please" == step.observation


async def test_deciding_what_does_not_wait_is_refused_by_class(
    sqlite_store: SqliteRunStore, sqlite_path: Path, env: dict[str, str]
) -> None:
    """A finished run exits 10, an unknown run 5, a run whose lease is held 12."""
    await run_or_park(*_agent(sqlite_store, {"run_id": "done"}))
    finished = _cli(sqlite_path, env, "answer", "done", "hi", "--step", "0")
    assert_one_line_error(finished, 10)
    assert "finished" in finished.stderr
    assert_one_line_error(_cli(sqlite_path, env, "approve", "nobody", "--step", "0"), 5)
    await _park(sqlite_store, "busy", gated=True)
    lease = await sqlite_store.acquire_run_lease("busy")
    try:
        assert_one_line_error(_cli(sqlite_path, env, "approve", "busy", "--step", "1"), 12)
    finally:
        await lease.release()
    assert () == (await sqlite_store.read_log("busy")).answers


async def test_resume_parks_again_exits_14_and_refuses_another_agent_with_15(
    sqlite_store: SqliteRunStore, sqlite_path: Path, env: dict[str, str]
) -> None:
    """A run with two gated pays parks again after the first is approved (exit 14, the new
    ask shown); resuming with other episode data (another snapshot) exits 15."""
    episode = await _park(sqlite_store, "r-6", gated=True, steps=4)
    assert 0 == _cli(sqlite_path, env, "approve", "r-6", "--step", "1").code
    other = _resume(sqlite_path, env, {**episode, "variant": "other"})
    assert_one_line_error(other, 15)
    again = _resume(sqlite_path, env, episode)
    assert 14 == again.code, again.stderr
    assert "approval of pay at step 3" in again.stdout
    assert "on a new ask (step 3)" in again.stderr


async def test_resume_of_an_undecided_run_says_it_still_waits_on_the_same_ask(
    sqlite_store: SqliteRunStore, sqlite_path: Path, env: dict[str, str]
) -> None:
    """Resumed before its ask is decided, a run parks on that same ask: exit 14, saying it
    is not decided yet (not "a new ask"); the commands shown continue it with the agent given."""
    episode = await _park(sqlite_store, "r-8", gated=True)
    again = _resume(sqlite_path, env, episode)
    assert_one_line_error(again, 14)
    assert "still waits for a person: its ask (step 1) is not decided yet" in again.stderr
    assert "new ask" not in again.stderr + again.stdout
    assert f"--agent {FACTORY}" in again.stdout


async def test_edit_prints_the_edited_arguments_and_a_resume_command_with_its_agent(
    sqlite_store: SqliteRunStore, sqlite_path: Path, env: dict[str, str], tmp_path: Path
) -> None:
    """`edit` confirms the arguments it approved (not the asked ones), and the resume command
    it prints carries the --agent and --episode it was given: pasted, the edited call runs."""
    episode = await _park(sqlite_store, "r-9", gated=True, ledger=str(tmp_path / "ledger"))
    data = json.dumps({k: v for k, v in episode.items() if k != "run_id"})
    agent = ("--agent", FACTORY, "--episode", data)
    edited = _cli(
        sqlite_path, env, "edit", "r-9", "--step", "1", "--arguments", '{"n": 99}', *agent
    )
    assert 0 == edited.code, edited.stderr
    assert "approved with edited arguments" in edited.stdout
    assert '"n": 99' in edited.stdout
    assert '"n": 1' not in edited.stdout
    lines = edited.stdout.splitlines()
    start = next(i for i, line in enumerate(lines) if line.endswith("e.g. with:"))
    (resume,) = printed_commands(lines[start + 1 :])
    assert 0 == pasted(resume, env=env, cwd=ROOT).code
    assert [99] == [line["n"] for line in _pays(tmp_path)]


async def test_runs_show_and_plan_explain_a_parked_run(
    sqlite_store: SqliteRunStore, sqlite_path: Path, env: dict[str, str]
) -> None:
    """`runs` says waiting_approval (and run_status in --json), `show` and `plan` say what
    waits, since when and its digest; after the decision show lists it with the ask."""
    await _park(sqlite_store, "r-7", gated=True)
    row = _cli(sqlite_path, env, "runs", "--json").json()["runs"][0]
    assert ("waiting_approval", "waiting_approval", 1) == (
        row["status"],
        row["run_status"],
        row["pending_ask"]["step"],
    )
    listed = _cli(sqlite_path, env, "runs").stdout
    assert "waiting_approval (step 1: pay)" in listed
    assert "Host status (run_status): waiting_approval 1." in listed
    shown = _cli(sqlite_path, env, "show", "r-7")
    assert 0 == shown.code, shown.stderr
    assert "Waiting for a person" in shown.stdout
    assert "announced, never completed" not in shown.stdout
    document = _cli(sqlite_path, env, "show", "r-7", "--json").json()
    digest = document["pending_ask"]["arguments_sha256"]
    assert digest[:12] in shown.stdout
    assert document["pending_ask"]["asked_at"] in shown.stdout
    plan = _cli(sqlite_path, env, "plan", "r-7", "--json").json()
    assert ("wait_for_decision", "waiting_approval", 1) == (
        plan["move"],
        plan["run_status"],
        plan["pending_ask"]["step"],
    )
    assert "waits for" in _cli(sqlite_path, env, "plan", "r-7").stdout
    assert (
        0
        == _cli(
            sqlite_path, env, "reject", "r-7", "--step", "1", "--reason", "no", "--by", "ana"
        ).code
    )
    assert "Decided: approval of pay at step 1 — reject by ana" in (
        _cli(sqlite_path, env, "show", "r-7").stdout
    )
    after = _cli(sqlite_path, env, "show", "r-7", "--json").json()
    assert (None, "running", "reject", "no") == (
        after["pending_ask"],
        after["run_status"],
        after["asks"][0]["decision"]["verdict"],
        after["asks"][0]["decision"]["reason"],
    )


@pytest.mark.parametrize("verb", ["approve", "reject", "edit"])
async def test_a_decision_sent_again_is_refused_for_the_next_alike_ask(
    verb: str,
    sqlite_store: SqliteRunStore,
    sqlite_path: Path,
    env: dict[str, str],
    tmp_path: Path,
) -> None:
    """Two pays with the same arguments (issue 36): the command that decided the ask of step 1,
    sent again once the run waits at step 3 (same --step, same --sha256), exits 11 naming both
    steps and writes nothing; the second pay never runs; without --step it is a usage error."""
    ledger = str(tmp_path / "ledger")
    episode = await _park(
        sqlite_store, "r-8", gated=True, steps=4, same_arguments=True, ledger=ledger
    )
    data = json.dumps({k: v for k, v in episode.items() if k != "run_id"})
    digest = _cli(sqlite_path, env, "pending", "--json").json()["pending"][0]["arguments_sha256"]
    extra = {
        "approve": (),
        "reject": ("--reason", "not today"),
        "edit": ("--arguments", '{"n": 7}', "--agent", FACTORY, "--episode", data),
    }[verb]
    command = (verb, "r-8", "--step", "1", "--sha256", digest[:12], *extra)
    missing = _cli(sqlite_path, env, verb, "r-8", "--sha256", digest[:12], *extra)
    assert_one_line_error(missing, 2)
    assert "--step" in missing.stderr
    decided = _cli(sqlite_path, env, *command)
    assert 0 == decided.code, decided.stderr
    assert 14 == _resume(sqlite_path, env, episode).code
    waiting = _cli(sqlite_path, env, "pending", "--json").json()["pending"][0]
    assert (3, digest) == (waiting["step"], waiting["arguments_sha256"])
    before = await sqlite_store.read_log("r-8")
    again = _cli(sqlite_path, env, *command)
    assert_one_line_error(again, 11)
    assert ("step 3", "step 1") == tuple(w for w in ("step 3", "step 1") if w in again.stderr)
    assert before == await sqlite_store.read_log("r-8")
    assert 14 == _resume(sqlite_path, env, episode).code
    paid = {"approve": [1], "reject": [], "edit": [7]}[verb]
    assert paid == [line["n"] for line in _pays(tmp_path)]


async def test_an_answer_names_its_question_and_is_refused_for_another_ask(
    sqlite_store: SqliteRunStore, sqlite_path: Path, env: dict[str, str], tmp_path: Path
) -> None:
    """`answer` needs --step (exit 2 without); an answer naming another step than the pending
    question exits 11; the answer to step 0 sent again when the run waits at step 1 exits 11
    and writes nothing; `pending` prints the --step in every command."""
    ledger = str(tmp_path / "ledger")
    episode = await _park(
        sqlite_store, "r-9", question="Which colour?", gated=True, steps=3, ledger=ledger
    )
    listed = _cli(sqlite_path, env, "pending")
    assert "answer r-9 '…' --step 0" in listed.stdout
    missing = _cli(sqlite_path, env, "answer", "r-9", "blue")
    assert_one_line_error(missing, 2)
    assert "--step" in missing.stderr
    assert_one_line_error(_cli(sqlite_path, env, "answer", "r-9", "blue", "--step", "2"), 11)
    assert () == (await sqlite_store.read_log("r-9")).answers
    assert 0 == _cli(sqlite_path, env, "answer", "r-9", "blue", "--step", "0").code
    assert 14 == _resume(sqlite_path, env, episode).code
    assert "--step 1 --sha256" in _cli(sqlite_path, env, "pending").stdout
    before = await sqlite_store.read_log("r-9")
    again = _cli(sqlite_path, env, "answer", "r-9", "blue", "--step", "0")
    assert_one_line_error(again, 11)
    assert ("step 1", "step 0") == tuple(w for w in ("step 1", "step 0") if w in again.stderr)
    assert before == await sqlite_store.read_log("r-9")
    assert [] == _pays(tmp_path)


async def test_the_page_of_a_parked_run_names_the_ask_by_its_step(
    sqlite_store: SqliteRunStore, sqlite_path: Path, env: dict[str, str], tmp_path: Path
) -> None:
    """`polyloop view` of a parked run says which ask it waits on and the --step that names
    it; once decided, the page no longer says it waits."""
    await _park(sqlite_store, "r-10", gated=True)
    page = tmp_path / "r-10.html"
    assert 0 == _cli(sqlite_path, env, "view", "r-10", "-o", str(page)).code
    shown = page.read_text(encoding="utf-8")
    assert "waiting for approval since" in shown
    assert "none yet; decide it naming --step 1" in shown
    assert 0 == _cli(sqlite_path, env, "approve", "r-10", "--step", "1").code
    assert 0 == _cli(sqlite_path, env, "view", "r-10", "-o", str(page)).code
    decided = page.read_text(encoding="utf-8")
    assert "decide it naming" not in decided
    assert "waiting for approval since" not in decided
