"""`polyloop plan` against the recovery table, one hand-built log per tail state.

The expected verdicts are written out from the spec's table (not computed with
``plan_resume``), and every log is written through the store's public API.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from polyloop.serialization import LogRecord
from polyloop.stores.sqlite import SqliteRunStore
from polyloop.types import ReplayPolicy, StepCompleted, StopReason
from tests.cli._kit import (
    ANSI_ESCAPE,
    action_intent,
    final_step,
    finished,
    model_intent,
    model_result,
    parse_failure_records,
    polyloop,
    started,
    tool_step,
    tool_step_records,
    write,
)

SAFE, NEVER = ReplayPolicy.SAFE, ReplayPolicy.NEVER


def case(run_id: str) -> list[LogRecord]:
    """The records of each case; the run_id names the case."""
    head: list[LogRecord] = [started(run_id)]
    if run_id == "finished":
        return [
            *head,
            *tool_step_records(run_id, 0, "close", NEVER),
            finished(run_id, StopReason.TASK_COMPLETED, [tool_step(0, "close")]),
        ]
    if run_id == "ended-by-final-answer":
        return [
            *head,
            model_intent(run_id, 0),
            model_result(run_id, 0, "FINAL: done"),
            StepCompleted(run_id, None, None, final_step(0, "done")),
        ]
    if run_id == "ended-by-completes-run-tool":
        return [*head, *tool_step_records(run_id, 0, "close", NEVER)]
    if run_id == "ended-by-parse-failures":
        return [*head, *parse_failure_records(run_id, 0), *parse_failure_records(run_id, 1)]
    if run_id == "not-started-fresh":
        return head
    if run_id == "not-started-after-a-step":
        return [*head, *tool_step_records(run_id, 0, "lookup", SAFE)]
    if run_id == "model-call-in-doubt-safe":
        return [*head, model_intent(run_id, 0, SAFE)]
    if run_id == "model-call-in-doubt-never":
        return [*head, model_intent(run_id, 0, NEVER)]
    if run_id == "model-result-recorded":
        return [*head, model_intent(run_id, 0), model_result(run_id, 0, "CALL lookup {}")]
    if run_id in ("action-in-doubt-safe", "action-in-doubt-never"):
        policy = SAFE if run_id.endswith("safe") else NEVER
        return [
            *head,
            *tool_step_records(run_id, 0, "lookup", SAFE),
            model_intent(run_id, 1),
            model_result(run_id, 1, "CALL x {}"),
            action_intent(run_id, 1, policy),
        ]
    raise AssertionError(run_id)


# run_id -> (tail state, move, stop reason, next step, replay policy of the intent in doubt)
TABLE: dict[str, tuple[str, str, str | None, int, str | None]] = {
    "finished": ("finished", "return_recorded_result", "task_completed", 1, None),
    "ended-by-final-answer": ("ended_unrecorded", "record_finish", "agent_finished", 1, None),
    "ended-by-completes-run-tool": ("ended_unrecorded", "record_finish", "task_completed", 1, None),
    "ended-by-parse-failures": (
        "ended_unrecorded",
        "record_finish",
        "parse_failed_repeatedly",
        2,
        None,
    ),
    "not-started-fresh": ("not_started", "start_step", None, 0, None),
    "not-started-after-a-step": ("not_started", "start_step", None, 1, None),
    "model-call-in-doubt-safe": ("model_call_in_doubt", "call_model_again", None, 0, "safe"),
    "model-call-in-doubt-never": (
        "model_call_in_doubt",
        "stop_state_unknown",
        "resume_state_unknown",
        0,
        "never",
    ),
    "model-result-recorded": ("model_result_recorded", "reuse_model_result", None, 0, None),
    "action-in-doubt-safe": ("action_in_doubt", "execute_action_again", None, 1, "safe"),
    "action-in-doubt-never": (
        "action_in_doubt",
        "stop_state_unknown",
        "resume_state_unknown",
        1,
        "never",
    ),
}


@pytest.mark.parametrize("run_id", sorted(TABLE))
async def test_plan_follows_the_recovery_table(
    run_id: str, sqlite_store: SqliteRunStore, sqlite_path: Path, env: dict[str, str]
) -> None:
    """plan gives, for each tail state of a hand-built log, the move, stop reason, next step and in-
    doubt policy of the recovery table."""
    await write(sqlite_store, case(run_id))
    result = polyloop("plan", run_id, "--store", f"sqlite://{sqlite_path}", "--json", env=env)
    assert result.code == 0, result.stderr
    plan = result.json()
    state, move, stop_reason, next_step, policy = TABLE[run_id]
    assert (plan["state"], plan["move"], plan["stop_reason"], plan["next_step"]) == (
        state,
        move,
        stop_reason,
        next_step,
    )
    in_doubt = plan["intent_in_doubt"]
    assert (None if in_doubt is None else in_doubt["replay_policy"]) == policy
    assert plan["reason"]
    assert plan["assumptions"] == []


async def test_plan_in_text_says_why_and_has_no_colour_when_piped(
    sqlite_store: SqliteRunStore, sqlite_path: Path, env: dict[str, str]
) -> None:
    """plan in text names the move, the reason and the intent in doubt, without colour codes when
    piped."""
    await write(sqlite_store, case("action-in-doubt-never"))
    result = polyloop("plan", "action-in-doubt-never", "--store", str(sqlite_path), env=env)
    assert result.code == 0, result.stderr
    assert ANSI_ESCAPE not in result.stdout
    assert "stop_state_unknown" in result.stdout
    assert "replay policy is 'never'" in result.stdout
    assert "action-1" in result.stdout


async def test_plan_without_the_parse_limit_in_the_snapshot_says_what_it_assumed(
    sqlite_store: SqliteRunStore, sqlite_path: Path, env: dict[str, str]
) -> None:
    """When the snapshot lacks the parse-failure limit, plan says which value it assumed."""
    run_id = "bare-snapshot"
    await write(
        sqlite_store,
        [started(run_id, {}), *parse_failure_records(run_id, 0), *parse_failure_records(run_id, 1)],
    )
    result = polyloop("plan", run_id, "--store", f"sqlite://{sqlite_path}", "--json", env=env)
    assert result.code == 0, result.stderr
    plan = result.json()
    assert plan["state"] == "not_started"
    assert len(plan["assumptions"]) == 1
    assert "max_consecutive_parse_failures" in plan["assumptions"][0]


async def test_plan_refuses_a_corrupt_log_naming_the_record(
    sqlite_store: SqliteRunStore, sqlite_path: Path, env: dict[str, str]
) -> None:
    """plan of a corrupt log is exit 6 naming the record, saying resume would refuse it."""
    run_id = "intent-ahead"
    await write(sqlite_store, [started(run_id), model_intent(run_id, 1)])
    result = polyloop("plan", run_id, "--store", f"sqlite://{sqlite_path}", env=env)
    assert result.code == 6
    assert "Traceback" not in result.stderr
    assert "Intent #0" in result.stderr
    assert "resume would refuse" in result.stderr


async def test_plan_refuses_a_result_before_its_intent_naming_the_row(
    sqlite_store: SqliteRunStore, sqlite_path: Path, env: dict[str, str]
) -> None:
    """A model result with no intent before it is refused by the store as it reads, naming the
    row: the loop writes a result right after its intent."""
    run_id = "result-without-intent"
    await write(sqlite_store, [started(run_id), model_result(run_id, 0, "CALL x {}")])
    result = polyloop("plan", run_id, "--store", f"sqlite://{sqlite_path}", env=env)
    assert 6 == result.code
    assert "Traceback" not in result.stderr
    assert "seq 2: the ModelCallResult 'model-0' does not follow its model-call intent" in (
        result.stderr
    )
