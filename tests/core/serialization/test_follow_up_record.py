"""``RunStarted.follows_run_id`` / ``queued_input`` (design 0052): defaulted, absent from the
encoding when unset, both or neither."""

from __future__ import annotations

import copy
import pickle

import pytest

from polyloop.errors import ConfigurationError, SerializationError
from polyloop.serialization import dumps_log_record, loads_log_record
from polyloop.types import RunStarted

#: A RunStarted line exactly as written before the follow-up fields existed.
STORED_BEFORE = (
    '{"type":"run_started","record":{"run_id":"r","parameter_snapshot":{"a":"b"},'
    '"schema_version":1}}'
)


def test_a_run_that_follows_none_is_written_byte_identically() -> None:
    """A RunStarted without the follow-up fields encodes exactly as before they existed."""
    assert STORED_BEFORE == dumps_log_record(RunStarted("r", {"a": "b"}))


def test_a_line_written_before_the_fields_reads_with_both_none() -> None:
    """An old line decodes with follows_run_id and queued_input None."""
    assert RunStarted("r", {"a": "b"}, 1, None, None) == loads_log_record(STORED_BEFORE)


def test_a_follow_up_round_trips_through_json_pickle_and_deepcopy() -> None:
    """Both fields are written when set and come back from every copy."""
    record = RunStarted("r2", {"a": "b"}, follows_run_id="r", queued_input="and now?")
    line = dumps_log_record(record)
    assert line.endswith('"follows_run_id":"r","queued_input":"and now?"}}')
    assert record == loads_log_record(line)
    assert record == pickle.loads(pickle.dumps(record))
    assert record == copy.deepcopy(record)


@pytest.mark.parametrize(
    ("follows", "queued", "detail"),
    [
        ("r", None, "sets follows_run_id without queued_input"),
        (None, "hi", "sets queued_input without follows_run_id"),
        ("", "hi", "must name another run"),
        ("r2", "hi", "must name another run"),
        ("r", 7, "queued_input must be a string"),
    ],
)
def test_a_half_or_self_follow_up_is_refused(follows: object, queued: object, detail: str) -> None:
    """Both fields or neither, naming another run, with a string input."""
    with pytest.raises(ConfigurationError, match=detail):
        RunStarted("r2", {}, follows_run_id=follows, queued_input=queued)  # type: ignore[arg-type]


def test_a_stored_half_follow_up_is_refused_on_read() -> None:
    """A line with follows_run_id but no queued_input is refused, not read half-way."""
    line = STORED_BEFORE.replace('"schema_version":1}', '"schema_version":1,"follows_run_id":"q"}')
    with pytest.raises(SerializationError, match="without queued_input"):
        loads_log_record(line)
