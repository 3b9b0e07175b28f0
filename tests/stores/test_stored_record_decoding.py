"""The stores decode a stored line with orjson first; the outcome must be exactly that of
``polyloop.serialization.loads_log_record`` on the same text: the same record, or the same
refusal. orjson differs from ``json`` at the edges (``NaN``, integers beyond 64 bits, lone
surrogate escapes, deep nesting), so those are generated on purpose."""

from __future__ import annotations

import json
from typing import Any

from hypothesis import example, given
from hypothesis import strategies as st

from polyloop.serialization import dumps_log_record, loads_log_record
from polyloop.stores._decoding import decode_log_record
from tests.strategies import log_records

_EDGE_VALUES = st.sampled_from(
    [
        10**30,
        -(10**30),
        2**63,
        2**64 + 1,
        float("nan"),
        float("inf"),
        1.0,
        "\ud800",
        "\udfff x",
        [[[[[]]]]],
        None,
        True,
        "",
    ]
)


def _outcome(decode: Any, line: str | bytes) -> tuple[str, object]:
    try:
        return "record", decode(line)
    except Exception as error:
        return type(error).__name__, str(error)


def _same(line: str) -> None:
    expected = _outcome(loads_log_record, line)
    assert _outcome(decode_log_record, line) == expected
    try:
        raw = line.encode("utf-8")
    except UnicodeEncodeError:
        return  # a lone surrogate character: a store never holds such bytes
    assert _outcome(decode_log_record, raw) == _outcome(loads_log_record, raw)


@given(log_records)
def test_a_written_record_decodes_to_itself(record: Any) -> None:
    line = dumps_log_record(record)
    assert decode_log_record(line) == record
    assert decode_log_record(line.encode("utf-8")) == record


@given(log_records, st.data())
def test_a_record_with_one_field_replaced_decodes_as_the_strict_path_says(
    record: Any, data: st.DataObject
) -> None:
    payload = json.loads(dumps_log_record(record))
    body = payload["record"]
    target = body["step"] if "step" in body and data.draw(st.booleans()) else body
    key = data.draw(st.sampled_from(sorted(target)))
    target[key] = data.draw(_EDGE_VALUES)
    _same(json.dumps(payload, ensure_ascii=data.draw(st.booleans()), allow_nan=True))


@given(
    st.recursive(
        st.none() | st.booleans() | st.integers() | st.floats() | st.text(),
        lambda children: (
            st.lists(children, max_size=3)
            | st.dictionaries(st.text(max_size=8), children, max_size=3)
        ),
        max_leaves=12,
    )
)
def test_any_json_decodes_as_the_strict_path_says(value: object) -> None:
    _same(json.dumps({"type": "intent", "record": value}, allow_nan=True))
    _same(json.dumps(value, allow_nan=True))


@given(st.text(max_size=60))
@example("0\x00")  # as bytes, json.loads took it for UTF-16 ("0") where orjson reads UTF-8
def test_any_text_decodes_as_the_strict_path_says(text: str) -> None:
    """Any text, as str or as its UTF-8 bytes, decodes to the same record or refusal on both
    paths."""
    _same(text)


def test_deep_nesting_decodes_as_the_strict_path_says() -> None:
    _same("[" * 2000 + "]" * 2000)
    _same('{"type":"intent","record":' + "[" * 600 + "]" * 600 + "}")
