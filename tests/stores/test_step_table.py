"""StepTable: every StepRecord of a store's runs as rows, on memory, jsonl, sqlite and postgres.

The rows are compared field by field with the records written (through ``to_dict``, not the
table's own code); a damaged file store gives what it can and names what it could not read.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from polyloop.errors import ConfigurationError
from polyloop.ports import RunLog
from polyloop.recovery import STATUS_OF_STOP_REASON
from polyloop.stores.jsonl import JsonlRunStore
from polyloop.stores.memory import MemoryRunStore
from polyloop.stores.step_table import (
    STEP_FIELDS,
    StepTable,
    column_type,
    step_columns,
    step_rows_of,
)
from polyloop.types import (
    Intent,
    IntentKind,
    ModelCallResult,
    ModelReply,
    ReplayPolicy,
    RunFinished,
    RunResult,
    RunStarted,
    StepCompleted,
    StepRecord,
    StopReason,
)
from tests import strategies
from tests.stores._helpers import Opened
from tests.table_kit import KEY_COLUMNS, NO_FORK, RUNS, expected_rows, fill, step_fields


def _full(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [{column: row.get(column) for column in step_columns(KEY_COLUMNS)} for row in rows]


async def test_the_rows_are_the_records_field_by_field_on_every_store(opened: Opened) -> None:
    """Every step of every run is one row: run_id, the 18 fields, stop reason, binding keys."""
    await fill(opened.store)
    table = StepTable(opened.reopen())
    rows = [row async for row in table]
    expected = expected_rows()
    assert sorted(expected, key=_order) == sorted(_full(rows), key=_order)
    assert [] == table.unreadable
    assert len(RUNS) == table.runs_read


async def test_named_runs_only_and_a_missing_one_is_said(opened: Opened) -> None:
    """``run_ids`` selects runs in the order given; a run the store lacks goes to ``missing``."""
    await fill(opened.store)
    table = StepTable(opened.store, ["run-unfinished", "no-such-run", "run-finished"])
    rows = [row async for row in table]
    assert ["run-unfinished"] * 2 + ["run-finished"] * 4 == [row["run_id"] for row in rows]
    assert ["no-such-run"] == table.missing


def _order(row: dict[str, Any]) -> tuple[str, int]:
    return row["run_id"], row["step_idx"]


def test_the_columns_and_their_types() -> None:
    """The StepRecord fields in declared order between run_id and stop_reason; types follow
    the annotations (an enum is text, ``X | None`` is nullable)."""
    assert 19 == len(STEP_FIELDS)  # the seed's eighteen, and calls_not_executed (design 0045)
    assert [field.name for field in dataclasses.fields(StepRecord)] == list(STEP_FIELDS)
    columns = step_columns(
        ["usage.total_tokens", "model_binding.task", "usage.a.b", "model_binding.seed"]
    )
    assert (
        "run_id",
        *STEP_FIELDS,
        "stop_reason",
        "model_binding.seed",
        "model_binding.task",
        # Added after the binding keys (designs 0061, 0067): earlier columns keep their positions.
        "finish_reason",
        "replayed_on_resume",
        "run_status",
        "forked_from_run_id",
        "forked_at_step",
        "inherited",
        "usage.a.b",
        "usage.total_tokens",
    ) == columns
    kinds = {column: (column_type(column).kind, column_type(column).nullable) for column in columns}
    assert ("int", False) == kinds["step_idx"]
    assert ("str", True) == kinds["action_status"]
    assert ("bool", False) == kinds["parse_ok"]
    assert ("str", True) == kinds["tool_name"]
    assert ("str", True) == kinds["stop_reason"]
    assert ("str", True) == kinds["forked_from_run_id"]
    assert ("int", True) == kinds["forked_at_step"]
    assert ("bool", False) == kinds["inherited"]
    assert ("str", True) == kinds["model_binding.task"]
    assert ("str", True) == kinds["finish_reason"]
    assert ("str", True) == kinds["replayed_on_resume"]
    assert ("str", True) == kinds["run_status"]
    assert ("int", True) == kinds["usage.total_tokens"]
    with pytest.raises(ConfigurationError, match="not a model-binding or usage column"):
        step_columns(["task"])
    with pytest.raises(ConfigurationError, match="not a column of the step table"):
        column_type("nonsense")


@settings(max_examples=60, suppress_health_check=[HealthCheck.too_slow])
@given(
    drawn=st.lists(
        st.tuples(
            strategies.step_records,
            st.none() | strategies.model_replies,
            st.sampled_from([None, IntentKind.MODEL_CALL]),
        ),
        max_size=4,
    ),
    snapshot=strategies.parameter_snapshots,
    binding=st.dictionaries(strategies.short_texts, strategies.short_texts, max_size=3),
    reason=st.none() | st.sampled_from(StopReason),
)
def test_any_log_gives_its_steps_as_rows(
    drawn: list[tuple[StepRecord, ModelReply | None, IntentKind | None]],
    snapshot: dict[str, str],
    binding: dict[str, str],
    reason: StopReason | None,
) -> None:
    """For any steps, replies and snapshot: one row per step, its fields as ``to_dict`` gives
    them, the stop reason, a ``model_binding.<key>`` column for exactly each binding key, the
    reply's finish reason, the replay mark, the run's status word, and a ``usage.<key>``
    column for exactly each count the step's reply reported."""
    run_id = "r"
    snapshot = {
        **snapshot,
        **{f"request.model_binding.{key}": value for key, value in binding.items()},
    }
    steps = [dataclasses.replace(step, step_idx=k) for k, (step, _, _) in enumerate(drawn)]
    intents, results = [], []
    for k, (_, reply, _) in enumerate(drawn):
        if reply is not None:
            result_id = f"model-{k}"
            intents.append(Intent(run_id, IntentKind.MODEL_CALL, k, result_id, ReplayPolicy.SAFE))
            results.append(ModelCallResult(run_id, result_id, reply, None))
    log = RunLog(
        started=RunStarted(run_id, snapshot),
        intents=tuple(intents),
        model_results=tuple(results),
        steps=tuple(
            StepCompleted(run_id, None, None, step, replayed_on_resume=mark)
            for step, (_, _, mark) in zip(steps, drawn, strict=True)
        ),
        finished=None
        if reason is None
        else RunFinished(run_id, RunResult(run_id, reason, None, tuple(steps))),
    )
    bindings = {f"model_binding.{key}": value for key, value in sorted(binding.items())}
    status = "running" if reason is None else STATUS_OF_STOP_REASON[reason].value
    expected = [
        {
            "run_id": run_id,
            **step_fields(step),
            "stop_reason": None if reason is None else reason.value,
            **bindings,
            "finish_reason": None if reply is None else reply.finish_reason,
            "replayed_on_resume": None if mark is None else mark.value,
            "run_status": status,
            **NO_FORK,
            **{
                f"usage.{key}": count
                for key, count in sorted(((reply and reply.usage) or {}).items())
            },
        }
        for step, (_, reply, mark) in zip(steps, drawn, strict=True)
    ]
    assert expected == list(step_rows_of(run_id, log))
    in_part = step_rows_of(run_id, log, whole=False)
    assert [None] * len(steps) == [row["run_status"] for row in in_part]


def _replace_line(path: Path, index: int, holding: bytes, line: bytes) -> None:
    lines = path.read_bytes().splitlines(keepends=True)
    assert holding in lines[index]
    lines[index] = line
    path.write_bytes(b"".join(lines))


async def test_a_damaged_jsonl_store_gives_what_it_can_and_names_the_rest(tmp_path: Path) -> None:
    """A run file with a line replaced: that run's other steps are rows, the run is named with
    the line; every other run is whole."""
    async with JsonlRunStore(tmp_path / "runs") as store:
        await fill(store)
        path = Path(store.path_for("run-finished"))
    step_1_completed = 1 + 4 + 3  # started, step 0's four records, step 1's intents and result
    _replace_line(path, step_1_completed, b'"step_completed"', b'{"not": "a record"}\n')
    async with JsonlRunStore(tmp_path / "runs") as store:
        table = StepTable(store)
        rows = [row async for row in table]
    expected = [
        # A run read in part has no status word: what was kept cannot tell it.
        {**row, "run_status": None} if row["run_id"] == "run-finished" else row
        for row in expected_rows()
        if (row["run_id"], row["step_idx"]) != ("run-finished", 1)
    ]
    assert sorted(expected, key=_order) == sorted(_full(rows), key=_order)
    damaged = {part.run_id: part for part in table.unreadable}
    assert {"run-finished"} == set(damaged)
    assert 3 == damaged["run-finished"].steps_read
    assert [f"{path}, line {step_1_completed + 1}"] == [
        record.split(": ")[0] for record in damaged["run-finished"].records
    ]


async def test_a_store_that_cannot_list_is_told_to_name_the_runs() -> None:
    """A store without ``list_run_ids`` and no run named: a ConfigurationError saying so."""

    class Unlisted:
        def __init__(self) -> None:
            self.inner = MemoryRunStore()

        async def read_log(self, run_id: str) -> RunLog:
            return await self.inner.read_log(run_id)

    with pytest.raises(ConfigurationError, match=r"cannot list its runs.*name the runs"):
        [row async for row in StepTable(Unlisted())]  # type: ignore[arg-type]


async def test_a_forks_rows_name_its_source_and_mark_the_inherited_steps(opened: Opened) -> None:
    """A fork at step 2 (design 0067): every row carries the source and the step; steps 0-1
    are inherited, the fork's own are not; the source's rows are no fork's."""
    from polyloop.session import fork, run
    from tests.loop_kit import make_definition, make_request, replies

    script = replies("RUN: a", "RUN: b", "RUN: c", "FINAL: done")
    await run(make_definition(script, opened.store), make_request("src"))
    await fork(
        make_definition(script, opened.store), make_request("f"), source_run_id="src", at_step=2
    )
    rows = [row async for row in StepTable(opened.reopen(), ["src", "f"])]
    forked = [
        (r["step_idx"], r["forked_from_run_id"], r["forked_at_step"], r["inherited"])
        for r in rows
        if r["run_id"] == "f"
    ]
    assert [
        (0, "src", 2, True),
        (1, "src", 2, True),
        (2, "src", 2, False),
        (3, "src", 2, False),
    ] == forked
    assert all(NO_FORK == {key: r[key] for key in NO_FORK} for r in rows if r["run_id"] == "src")
