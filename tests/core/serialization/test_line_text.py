"""The generated text encoders of a step's records (``StepCompleted``, ``Intent``,
``ModelCallResult``; ``RunFinished`` before them) write exactly the line the JSON of the
record's dict gives, for any record (design 0067 made them the stores' path for those kinds)."""

from __future__ import annotations

import json

from hypothesis import given, settings

from polyloop.serialization import LogRecord, dumps_log_record, log_record_tag, to_dict
from polyloop.serialization._text import escape
from tests.strategies import log_records


@settings(max_examples=500, deadline=None)
@given(record=log_records)
def test_a_line_is_the_json_of_the_records_dict(record: LogRecord) -> None:
    expected = escape(
        json.dumps(
            {"type": log_record_tag(record), "record": to_dict(record)},
            ensure_ascii=False,
            separators=(",", ":"),
        )
    )
    assert expected == dumps_log_record(record)
