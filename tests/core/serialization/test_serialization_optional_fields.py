"""Fields added after schema 1.0 (``metadata={"optional_on_read": True}``), on throwaway records.

No real record has such a field yet, so these tests build the package's codecs for records
declared here: a reply that grew a finish reason, a usage record, a token count, a flag and a
note, inside a result that holds one reply, a list of them, and a required field after an
optional one. They prove the rule of design 0023 on both decoding paths (the strict reader and
the fast decoder) and on both encoders (dict and text): a field at its default is left out, an
absent field decodes to its default, every other field stays required, and unknown keys (what a
reader older than the field sees) are refused.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from polyloop.errors import ConfigurationError, SerializationError
from polyloop.serialization._dicts import build_encoders
from polyloop.serialization._fast import build_decoders
from polyloop.serialization._schema import field_tables
from polyloop.serialization._strict import read_record
from polyloop.serialization._text import build_text_encoders
from tests.strategies import call_ids, counts, short_texts, texts

pytestmark = pytest.mark.filterwarnings("error")

ADDED = {"optional_on_read": True}


class Finish(StrEnum):
    STOP = "stop"
    LENGTH = "length"


@dataclass(frozen=True, slots=True)
class Usage:
    prompt_tokens: int
    completion_tokens: int


@dataclass(frozen=True, slots=True)
class Reply:
    """What a reply of schema 1.0 held, plus five fields added later."""

    call_id: str | None
    content: str
    finish_reason: Finish | None = field(default=None, metadata=ADDED)
    usage: Usage | None = field(default=None, metadata=ADDED)
    total_tokens: int = field(default=0, metadata=ADDED)
    cached: bool = field(default=False, metadata=ADDED)
    note: str = field(default="", metadata=ADDED)

    def __post_init__(self) -> None:
        if self.call_id == "":
            raise ConfigurationError("Reply.call_id is empty.")


@dataclass(frozen=True, slots=True)
class Result:
    """A versioned record nesting replies, with a required field after an optional one."""

    run_id: str
    reply: Reply | None
    replies: tuple[Reply, ...]
    label: str = field(default="", metadata=ADDED)
    schema_version: int = 1


@dataclass(frozen=True, slots=True)
class ReplyBefore:
    """The same reply as a library older than its added fields declares it."""

    call_id: str | None
    content: str


TABLES = field_tables((Result,))
ENCODERS = build_encoders(TABLES)
TEXT = build_text_encoders(TABLES, ENCODERS)
FAST = build_decoders(TABLES)
OPTIONAL = {cls: {f.name for f in fields if f.optional_on_read} for cls, fields in TABLES.items()}


def strict(cls: type[Any], payload: object) -> Any:
    return read_record(cls, payload, TABLES)


def fast(cls: type[Any], payload: object) -> Any:
    """The fast decoder's answer, ``None`` where it declines (as the package's caller treats it)."""
    try:
        return FAST[cls](payload)
    except (ConfigurationError, TypeError, KeyError):
        return None


DECODERS: list[Callable[[type[Any], object], Any]] = [strict, fast]

replies = st.builds(
    Reply,
    call_id=call_ids,
    content=texts,
    finish_reason=st.none() | st.sampled_from(Finish),
    usage=st.none() | st.builds(Usage, counts, counts),
    total_tokens=st.just(0) | counts,
    cached=st.booleans(),
    note=st.just("") | short_texts,
)
results = st.builds(
    Result,
    run_id=short_texts,
    reply=st.none() | replies,
    replies=st.lists(replies, max_size=4).map(tuple),
    label=st.just("") | short_texts,
)

relaxed = settings(
    max_examples=80,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


def _objects(payload: Any) -> list[tuple[type[Any], dict[str, Any]]]:
    """Every (record type, object) of an encoded ``Result``."""
    found: list[tuple[type[Any], dict[str, Any]]] = [(Result, payload)]
    for reply in [payload["reply"], *payload["replies"]]:
        if reply is not None:
            found.append((Reply, reply))
            if "usage" in reply and reply["usage"] is not None:
                found.append((Usage, reply["usage"]))
    return found


def _records(value: Result) -> list[tuple[type[Any], Any]]:
    """``value`` and the replies and usages inside it, outermost first, as ``_objects`` lists them."""
    found: list[tuple[type[Any], Any]] = [(Result, value)]
    for reply in [value.reply, *value.replies]:
        if reply is not None:
            found.append((Reply, reply))
            if reply.usage is not None:
                found.append((Usage, reply.usage))
    return found


@relaxed
@given(value=results)
def test_a_field_at_its_default_is_left_out_and_any_other_value_written(value: Result) -> None:
    """The dict encoder writes an added field exactly when its value differs from its default."""
    payload = ENCODERS[Result](value)
    for (cls, record), (_, obj) in zip(_records(value), _objects(payload), strict=True):
        expected = [
            f.name
            for f in dataclasses.fields(cls)
            if f.name not in OPTIONAL[cls] or getattr(record, f.name) != f.default
        ]
        assert expected == list(obj)


def test_a_record_that_sets_no_added_field_is_written_as_before() -> None:
    """With every added field at its default, the JSON is that of the record without them."""
    value = Result("r", Reply("c-1", "hi"), (Reply(None, "there"),))
    expected = {
        "run_id": "r",
        "reply": {"call_id": "c-1", "content": "hi"},
        "replies": [{"call_id": None, "content": "there"}],
        "schema_version": 1,
    }
    assert expected == ENCODERS[Result](value)
    assert json.dumps(expected, separators=(",", ":")) == TEXT[Result](value)


@relaxed
@given(value=results)
def test_the_text_encoder_writes_what_the_dict_encoder_does(value: Result) -> None:
    """The generated text of a record with added fields is the compact JSON of its dict."""
    expected = json.dumps(ENCODERS[Result](value), ensure_ascii=False, separators=(",", ":"))
    assert expected == TEXT[Result](value)


@pytest.mark.parametrize("decode", DECODERS, ids=["strict", "fast"])
@relaxed
@given(value=results)
def test_records_with_added_fields_round_trip(
    decode: Callable[[type[Any], object], Any], value: Result
) -> None:
    """What the encoder writes decodes back to the same record, on both decoding paths."""
    assert value == decode(Result, ENCODERS[Result](value))
    assert value == decode(Result, json.loads(TEXT[Result](value)))


@pytest.mark.parametrize("decode", DECODERS, ids=["strict", "fast"])
@relaxed
@given(value=results, data=st.data())
def test_an_absent_added_field_decodes_to_its_default(
    decode: Callable[[type[Any], object], Any], value: Result, data: st.DataObject
) -> None:
    """Removing added fields from a stored payload gives the record with those fields at default."""
    payload = ENCODERS[Result](value)
    expected_replies: list[Reply | None] = []
    for reply_payload, reply in zip(
        [payload["reply"], *payload["replies"]], [value.reply, *value.replies], strict=True
    ):
        if reply is None:
            expected_replies.append(None)
            continue
        dropped = data.draw(st.sets(st.sampled_from(sorted(OPTIONAL[Reply]))))
        for name in dropped:
            reply_payload.pop(name, None)
        defaults = {f.name: f.default for f in dataclasses.fields(Reply) if f.name in dropped}
        expected_replies.append(dataclasses.replace(reply, **defaults))
    if data.draw(st.booleans()):
        payload.pop("label", None)
        value = dataclasses.replace(value, label="")
    expected = dataclasses.replace(
        value,
        reply=expected_replies[0],
        replies=tuple(r for r in expected_replies[1:] if r is not None),
    )
    assert expected == decode(Result, payload)


@pytest.mark.parametrize("decode", DECODERS, ids=["strict", "fast"])
def test_an_added_field_stored_at_its_default_is_read(
    decode: Callable[[type[Any], object], Any],
) -> None:
    """A payload that spells out an added field's default value decodes like one that omits it."""
    payload = {"call_id": None, "content": "x", "finish_reason": None, "total_tokens": 0}
    assert Reply(None, "x") == decode(Reply, payload)


@relaxed
@given(value=results, data=st.data())
def test_fields_of_schema_one_stay_required(value: Result, data: st.DataObject) -> None:
    """Removing a field that is not marked optional is refused by the strict reader, naming it,
    and declined by the fast decoder."""
    payload = ENCODERS[Result](value)
    cls, obj = data.draw(st.sampled_from(_objects(payload)))
    name = data.draw(st.sampled_from(sorted(set(obj) - OPTIONAL[cls])))
    del obj[name]
    assert fast(Result, payload) is None
    with pytest.raises(SerializationError, match=rf"field {name!r} is missing"):
        strict(Result, payload)


@relaxed
@given(value=results, data=st.data())
def test_unknown_keys_stay_refused(value: Result, data: st.DataObject) -> None:
    """An unknown key in any object is refused by the strict reader and declined by the fast one."""
    payload = ENCODERS[Result](value)
    _, obj = data.draw(st.sampled_from(_objects(payload)))
    obj["surplus"] = data.draw(st.sampled_from([None, 0, "", False]))
    assert fast(Result, payload) is None
    with pytest.raises(SerializationError, match=r"unknown field\(s\) \['surplus'\]"):
        strict(Result, payload)


@pytest.mark.parametrize(
    ("name", "stored"),
    [
        ("finish_reason", "done"),
        ("finish_reason", 1),
        ("usage", "many"),
        ("usage", {"prompt_tokens": 1}),
        ("total_tokens", True),
        ("total_tokens", None),
        ("total_tokens", 1.5),
        ("cached", 0),
        ("note", None),
    ],
    ids=repr,
)
def test_an_added_field_of_the_wrong_type_is_refused(name: str, stored: object) -> None:
    """An added field is checked like any other when it is present: the strict reader names it."""
    payload: dict[str, object] = {"call_id": None, "content": "x", name: stored}
    assert fast(Reply, payload) is None
    with pytest.raises(SerializationError, match=rf"^Reply\.{name}"):
        strict(Reply, payload)


def test_a_reader_older_than_the_field_refuses_it_by_name() -> None:
    """A library that does not know an added field refuses a payload carrying it, naming it."""
    payload = ENCODERS[Reply](Reply("c-1", "hi", finish_reason=Finish.LENGTH))
    before = field_tables((ReplyBefore,))
    with pytest.raises(SerializationError) as caught:
        read_record(ReplyBefore, payload, before)
    assert (
        "ReplyBefore: unknown field(s) ['finish_reason']; refusing to drop data silently."
        == str(caught.value)
    )
    # A record that leaves the field at its default is readable by that older library.
    assert ReplyBefore("c-1", "hi") == read_record(
        ReplyBefore, ENCODERS[Reply](Reply("c-1", "hi")), before
    )


_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=5) | st.sampled_from(Finish),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=12), inner),
    max_leaves=12,
)


@relaxed
@given(value=results, data=st.data())
def test_the_fast_decoder_agrees_with_the_strict_reader(value: Result, data: st.DataObject) -> None:
    """On a payload with any field replaced or added, the fast decoder declines or gives exactly
    what the strict reader gives."""
    payload = ENCODERS[Result](value)
    _, obj = data.draw(st.sampled_from(_objects(payload)))
    key = data.draw(st.sampled_from([*sorted(obj), "finish_reason", "usage", "note", "other"]))
    obj[key] = data.draw(_values)
    decoded = fast(Result, payload)
    try:
        expected = strict(Result, payload)
    except SerializationError:
        assert decoded is None
    else:
        assert decoded is None or expected == decoded
