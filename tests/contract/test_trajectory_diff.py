"""A trajectory snapshot mismatch names the step and the field; the syrupy extension masks.

The extension is exercised here in-process through its syrupy interface (``serialize`` and
``diff_lines``, what a ``SnapshotAssertion`` calls); the README test runs it under pytest in a
fresh project.
"""

from __future__ import annotations

import dataclasses
import json
import re

import pytest
from syrupy.filters import paths, props
from syrupy.matchers import path_type

from polyloop.ports import RunLog
from polyloop.serialization import loads
from polyloop.types import (
    ActionOutcome,
    ActionStatus,
    RunFinished,
    RunResult,
    RunStarted,
    StepCompleted,
    StepRecord,
    StopReason,
)
from polyloop_contract.snapshot import MASKED, TrajectorySnapshotExtension
from polyloop_contract.trajectory_diff import trajectory_differences
from polyloop_contract.trajectory_json import trajectory_json
from tests.cli._kit import final_step, tool_step

TOOL_STEP = tool_step(0, "lookup", "shipped on Monday")
FINAL_STEP = final_step(1, "it shipped")


def _result(*steps: StepRecord) -> RunResult:
    return RunResult("order-A-17", StopReason.AGENT_FINISHED, "it shipped", steps)


def _log(*steps: StepRecord) -> RunLog:
    outcome = ActionOutcome(ActionStatus.EXECUTED, steps[0].observation, False, False, 0)
    return RunLog(
        started=RunStarted("order-A-17", {"model_client.kind": "scripted"}),
        steps=(
            StepCompleted("order-A-17", "action-0", outcome, steps[0]),
            *(StepCompleted("order-A-17", None, None, step) for step in steps[1:]),
        ),
        finished=RunFinished("order-A-17", _result(*steps)),
    )


LOST = dataclasses.replace(TOOL_STEP, observation="lost in transit")


def test_a_changed_observation_is_named_by_step_and_field() -> None:
    """A result whose step 0 observation changed reads `step 0 · observation: old → new`."""
    before = trajectory_json(_result(TOOL_STEP, FINAL_STEP))
    after = trajectory_json(_result(LOST, FINAL_STEP))
    assert ["step 0 · observation: 'shipped on Monday' → 'lost in transit'"] == (
        trajectory_differences(before, after)
    )


def test_run_log_differences_name_the_record_the_step_and_the_field() -> None:
    """In a run log the step's record, the action outcome and the finish record are named."""
    before = trajectory_json(_log(TOOL_STEP, FINAL_STEP))
    after = trajectory_json(_log(LOST, FINAL_STEP))
    change = "'shipped on Monday' → 'lost in transit'"
    assert [
        f"record 1 (step_completed) · action_outcome.observation: {change}",
        f"record 1 (step_completed) · step 0 · observation: {change}",
        f"record 3 (run_finished) · step 0 · observation: {change}",
    ] == trajectory_differences(before, after)


def test_missing_and_extra_steps_and_top_level_fields_are_named() -> None:
    """A step only on one side and a changed top-level field each get their own line."""
    before = trajectory_json(_result(TOOL_STEP, FINAL_STEP))
    shorter = dataclasses.replace(_result(TOOL_STEP), final_answer=None)
    assert [
        "final_answer: 'it shipped' → null",
        "step 1: only in the snapshot",
    ] == trajectory_differences(before, trajectory_json(shorter))
    assert ["final_answer: null → 'it shipped'", "step 1: only in this run"] == (
        trajectory_differences(trajectory_json(shorter), before)
    )


def test_long_texts_are_shown_from_where_they_differ_and_lines_are_capped() -> None:
    """Two long texts are shown from just before their first difference; past the limit the
    remaining differences are counted."""
    base = "x" * 200
    before = trajectory_json(_result(dataclasses.replace(TOOL_STEP, observation=base + "a")))
    after = trajectory_json(_result(dataclasses.replace(TOOL_STEP, observation=base + "b")))
    assert ["step 0 · observation: …'xxxxxxxxxxa' → …'xxxxxxxxxxb'"] == (
        trajectory_differences(before, after)
    )
    many = trajectory_json(_log(LOST, dataclasses.replace(FINAL_STEP, prompt_chars=1)))
    lines = trajectory_differences(trajectory_json(_log(TOOL_STEP, FINAL_STEP)), many, limit=2)
    assert "… and 3 more" == lines[-1]
    assert 3 == len(lines)


def test_equal_or_unreadable_texts_have_no_field_lines() -> None:
    """Equal snapshots, and texts that are not JSON, give no field lines (the text diff is left)."""
    text = trajectory_json(_result(TOOL_STEP))
    assert [] == trajectory_differences(text, text)
    assert [] == trajectory_differences(text, "not json {")


def test_the_extension_writes_the_trajectory_form() -> None:
    """The extension serializes a record to exactly `trajectory_json`'s text."""
    log = _log(TOOL_STEP, FINAL_STEP)
    assert trajectory_json(log) == TrajectorySnapshotExtension().serialize(log)


def test_the_extension_masks_what_syrupy_filters_exclude() -> None:
    """`exclude=props(...)` and `paths(...)` mask fields; the masked text still decodes."""
    extension = TrajectorySnapshotExtension()
    result = _result(TOOL_STEP, FINAL_STEP)
    text = extension.serialize(result, exclude=props("call_id"))
    assert [MASKED, MASKED] == [step["call_id"] for step in json.loads(text)["steps"]]
    assert loads(RunResult, text).steps[0].observation == "shipped on Monday"
    text = extension.serialize(result, exclude=paths("steps.0.observation"))
    assert [MASKED, ""] == [step["observation"] for step in json.loads(text)["steps"]]


def test_the_extension_masks_what_a_syrupy_matcher_replaces() -> None:
    """A scalar that a syrupy matcher replaces shows as masked."""
    extension = TrajectorySnapshotExtension()
    matcher = path_type({"steps.1.call_id": (str,)})
    text = extension.serialize(_result(TOOL_STEP, FINAL_STEP), matcher=matcher)
    assert ["call-0", MASKED] == [step["call_id"] for step in json.loads(text)["steps"]]


def test_the_extension_refuses_include() -> None:
    """`include=` is refused: a trajectory snapshot holds every field of the library's JSON."""
    with pytest.raises(TypeError, match="takes no include="):
        TrajectorySnapshotExtension().serialize(_result(TOOL_STEP), include=props("step_idx"))


def test_the_extension_diff_starts_with_the_fields_that_differ() -> None:
    """The extension's diff lists the differing fields by step above syrupy's line diff."""
    extension = TrajectorySnapshotExtension()
    snapshot = extension.serialize(_result(TOOL_STEP, FINAL_STEP))
    received = extension.serialize(_result(LOST, FINAL_STEP))
    # syrupy colours its own lines when the terminal allows it.
    lines = [
        re.sub(r"\x1b\[[0-9;]*m", "", line) for line in extension.diff_lines(received, snapshot)
    ]
    assert [
        "Trajectory fields that differ (snapshot → this run):",
        "  step 0 · observation: 'shipped on Monday' → 'lost in transit'",
    ] == lines[:2]
    assert any('"observation": "lost in transit"' in line for line in lines[2:])
