"""`polyloop show` reports the finish reasons and token usage the model replies carried."""

from __future__ import annotations

from pathlib import Path

from polyloop.stores.sqlite import SqliteRunStore
from polyloop.types import ModelCallResult, ModelReply, ReplayPolicy, StepCompleted, StopReason
from tests.cli._kit import (
    action_intent,
    finished,
    model_intent,
    outcome,
    polyloop,
    started,
    tool_step,
    write,
)


def reply(k: int, reason: str, usage: dict[str, int]) -> ModelCallResult:
    return ModelCallResult(
        "run-usage", f"model-{k}", ModelReply(f"c-{k}", "CALL lookup {}", "", reason, usage), None
    )


async def test_show_sums_usage_and_counts_finish_reasons(
    sqlite_store: SqliteRunStore, sqlite_path: Path, env: dict[str, str]
) -> None:
    """Header lines give the finish reasons with counts and the usage summed over the run;
    `--json` lists each reply's own."""
    run_id = "run-usage"
    records = [started(run_id)]
    for k, reason in enumerate(["stop", "length"]):
        records += [
            model_intent(run_id, k),
            reply(k, reason, {"prompt_tokens": 10 + k, "completion_tokens": 2}),
            action_intent(run_id, k, ReplayPolicy.SAFE),
            StepCompleted(run_id, f"action-{k}", outcome(), tool_step(k, "lookup")),
        ]
    records.append(
        finished(run_id, StopReason.STEP_BUDGET, [tool_step(0, "lookup"), tool_step(1, "lookup")])
    )
    await write(sqlite_store, records)
    url = f"sqlite://{sqlite_path}"

    text = polyloop("show", run_id, "--store", url, env=env)
    assert 0 == text.code, text.stderr
    lines = [" ".join(line.split()) for line in text.stdout.splitlines()]
    assert "finish reasons length ×1, stop ×1" in lines
    assert "token usage completion_tokens=4 prompt_tokens=21" in lines

    document = polyloop("show", run_id, "--store", url, "--json", env=env).json()
    assert [
        {
            "result_id": "model-0",
            "finish_reason": "stop",
            "usage": {"prompt_tokens": 10, "completion_tokens": 2},
        },
        {
            "result_id": "model-1",
            "finish_reason": "length",
            "usage": {"prompt_tokens": 11, "completion_tokens": 2},
        },
    ] == document["model_calls"]


async def test_show_of_replies_without_usage_adds_no_line(
    sqlite_store: SqliteRunStore, sqlite_path: Path, env: dict[str, str]
) -> None:
    """A run whose client reported neither shows no such header line."""
    run_id = "run-plain"
    await write(sqlite_store, [started(run_id), model_intent(run_id, 0)])
    text = polyloop("show", run_id, "--store", f"sqlite://{sqlite_path}", env=env)
    assert 0 == text.code, text.stderr
    assert "token usage" not in text.stdout
    assert "finish reasons" not in text.stdout
