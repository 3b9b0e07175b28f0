"""The text the shortcuts of ``polyloop.serialization`` produce and accept is the general one.

A run's result is written step by step straight into text, and a log line is read by the JSON
scanner without ``json.loads``'s preamble. Both must give exactly what the general path gives:
the same text for any result (steps with fields of unusual types included), and the same record
or the same refusal for any line (padded, reordered or otherwise unusual ones included).
"""

from __future__ import annotations

import enum
import json
import re
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from polyloop.errors import SerializationError
from polyloop.serialization import dumps, dumps_log_record, loads_log_record, to_dict
from polyloop.types import (
    ActionStatus,
    Intent,
    IntentKind,
    ReplayPolicy,
    RunFinished,
    RunResult,
    StepRecord,
    StopReason,
)
from tests.strategies import log_records, run_finished_records, run_results, step_records

pytestmark = pytest.mark.filterwarnings("error")

relaxed = settings(
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)

_ESCAPED = re.compile("[\ud800-\udfff\x85\u2028\u2029]")


def _general_text(payload: object) -> str:
    """What `dumps` documents: compact JSON, non-ASCII kept, a few characters escaped."""
    text = json.dumps(payload, ensure_ascii=False, separators=(",", ":"))
    return _ESCAPED.sub(lambda match: f"\\u{ord(match.group()):04x}", text)


class _Count(enum.IntEnum):
    SEVEN = 7


class _Text(str):
    pass


def _unusual_step(index: int) -> StepRecord:
    """A step the constructor accepts although some fields are not of their annotated type."""
    return StepRecord(
        step_idx=index,
        raw_output=_Text("sub\u2028class"),
        content_chars=_Count.SEVEN,
        thinking_chars=0,
        action=None,
        parse_ok=1,  # type: ignore[arg-type]
        parse_error=None,
        observation="\ud83d lone",
        observation_is_synthetic=False,
        observation_truncated_chars=0,
        prompt_chars=2**70,
        call_id=None,
        step_wall_ms=0,
        action_status=ActionStatus.ENV_ERROR,
    )


@relaxed
@given(record=run_finished_records)
def test_a_finished_run_is_written_as_the_general_text(record: RunFinished) -> None:
    """The tagged line of a RunFinished is the general JSON of its payload, character for character."""
    expected = _general_text({"type": "run_finished", "record": to_dict(record)})
    assert dumps_log_record(record) == expected


@relaxed
@given(result=run_results)
def test_a_result_is_written_as_the_general_text(result: RunResult) -> None:
    """`dumps` of a RunResult is the general JSON of `to_dict`, character for character."""
    assert dumps(result) == _general_text(to_dict(result))


@relaxed
@given(steps=st.lists(step_records, max_size=3))
def test_steps_of_unusual_field_types_are_written_as_the_general_text(
    steps: list[StepRecord],
) -> None:
    """An int subclass, a str subclass, 1 for a flag, a lone surrogate: still the general text."""
    mixed = (*steps, _unusual_step(len(steps)))
    result = RunResult("r", StopReason.ENV_ERROR, None, mixed)
    assert dumps(result) == _general_text(to_dict(result))
    record = RunFinished("r", result)
    assert dumps_log_record(record) == _general_text(
        {"type": "run_finished", "record": to_dict(record)}
    )


def _reordered(payload: Any) -> Any:
    if isinstance(payload, dict):
        return {key: _reordered(payload[key]) for key in reversed(list(payload))}
    if isinstance(payload, list):
        return [_reordered(item) for item in payload]
    return payload


@relaxed
@given(record=log_records, layout=st.sampled_from(["reordered", "spaced", "padded", "bytes"]))
def test_unusual_layouts_of_a_line_decode_to_the_same_record(record: Any, layout: str) -> None:
    """Keys in another order, spaces, surrounding whitespace, bytes: the same record as the line."""
    payload = {"type": json.loads(dumps_log_record(record))["type"], "record": to_dict(record)}
    line: str | bytes = {
        "reordered": lambda: json.dumps(_reordered(payload), ensure_ascii=False),
        "spaced": lambda: json.dumps(payload, indent=1),
        "padded": lambda: " \t" + dumps_log_record(record) + "\r\n ",
        "bytes": lambda: dumps_log_record(record).encode("utf-8"),
    }[layout]()
    assert loads_log_record(line) == record


def _intent_line(**changes: Any) -> str:
    record = to_dict(Intent("r", IntentKind.MODEL_CALL, 0, "model-0", ReplayPolicy.SAFE))
    record.update(changes)
    return json.dumps({"type": "intent", "record": record})


@pytest.mark.parametrize(
    ("line", "match"),
    [
        ("\ufeff" + _intent_line(), "not valid JSON"),
        (_intent_line() + " {}", "not valid JSON"),
        (_intent_line() + "\x00", "not valid JSON"),
        (_intent_line(kind=["model_call"]), r"^Intent\.kind: expected one of"),
        (_intent_line(kind={"k": 1}), r"^Intent\.kind: expected one of"),
        (_intent_line(replay_policy=None), r"^Intent\.replay_policy: expected one of"),
        (_intent_line(call_index=-1), r"^Intent: Intent\.call_index must be >= 0"),
        (_intent_line(call_index=True), r"^Intent\.call_index: expected an integer"),
        (_intent_line(result_id=""), r"^Intent: Intent\.result_id is empty"),
        ('{"type": ["intent"], "record": {}}', r"unknown type \['intent'\]"),
        ('{"type": "intent", "other": {}}', "exactly the fields"),
        ('{"record": {}, "x": 1}', "exactly the fields"),
    ],
    ids=[
        "BOM",
        "extra data",
        "control character after",
        "list as enum",
        "object as enum",
        "null as enum",
        "negative count",
        "bool as count",
        "empty result id",
        "list as tag",
        "no record",
        "no type",
    ],
)
def test_lines_the_shortcut_gives_up_on_are_refused_as_before(line: str, match: str) -> None:
    """What the scanner shortcut does not accept gets the general path's error, unchanged."""
    with pytest.raises(SerializationError, match=match):
        loads_log_record(line)
