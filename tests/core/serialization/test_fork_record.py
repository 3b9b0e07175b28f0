"""``RunStarted.forked_from_run_id`` / ``forked_at_step`` / ``fork_left_in_doubt`` (design 0067):
defaulted, absent from the encoding when unset, source and step both or neither."""

from __future__ import annotations

import copy
import dataclasses
import pickle

import pytest
from syrupy.assertion import SnapshotAssertion

from polyloop.errors import ConfigurationError, SerializationError
from polyloop.serialization import dumps_log_record, loads_log_record
from polyloop.types import RunStarted

#: A RunStarted line exactly as written before the fork fields existed.
STORED_BEFORE = (
    '{"type":"run_started","record":{"run_id":"r","parameter_snapshot":{"a":"b"},'
    '"schema_version":1}}'
)


def test_a_run_that_is_no_fork_is_written_byte_identically() -> None:
    assert STORED_BEFORE == dumps_log_record(RunStarted("r", {"a": "b"}))
    assert RunStarted("r", {"a": "b"}) == loads_log_record(STORED_BEFORE)


@pytest.mark.parametrize("in_doubt", [False, True], ids=["whole", "in-doubt"])
def test_a_fork_line_is_pinned_and_round_trips(in_doubt: bool, snapshot: SnapshotAssertion) -> None:
    record = RunStarted(
        "f", {"a": "b"}, forked_from_run_id="r", forked_at_step=3, fork_left_in_doubt=in_doubt
    )
    line = dumps_log_record(record)
    assert snapshot == line
    assert record == loads_log_record(line)
    assert record == pickle.loads(pickle.dumps(record))
    assert record == copy.deepcopy(record)


@pytest.mark.parametrize(
    ("source", "at", "doubt", "detail"),
    [
        ("r", None, False, "sets forked_from_run_id without forked_at_step"),
        (None, 2, False, "sets forked_at_step without forked_from_run_id"),
        ("f", 2, False, "must name another run"),
        ("", 2, False, "must name another run"),
        ("r", -1, False, "must be an integer >= 0"),
        ("r", True, False, "must be an integer >= 0"),
        ("r", 0, True, "only a fork's last copied step"),
        (None, None, True, "only a fork's last copied step"),
    ],
)
def test_a_malformed_fork_is_refused(source: object, at: object, doubt: bool, detail: str) -> None:
    with pytest.raises(ConfigurationError, match=detail):
        RunStarted(
            "f",
            {},
            forked_from_run_id=source,  # type: ignore[arg-type]
            forked_at_step=at,  # type: ignore[arg-type]
            fork_left_in_doubt=doubt,
        )


def test_a_stored_half_fork_is_refused_on_read() -> None:
    line = STORED_BEFORE.replace('"schema_version":1}', '"schema_version":1,"forked_at_step":2}')
    with pytest.raises(SerializationError, match="without forked_from_run_id"):
        loads_log_record(line)


def test_a_replayed_prefix_is_stored_only_when_set_and_only_for_a_fork() -> None:
    """``fork_replayed_prefix`` (design 0072): left out at False, so a fork written before it
    reads back unchanged; True only on a fork."""
    plain = RunStarted("f", {"a": "b"}, forked_from_run_id="r", forked_at_step=3)
    assert "fork_replayed_prefix" not in dumps_log_record(plain)
    replayed = dataclasses.replace(plain, fork_replayed_prefix=True)
    line = dumps_log_record(replayed)
    assert line == dumps_log_record(plain)[:-2] + ',"fork_replayed_prefix":true}}'
    assert replayed == loads_log_record(line)
    assert replayed == pickle.loads(pickle.dumps(replayed))
    with pytest.raises(ConfigurationError, match="only a fork has a prefix to replay"):
        RunStarted("f", {}, fork_replayed_prefix=True)
    with pytest.raises(ConfigurationError, match="must be a bool"):
        RunStarted("f", {}, forked_from_run_id="r", forked_at_step=1, fork_replayed_prefix=1)  # type: ignore[arg-type]
