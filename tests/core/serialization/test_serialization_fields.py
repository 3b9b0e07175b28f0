"""The stored-field tables of ``polyloop.serialization`` come from the records' dataclass fields,
and a field the codecs cannot store, or a misdeclared added field, fails at import, by name."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field

import pytest

from polyloop.serialization._schema import STORED_FIELDS, Kind, field_tables
from polyloop.types import ActionStatus, ModelReply, RunResult, StepRecord


@pytest.mark.parametrize("cls", list(STORED_FIELDS), ids=lambda cls: cls.__name__)
def test_each_table_lists_the_dataclass_fields_in_order(cls: type) -> None:
    """A record's stored fields are its dataclass fields, in declaration order (the JSON's order)."""
    assert [f.name for f in dataclasses.fields(cls)] == [f.name for f in STORED_FIELDS[cls]]


def test_annotations_decide_the_kinds() -> None:
    """Each annotation of StepRecord, ModelReply and RunResult maps to the kind its JSON has."""
    kinds = {
        (cls.__name__, f.name): (f.kind, f.nullable, f.target)
        for cls in (StepRecord, ModelReply, RunResult)
        for f in STORED_FIELDS[cls]
    }
    assert (Kind.INTEGER, False, None) == kinds["StepRecord", "step_idx"]
    assert (Kind.STRING, True, None) == kinds["StepRecord", "action"]
    assert (Kind.BOOLEAN, False, None) == kinds["StepRecord", "parse_ok"]
    assert (Kind.ENUM, True, ActionStatus) == kinds["StepRecord", "action_status"]
    assert (Kind.VERSION, False, None) == kinds["StepRecord", "schema_version"]
    assert (Kind.STRING, True, None) == kinds["ModelReply", "call_id"]
    assert (Kind.INTEGER_MAP, True, None) == kinds["ModelReply", "usage"]
    assert (Kind.RECORDS, False, StepRecord) == kinds["RunResult", "steps"]


@dataclass(frozen=True)
class _Unstorable:
    name: str
    weights: list[float]


@dataclass(frozen=True)
class _OptionalWithoutDefault:
    name: str
    extra: str = field(default_factory=str, metadata={"optional_on_read": True})


@dataclass(frozen=True)
class _OptionalVersion:
    name: str
    schema_version: int = field(default=1, metadata={"optional_on_read": True})


@dataclass(frozen=True)
class _NullableMapping:
    labels: Mapping[str, str] | None


@pytest.mark.parametrize(
    ("cls", "message"),
    [
        (_Unstorable, r"cannot store _Unstorable\.weights annotated list\[float\]"),
        (_NullableMapping, r"cannot store _NullableMapping\.labels"),
        (
            _OptionalWithoutDefault,
            r"_OptionalWithoutDefault\.extra is marked 'optional_on_read' but has no default",
        ),
        (
            _OptionalVersion,
            r"_OptionalVersion\.schema_version is marked 'optional_on_read' but is the schema version",
        ),
    ],
    ids=["unsupported type", "nullable mapping", "optional without default", "optional version"],
)
def test_a_field_the_codecs_cannot_handle_is_refused_by_name(cls: type, message: str) -> None:
    """Deriving the tables of a record with an unstorable or misdeclared field raises, naming it."""
    with pytest.raises(TypeError, match=message):
        field_tables((cls,))


def test_a_reply_with_usage_keeps_the_fast_decoding_path() -> None:
    """`ModelReply.usage` (a map of counts) has a fast decoder, so model results read fast."""
    from polyloop.serialization._fast import FAST_DECODERS
    from polyloop.types import ModelCallResult

    assert {ModelReply, ModelCallResult} <= set(FAST_DECODERS)
