"""Runs of every kind of step, and the table rows they must give (``polyloop steps``,
:class:`polyloop.stores.step_table.StepTable`).

The expected rows are built from the records through :func:`polyloop.serialization.to_dict`, a
path independent of the table's own code.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from polyloop import testing
from polyloop.ports import RunStore
from polyloop.recovery import run_status
from polyloop.serialization import LogRecord, to_dict
from polyloop.testing import StepWrites
from polyloop.types import ActionStatus, IntentKind, StepRecord, StopReason


def replied(
    step: StepWrites,
    *,
    usage: Mapping[str, int] | None = None,
    finish_reason: str | None = None,
    replayed: IntentKind | None = None,
) -> StepWrites:
    """``step`` with token usage and a finish reason on its reply, and a replay mark."""
    result = step.model_result
    reply = result.reply
    assert reply is not None
    reply = dataclasses.replace(reply, usage=usage, finish_reason=finish_reason)
    return dataclasses.replace(
        step,
        model_result=dataclasses.replace(result, reply=reply),
        step_completed=dataclasses.replace(step.step_completed, replayed_on_resume=replayed),
    )


#: The runs: (run_id, model binding, steps, stop reason or None while unfinished).
RUNS: tuple[tuple[str, dict[str, str], list[StepWrites], StopReason | None], ...] = (
    (
        "run-finished",
        {"task": "refund-1", "seed": "3"},
        [
            replied(
                testing.tool_step("run-finished", 0, arguments={"id": 7}, observation="x" * 5000),
                usage={"prompt_tokens": 1200, "completion_tokens": 34, "total_tokens": 1234},
                finish_reason="tool_calls",
                replayed=IntentKind.ACTION,
            ),
            testing.code_step("run-finished", 1, "print('é, \"quoted\", a,b')"),
            testing.parse_failure_step("run-finished", 2),
            replied(
                testing.final_step("run-finished", 3, "refunded\nin two lines"),
                usage={
                    "prompt_tokens": 1500,
                    "completion_tokens": 20,
                    "completion_tokens_details.reasoning_tokens": 7,
                },
                finish_reason="stop",
            ),
        ],
        StopReason.AGENT_FINISHED,
    ),
    (
        "run-unfinished",
        {"task": "refund-2", "variant": "b"},
        [
            testing.tool_step(
                "run-unfinished",
                0,
                status=ActionStatus.ENV_ERROR,
                observation="Environment failed.",
                observation_is_synthetic=True,
                observation_truncated_chars=12,
                env_reported_completion=True,
            ),
            testing.model_failure_step("run-unfinished", 1),
        ],
        None,
    ),
    ("run-empty", {}, [], StopReason.STEP_BUDGET),
)

BINDING_COLUMNS = ("model_binding.seed", "model_binding.task", "model_binding.variant")
#: The ``usage.<key>`` columns of :data:`RUNS`' replies.
USAGE_COLUMNS = (
    "usage.completion_tokens",
    "usage.completion_tokens_details.reasoning_tokens",
    "usage.prompt_tokens",
    "usage.total_tokens",
)
#: The columns named by the runs' keys (``polyloop.stores.step_table.step_columns``' input).
KEY_COLUMNS = BINDING_COLUMNS + USAGE_COLUMNS


def run_records(
    run_id: str, binding: dict[str, str], steps: Sequence[StepWrites], reason: StopReason | None
) -> list[LogRecord]:
    snapshot = {"model_client.kind": "scripted"}
    snapshot.update({f"request.model_binding.{key}": value for key, value in binding.items()})
    records: list[LogRecord] = [testing.run_started(run_id, snapshot)]
    for step in steps:
        records += step.records
    if reason is not None:
        records.append(testing.run_finished(run_id, steps, reason))
    return records


async def fill(store: RunStore, runs: Iterable[Any] = RUNS) -> None:
    for run in runs:
        await testing.write_records(store, run_records(*run))


def step_fields(step: StepRecord) -> dict[str, Any]:
    """The StepRecord's fields as ``to_dict`` gives them, ``calls_not_executed`` (left out of
    ``to_dict`` while empty) as the JSON text of its records: sorted keys, no spaces."""
    fields = to_dict(step)
    calls = fields.get("calls_not_executed", [])
    fields["calls_not_executed"] = json.dumps(
        calls, ensure_ascii=False, sort_keys=True, separators=(",", ":")
    )
    return fields


#: The fork columns of a run that is no fork (design 0067).
NO_FORK: dict[str, Any] = {"forked_from_run_id": None, "forked_at_step": None, "inherited": False}


def expected_rows(runs: Iterable[Any] = RUNS) -> list[dict[str, Any]]:
    """Every step of ``runs`` as a row with every column (``None`` for a binding a run lacks,
    and for a count a reply did not report)."""
    rows = []
    for run_id, binding, steps, reason in runs:
        status = run_status(testing.run_log_from(run_records(run_id, binding, steps, reason)))
        for step in steps:
            row: dict[str, Any] = {"run_id": run_id}
            row.update(step_fields(step.step))
            row["stop_reason"] = None if reason is None else reason.value
            for column in BINDING_COLUMNS:
                row[column] = binding.get(column.removeprefix("model_binding."))
            reply = step.model_result.reply
            usage = {} if reply is None or reply.usage is None else reply.usage
            row["finish_reason"] = None if reply is None else reply.finish_reason
            replayed = step.step_completed.replayed_on_resume
            row["replayed_on_resume"] = None if replayed is None else replayed.value
            row["run_status"] = status.value
            row.update(NO_FORK)
            for column in USAGE_COLUMNS:
                row[column] = usage.get(column.removeprefix("usage."))
            rows.append(row)
    return rows
