"""Fields added after schema 1.0 (``optional_on_read``): absent reads as the default, the default
is not written, anything else stays strict (design 0024)."""

from __future__ import annotations

import dataclasses
import json

import pytest

from polyloop.errors import SerializationError
from polyloop.serialization import dumps, dumps_log_record, loads, loads_log_record
from polyloop.types import ModelCallResult, ModelReply

#: A reply exactly as schema 1.0 stored it, before the additions existed.
STORED_BEFORE = '{"call_id":"c-1","content":"hi","thinking":""}'


def test_the_additions_are_declared_optional_on_read() -> None:
    """`finish_reason` and `usage` carry the metadata key the serializers look for."""
    optional = [
        f.name for f in dataclasses.fields(ModelReply) if f.metadata.get("optional_on_read")
    ]
    assert ["finish_reason", "usage", "model"] == optional


def test_a_reply_stored_before_the_additions_reads_with_their_defaults() -> None:
    """A stored reply without `finish_reason`/`usage` decodes with both `None`."""
    assert ModelReply("c-1", "hi", "", None, None, None) == loads(ModelReply, STORED_BEFORE)


def test_a_reply_not_using_the_additions_is_written_byte_identically() -> None:
    """A reply whose additions are at their defaults encodes exactly as before they existed."""
    assert STORED_BEFORE == dumps(ModelReply("c-1", "hi", ""))
    line = dumps_log_record(ModelCallResult("r", "m-0", ModelReply("c-1", "hi", ""), None))
    assert f'"reply":{STORED_BEFORE},' in line


def test_a_reply_using_the_additions_round_trips_inside_a_log_record() -> None:
    """Finish reason and usage are written when set and read back exactly."""
    reply = ModelReply("c-1", "hi", "", "length", {"prompt_tokens": 7, "completion_tokens": 2})
    record = ModelCallResult("r", "m-0", reply, None)
    line = dumps_log_record(record)
    assert record == loads_log_record(line)
    assert {"prompt_tokens": 7, "completion_tokens": 2} == json.loads(line)["record"]["reply"][
        "usage"
    ]
    answered = ModelCallResult("r", "m-0", dataclasses.replace(reply, model="m-2026"), None)
    line = dumps_log_record(answered)
    assert answered == loads_log_record(line)
    assert "m-2026" == json.loads(line)["record"]["reply"]["model"]


@pytest.mark.parametrize(
    ("extra", "detail"),
    [
        ('"surplus":1', "unknown field(s) ['surplus']"),
        ('"finish_reason":7', "ModelReply.finish_reason"),
        ('"model":7', "ModelReply.model"),
        ('"usage":{"prompt_tokens":1.5}', "ModelReply.usage['prompt_tokens']"),
        ('"usage":[1]', "ModelReply.usage"),
        ('"usage":{"prompt_tokens":-1}', "must be >= 0"),
    ],
)
def test_unknown_keys_and_wrong_types_stay_refused(extra: str, detail: str) -> None:
    """Optional on read relaxes only absence: unknown keys and wrong values are still refused."""
    with pytest.raises(SerializationError) as caught:
        loads(ModelReply, STORED_BEFORE[:-1] + "," + extra + "}")
    assert detail in str(caught.value)
