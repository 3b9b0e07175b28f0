"""The loop builds each ``StepRecord`` positionally (``session._loop._Head.record``, once per
step, because keyword parsing of 18 arguments is not free): these tests fail as soon as the
positions there and the field order of ``StepRecord`` part ways.
"""

from __future__ import annotations

import dataclasses
import inspect
from typing import Any

import pytest

from polyloop.session._loop import _Head
from polyloop.types import ActionStatus, CallNotExecuted, StepRecord

STEP_FIELDS = [f.name for f in dataclasses.fields(StepRecord)]
HEAD_FIELDS = [f.name for f in dataclasses.fields(_Head)]
RECORD_PARAMETERS = [name for name in inspect.signature(_Head.record).parameters if name != "self"]
BOOLEAN_FIELDS = [f.name for f in dataclasses.fields(StepRecord) if f.type in ("bool", bool)]


def _distinct_values(true_field: str | None) -> dict[str, Any]:
    """A value for every field of StepRecord, no two alike except the booleans (only
    ``true_field`` is true)."""
    values: dict[str, Any] = {}
    for index, f in enumerate(dataclasses.fields(StepRecord)):
        if f.name == "schema_version":
            values[f.name] = f.default
        elif f.name in BOOLEAN_FIELDS:
            values[f.name] = f.name == true_field
        elif f.name == "action_status":
            values[f.name] = ActionStatus.NOT_EXECUTED
        elif f.name == "calls_not_executed":
            values[f.name] = (CallNotExecuted("value of tool_name", "{}"),)
        elif "int" in str(f.type):
            values[f.name] = 100 + index
        else:
            values[f.name] = f"value of {f.name}"
    return values


def test_the_loop_can_set_every_field_of_a_step() -> None:
    """Every StepRecord field but the schema version is a field of `_Head` or a parameter of
    `_Head.record`, so a new field cannot be left out of the positional construction unnoticed."""
    assert [n for n in STEP_FIELDS if n != "schema_version"] == sorted(
        [*HEAD_FIELDS, *RECORD_PARAMETERS], key=STEP_FIELDS.index
    )


@pytest.mark.parametrize("true_field", [None, *BOOLEAN_FIELDS], ids=lambda name: f"{name} true")
def test_each_value_lands_in_the_field_of_its_name(true_field: str | None) -> None:
    """`_Head.record` passes each value to StepRecord at the position of the field it is named
    after (distinct values, so any two swapped positions show)."""
    values = _distinct_values(true_field)
    head = _Head(**{name: values[name] for name in HEAD_FIELDS})
    step = head.record(**{name: values[name] for name in RECORD_PARAMETERS})
    assert values == {name: getattr(step, name) for name in STEP_FIELDS}
