"""``polyloop show`` says where a run's unfinished step stands (design 0074): in doubt after a
crash, interrupted after a recorded reply, left when the run stopped, or under way while a
driver holds the run's lease — read by ``show`` in its own process from a real SQLite store."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from polyloop.serialization import LogRecord
from polyloop.stores.sqlite import SqliteRunStore
from polyloop.types import ReplayPolicy, StopReason
from tests.cli._kit import (
    action_intent,
    finished,
    model_intent,
    model_result,
    polyloop,
    started,
    tool_step,
    tool_step_records,
    write,
)

SAFE, NEVER = ReplayPolicy.SAFE, ReplayPolicy.NEVER


def _after_one_step(run_id: str, *tail: LogRecord) -> list[LogRecord]:
    return [started(run_id), *tool_step_records(run_id, 0, "lookup", SAFE), *tail]


#: run id → (its records, the state show reports, words its line must hold).
RUNS: dict[str, tuple[list[LogRecord], str, tuple[str, ...]]] = {
    "action-never": (
        _after_one_step(
            "action-never",
            model_intent("action-never", 1),
            model_result("action-never", 1, "CALL pay {}"),
            action_intent("action-never", 1, NEVER),
        ),
        "action_in_doubt",
        (
            "in doubt: the run stopped mid-step (a crash or a kill)",
            "the action may or may not have run",
            "resume stops the run rather than repeat it (replay policy never)",
        ),
    ),
    "action-safe": (
        _after_one_step(
            "action-safe",
            model_intent("action-safe", 1),
            model_result("action-safe", 1, "CALL lookup {}"),
            action_intent("action-safe", 1, SAFE),
        ),
        "action_in_doubt",
        ("in doubt", "resume makes it again (replay policy safe)"),
    ),
    "model-call": (
        _after_one_step("model-call", model_intent("model-call", 1)),
        "model_call_in_doubt",
        ("in doubt", "the model call may or may not have reached the model"),
    ),
    "reply-recorded": (
        _after_one_step(
            "reply-recorded",
            model_intent("reply-recorded", 1),
            model_result("reply-recorded", 1, "CALL lookup {}"),
        ),
        "model_result_recorded",
        ("interrupted", "the model's reply is recorded and nothing after it was announced"),
    ),
    "stopped": (
        _after_one_step(
            "stopped",
            model_intent("stopped", 1),
            model_result("stopped", 1, "CALL pay {}"),
            action_intent("stopped", 1, NEVER),
            finished("stopped", StopReason.RESUME_STATE_UNKNOWN, [tool_step(0, "lookup")]),
        ),
        "stopped",
        ("left unfinished when the run stopped (resume_state_unknown)",),
    ),
}


@pytest.fixture
async def url(sqlite_store: SqliteRunStore, sqlite_path: Path) -> str:
    for records, _, _ in RUNS.values():
        await write(sqlite_store, records)
    return f"sqlite://{sqlite_path}"


@pytest.mark.parametrize("run_id", list(RUNS))
def test_show_says_where_the_unfinished_step_stands(
    run_id: str, url: str, env: dict[str, str]
) -> None:
    """The JSON names the state and its words; the text heads the step's intents with them, and
    never says a step of a run that merely stopped was "never completed"."""
    _, state, words = RUNS[run_id]
    result = polyloop("show", run_id, "--store", url, "--json", env=env)
    assert result.code == 0, result.stderr
    unfinished = result.json()["unfinished_step"]
    assert (1, state) == (unfinished["step"], unfinished["state"])
    assert all(part in unfinished["words"] for part in words), unfinished["words"]
    assert result.json()["pending"], "the step's intents are still listed"
    text = polyloop("show", run_id, "--store", url, env=env).stdout
    flat = " ".join(text.split())
    assert f"Step 1 unfinished, {' '.join(unfinished['words'].split())}:" in flat
    assert "never completed" not in text


async def test_a_run_whose_steps_all_completed_has_no_unfinished_step(
    sqlite_store: SqliteRunStore, url: str, env: dict[str, str]
) -> None:
    """A finished run, and an unfinished one whose next step was not announced, have none."""
    await write(
        sqlite_store,
        [
            *_after_one_step("done"),
            finished("done", StopReason.TASK_COMPLETED, [tool_step(0, "lookup")]),
            *_after_one_step("between-steps"),
        ],
    )
    for run_id in ("done", "between-steps"):
        result = polyloop("show", run_id, "--store", url, "--json", env=env)
        assert (None, []) == (result.json()["unfinished_step"], result.json()["pending"])
        assert "Step 1 unfinished" not in polyloop("show", run_id, "--store", url, env=env).stdout


async def test_show_of_a_run_being_driven_says_it_is_under_way_naming_the_driver(
    sqlite_store: SqliteRunStore, url: str, env: dict[str, str]
) -> None:
    """While this process holds the lease of a run in doubt, `show` (another process) says the
    step is under way and names this process, and the run's status is running; released, the
    same log reads as in doubt again."""
    lease = await sqlite_store.acquire_run_lease("action-never")
    try:
        document = polyloop("show", "action-never", "--store", url, "--json", env=env).json()
        unfinished = document["unfinished_step"]
        assert "running" == unfinished["state"]
        assert f"being driven now (process {os.getpid()}" in unfinished["words"]
        assert "running" == document["status"]
        text = " ".join(polyloop("show", "action-never", "--store", url, env=env).stdout.split())
        assert (
            f"Step 1 unfinished, under way: the run is being driven now (process {os.getpid()}"
            in text
        )
    finally:
        await lease.release()
    document = polyloop("show", "action-never", "--store", url, "--json", env=env).json()
    assert ("action_in_doubt", None) == (document["unfinished_step"]["state"], document["holder"])
