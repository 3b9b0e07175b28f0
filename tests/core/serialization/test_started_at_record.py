"""``RunStarted.started_at`` (design 0061): defaulted, absent from the encoding when unset, so a
line written before it reads unchanged and a run without it is stored exactly as before."""

from __future__ import annotations

import copy
import pickle

import pytest

from polyloop.errors import ConfigurationError, SerializationError
from polyloop.serialization import dumps_log_record, loads_log_record
from polyloop.types import RunStarted

#: A RunStarted line exactly as written before ``started_at`` existed.
STORED_BEFORE = (
    '{"type":"run_started","record":{"run_id":"r","parameter_snapshot":{"a":"b"},'
    '"schema_version":1}}'
)


def test_a_line_written_before_the_field_reads_as_none() -> None:
    """An old line decodes with started_at None, and a None start time writes the old line."""
    record = loads_log_record(STORED_BEFORE)
    assert isinstance(record, RunStarted)
    assert record.started_at is None
    assert STORED_BEFORE == dumps_log_record(record)


def test_a_start_time_is_written_last_and_read_back() -> None:
    """Set, it is the record's last key, after a follow-up's fields, and comes back from JSON,
    pickle and deepcopy."""
    record = RunStarted(
        "r2",
        {"a": "b"},
        follows_run_id="r",
        queued_input="hi",
        started_at="2026-12-07T04:05:06+00:00",
    )
    line = dumps_log_record(record)
    assert line.endswith('"queued_input":"hi","started_at":"2026-12-07T04:05:06+00:00"}}')
    assert record == loads_log_record(line)
    assert record == pickle.loads(pickle.dumps(record))
    assert record == copy.deepcopy(record)


@pytest.mark.parametrize("value", ["", 7])
def test_an_empty_or_non_text_start_time_is_refused(value: object) -> None:
    """Built in code, a start time is a non-empty string or None."""
    with pytest.raises(ConfigurationError, match="started_at must be a non-empty ISO 8601"):
        RunStarted("r", {}, started_at=value)  # type: ignore[arg-type]


def test_a_stored_start_time_of_the_wrong_type_is_refused_naming_it() -> None:
    """On read, a number where the time goes is refused by field, not read as None."""
    line = STORED_BEFORE.replace('"schema_version":1}', '"schema_version":1,"started_at":7}')
    with pytest.raises(SerializationError, match="started_at"):
        loads_log_record(line)
