"""The trajectory snapshot form is the library's own JSON, laid out, and reads back exactly.

Properties over generated records: the text decodes with ``polyloop.serialization`` into the
record it was made from; stripped of the layout it is byte for byte what ``dumps`` (or
``dumps_log_record``, for a run log) writes; a mask replaces exactly the named fields, at every
depth, and nothing else.
"""

from __future__ import annotations

import dataclasses
import json
import re
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from polyloop.errors import SerializationError
from polyloop.ports import RunLog
from polyloop.serialization import dumps, dumps_log_record, loads, to_dict
from polyloop.types import RunResult, StepRecord, StopReason
from polyloop_contract.trajectory_json import (
    MASKED,
    compact_json,
    run_log_from_json,
    trajectory_json,
)
from tests.cli._kit import final_step
from tests.strategies import (
    intents,
    log_records,
    model_call_results,
    run_finished_records,
    run_results,
    run_started_records,
    step_completed_records,
    step_records,
)

relaxed = settings(
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)

run_logs = st.builds(
    RunLog,
    started=st.none() | run_started_records,
    intents=st.lists(intents, max_size=3).map(tuple),
    model_results=st.lists(model_call_results, max_size=2).map(tuple),
    steps=st.lists(step_completed_records, max_size=2).map(tuple),
    finished=st.none() | run_finished_records,
)

#: A high surrogate then a low one: JSON reads the two escapes back as the one character they
#: encode, so such a text cannot round-trip as two lone surrogates.
_SURROGATE_PAIR = re.compile("[\ud800-\udbff][\udc00-\udfff]")

#: Texts with what JSON text must escape or keep: lone surrogates, line separators, quotes,
#: backslashes, control characters, non-ASCII.
awkward_texts = st.text(
    st.one_of(
        st.characters(),
        st.sampled_from(['"', "\\", "\n", "\r", "\x00", "\x85", "\u2028", "\u2029", "\ud83d"]),
    ),
    max_size=30,
).filter(lambda text: _SURROGATE_PAIR.search(text) is None)

_STRING_OR_SPACE = re.compile(r'("[^"\\]*(?:\\.[^"\\]*)*")|\s+')

#: Every field name a trajectory snapshot can hold, to draw masks from.
FIELD_NAMES = sorted(
    {field.name for field in dataclasses.fields(StepRecord)}
    | {field.name for field in dataclasses.fields(RunResult)}
    | {"action_outcome", "reply", "content", "thinking", "failure", "parameter_snapshot"}
    | {"kind", "call_index", "result_id", "replay_policy", "status", "type", "record", "result"}
)


def _without_layout(text: str) -> str:
    """``text`` with every whitespace character outside JSON strings removed."""
    return _STRING_OR_SPACE.sub(lambda match: match.group(1) or "", text)


def _masked(payload: Any, names: frozenset[str]) -> Any:
    """What masking ``names`` must give, computed on decoded JSON."""
    if isinstance(payload, dict):
        return {k: MASKED if k in names else _masked(v, names) for k, v in payload.items()}
    if isinstance(payload, list):
        return [_masked(item, names) for item in payload]
    return payload


@relaxed
@given(st.one_of(step_records, run_results, log_records))
def test_snapshot_text_reads_back_as_the_same_record(record: Any) -> None:
    """A snapshot of a StepRecord, RunResult or log record decodes with `loads` to that record."""
    assert record == loads(type(record), trajectory_json(record))


@relaxed
@given(st.one_of(step_records, run_results, log_records))
def test_snapshot_text_is_the_library_json_laid_out(record: Any) -> None:
    """Without its layout whitespace, a snapshot is exactly the text `dumps` writes."""
    assert dumps(record) == _without_layout(trajectory_json(record))


@relaxed
@given(run_logs)
def test_run_log_snapshot_reads_back_as_the_same_log(log: RunLog) -> None:
    """A run log snapshot reads back (record by record, through the library) to the same log."""
    assert log == run_log_from_json(trajectory_json(log))


@relaxed
@given(run_logs)
def test_run_log_snapshot_holds_each_record_as_a_store_line(log: RunLog) -> None:
    """A run log snapshot is the array of `dumps_log_record` lines, in `RunLog` field order."""
    records = [
        *([log.started] if log.started else []),
        *log.intents,
        *log.model_results,
        *log.steps,
        *([log.finished] if log.finished else []),
    ]
    expected = "[" + ",".join(dumps_log_record(record) for record in records) + "]"
    assert expected == _without_layout(trajectory_json(log))


@relaxed
@given(step_records, awkward_texts, awkward_texts)
def test_escapes_survive_the_layout(step: StepRecord, observation: str, raw_output: str) -> None:
    """Lone surrogates and line separators stay escaped: the snapshot is UTF-8 text whose lines
    are its layout lines, and it decodes to the same step."""
    # Without calls not executed (a list of objects lays out over more lines than one field).
    step = dataclasses.replace(
        step, observation=observation, raw_output=raw_output, calls_not_executed=()
    )
    text = trajectory_json(step)
    text.encode("utf-8")  # raises if a lone surrogate got through unescaped
    assert len(to_dict(step)) + 2 == len(text.splitlines())
    assert step == loads(StepRecord, text)
    assert dumps(step) == _without_layout(text)


@relaxed
@given(
    st.one_of(step_records, run_results, log_records, run_logs),
    st.frozensets(st.sampled_from(FIELD_NAMES), max_size=4),
)
def test_a_mask_replaces_exactly_the_named_fields(record: Any, names: frozenset[str]) -> None:
    """Masking keeps every key and replaces the value of each named field, at any depth, with
    the mask marker; everything else is unchanged."""
    plain = json.loads(trajectory_json(record))
    assert _masked(plain, names) == json.loads(trajectory_json(record, mask=names))


STARTED = (
    '{"type":"run_started","record":{"run_id":"r","parameter_snapshot":{},"schema_version":1}}'
)


def _step(**changes: Any) -> StepRecord:
    """A final-answer step (``FINAL: 42``), with ``changes`` applied."""
    return dataclasses.replace(final_step(0, "42"), **changes)


def test_a_step_snapshot_keeps_the_schema_order_and_version() -> None:
    """The keys of a step snapshot come in the library's field order, `schema_version` last
    (the fields added after schema 1.0 are left out while they hold their default)."""
    text = trajectory_json(_step())
    stored = [
        f.name for f in dataclasses.fields(StepRecord) if not f.metadata.get("optional_on_read")
    ]
    assert stored == list(json.loads(text))
    assert text.startswith('{\n  "step_idx": 0,\n  "raw_output": "FINAL: 42",\n')
    assert text.endswith('  "env_reported_completion": false,\n  "schema_version": 1\n}\n')


def test_masked_text_fields_still_decode_showing_the_marker() -> None:
    """A snapshot with text fields masked decodes to the record with those fields reading
    the marker."""
    step = _step(observation="order shipped at 10:32:07", call_id="chatcmpl-8f2c")
    text = trajectory_json(step, mask={"observation", "call_id"})
    assert '  "observation": "<masked>",\n' in text
    expected = dataclasses.replace(step, observation=MASKED, call_id=MASKED)
    assert expected == loads(StepRecord, text)


def test_a_mask_rule_can_select_by_path() -> None:
    """A mask rule sees the path of the object holding the field, so one step can be masked."""
    steps = (_step(observation="a"), _step(step_idx=1, observation="b"))
    result = RunResult(
        run_id="r", stop_reason=StopReason.STEP_BUDGET, final_answer=None, steps=steps
    )
    text = trajectory_json(
        result, mask=lambda name, path: (name, path) == ("observation", ("steps", 1))
    )
    assert ["a", MASKED] == [step["observation"] for step in json.loads(text)["steps"]]


def test_other_values_are_refused_with_what_is_accepted() -> None:
    """A value that is not a record is refused, naming what a trajectory snapshot holds."""
    with pytest.raises(TypeError, match="StepRecord, a RunResult, a RunLog or one log record"):
        compact_json({"steps": []})  # type: ignore[arg-type]


def test_run_log_reader_refuses_what_is_not_a_run_log_snapshot() -> None:
    """Reading a run log snapshot refuses a non-array, a bad record (by position) and two starts."""
    with pytest.raises(SerializationError, match="expected a JSON array"):
        run_log_from_json(trajectory_json(_step()))
    with pytest.raises(SerializationError, match="record #1: log record: unknown type 'nope'"):
        run_log_from_json(f'[{STARTED},{{"type":"nope","record":{{}}}}]')
    with pytest.raises(SerializationError, match="at most one of each"):
        run_log_from_json(f"[{STARTED},{STARTED}]")
    with pytest.raises(SerializationError, match="not valid JSON"):
        run_log_from_json("[")
