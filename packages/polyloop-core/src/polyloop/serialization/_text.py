"""JSON text of records: ``dumps`` and ``dumps_log_record``.

The text is compact JSON with non-ASCII kept as characters, except the few characters
``_ESCAPED`` names. Most records become text through their dict (``_dicts``) and
:func:`json.dumps`. A run's result holds every step of the run, so ``RunResult`` and
``RunFinished`` (and the steps inside them) are written straight into text by encoders
generated from their stored fields: a step whose fields all have their usual types is one
f-string; any other value goes through its dict, and both give the same text
(``tests/core/serialization/test_serialization_text.py`` holds them to it).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping
from typing import Any

from polyloop.serialization._dicts import ENCODERS, encoder_name, to_dict
from polyloop.serialization._schema import (
    Encodable,
    FieldTables,
    Kind,
    LogRecord,
    StoredField,
    default_name,
    field_tables,
    generate_function,
    log_record_tag,
    unless_default,
)
from polyloop.types import Intent, ModelCallResult, RunFinished, RunResult, StepCompleted

__all__ = ["build_text_encoders", "dumps", "dumps_log_record", "escape"]

#: Characters kept out of the JSON text as ``\uXXXX`` escapes: lone surrogates (a Python string
#: may hold one, e.g. a model reply cut inside an emoji, but UTF-8 cannot encode it) and the
#: line separators other than ``\n``/``\r`` that ``str.splitlines`` breaks on (U+0085,
#: U+2028, U+2029; JSON already escapes the control characters).
_ESCAPED = re.compile("[\ud800-\udfff\x85\u2028\u2029]")


def escape(text: str) -> str:
    """``text`` with the characters in ``_ESCAPED`` written as ``\\uXXXX`` escapes.

    Escaping them keeps the text encodable as UTF-8 (a store can write it) and one line for any
    line splitter, and it decodes back to the same string. These characters can only occur
    inside a JSON string, so the escape is always valid there. (A high surrogate directly
    followed by a low one reads back as the single character the pair encodes: JSON cannot
    tell the two apart.)
    """
    if text.isascii() or _ESCAPED.search(text) is None:
        return text
    return _ESCAPED.sub(lambda match: f"\\u{ord(match.group()):04x}", text)


#: The encoder ``json.dumps(payload, ensure_ascii=False, separators=(",", ":"))`` builds on
#: every call, built once (the same text; a fork encodes thousands of records at once).
_COMPACT_ENCODER = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"))


def _compact(payload: object) -> str:
    """Compact JSON with non-ASCII kept as characters (nothing escaped yet)."""
    return _COMPACT_ENCODER.encode(payload)


#: JSON text of one string, exactly as ``_compact`` writes it (non-ASCII kept).
_quote: Callable[[str], str] = json.encoder.encode_basestring


def _json_text(payload: object) -> str:
    """Compact JSON with non-ASCII kept as characters, except those in ``_ESCAPED``."""
    return escape(_compact(payload))


# ---------------------------------------------------------------------------
# Generated text encoders
# ---------------------------------------------------------------------------

#: The roots of the records written straight into text (with everything nested in them).
_TEXT_ROOTS = (RunFinished, StepCompleted, Intent, ModelCallResult)


def _text_name(cls: type[Any]) -> str:
    return f"_text_{cls.__name__}"


def _enum_table_name(enum: type[Any], nullable: bool) -> str:
    return f"_TEXT_{enum.__name__}{'_OR_NULL' if nullable else ''}"


def _guard(field: StoredField, value: str) -> str | None:
    """A check that ``value`` has the type the f-string below expects (None: no check needed)."""
    if field.kind in (Kind.RECORD, Kind.RECORDS, Kind.STRING_MAP, Kind.INTEGER_MAP):
        return None  # nested encoders check their own fields; a mapping goes through json
    if field.kind is Kind.ENUM:
        assert field.target is not None
        exact = f"type({value}) is {field.target.__name__}"
    else:
        exact = {
            Kind.STRING: f"type({value}) is str",
            Kind.INTEGER: f"type({value}) is int",
            Kind.VERSION: f"type({value}) is int",
            Kind.BOOLEAN: f"type({value}) is bool",
        }[field.kind]
    return f"({value} is None or {exact})" if field.nullable else exact


def _fragment(field: StoredField, value: str) -> str:
    """The f-string fragment of ``field``'s JSON value (inner quotes are double quotes)."""
    kind, target = field.kind, field.target
    if kind is Kind.RECORDS:
        assert target is not None
        return f'[{{",".join([{_text_name(target)}(item) for item in {value}])}}]'
    if kind is Kind.ENUM:
        assert target is not None
        return f"{{{_enum_table_name(target, field.nullable)}[{value}]}}"
    if kind is Kind.STRING_MAP:
        return f"{{_compact(dict({value}))}}"
    if kind is Kind.INTEGER_MAP:
        text = f"_compact(dict({value}))"
    elif kind is Kind.RECORD:
        assert target is not None
        text = f"{_text_name(target)}({value})"
    elif kind is Kind.STRING:
        text = f"_quote({value})"
    elif kind is Kind.BOOLEAN:
        text = f'"true" if {value} else "false"'
    else:  # INTEGER, VERSION: exact ints, so format() writes what json.dumps writes
        text = value
    return f'{{"null" if {value} is None else {text}}}' if field.nullable else f"{{{text}}}"


def _text_source(cls: type[Any], fields: tuple[StoredField, ...]) -> str:
    name = _text_name(cls)
    lines = [f"def {name}(value):"]
    lines += [f"    {field.name}_ = value.{field.name}" for field in fields]
    guards = [g for g in (_guard(field, field.name + "_") for field in fields) if g is not None]
    if guards:
        lines.append(f"    if not ({' and '.join(guards)}):")
        lines.append(f"        return _compact({encoder_name(cls)}(value))")
    # Fragments hold no single quote (field names are identifiers), so they fit in f'...'.
    parts = [(field, f'"{field.name}":{_fragment(field, field.name + "_")}') for field in fields]
    if not any(field.optional_on_read for field in fields):
        lines.append(f"    return f'{{{{{','.join(part for _, part in parts)}}}}}'")
    else:
        # Each part with a leading comma; the first comma is cut off at the end.
        lines.append("    text = ''")
        for field, part in parts:
            lines += unless_default(cls, field, f"text += f',{part}'")
        lines.append("    return '{' + text[1:] + '}'")
    return "\n".join(lines) + "\n"


def build_text_encoders(
    tables: FieldTables, encoders: Mapping[type[Any], Callable[[Any], dict[str, Any]]]
) -> dict[type[Any], Callable[[Any], str]]:
    """The text encoder of every record type in ``tables``; ``encoders`` are their dict
    encoders, which write any value whose fields do not all have their usual types."""
    namespace: dict[str, Any] = {"_compact": _compact, "_quote": _quote}
    text_encoders: dict[type[Any], Callable[[Any], str]] = {}
    for cls, fields in tables.items():  # inner types first
        namespace[encoder_name(cls)] = encoders[cls]
        for field in fields:
            if field.optional_on_read:
                namespace[default_name(cls, field)] = field.default
            if field.kind is Kind.ENUM:
                enum = field.target
                assert enum is not None
                namespace[enum.__name__] = enum
                table: dict[object, str] = {m: _quote(m.value) for m in enum}
                if field.nullable:
                    table[None] = "null"
                namespace[_enum_table_name(enum, field.nullable)] = table
        source = _text_source(cls, fields)
        text_encoders[cls] = generate_function(_text_name(cls), source, namespace)
    return text_encoders


_TEXT_ENCODERS = build_text_encoders(field_tables(_TEXT_ROOTS), ENCODERS)
_result_text: Callable[[RunResult], str] = _TEXT_ENCODERS[RunResult]
_run_finished_text: Callable[[RunFinished], str] = _TEXT_ENCODERS[RunFinished]
#: The log records written straight into text, each with its line's opening: a step's records
#: are most of what a store writes (and a fork copies thousands at once, design 0067).
_LINE_TEXT: dict[type[Any], tuple[str, Callable[[Any], str]]] = {
    cls: (f'{{"type":"{tag}","record":', _TEXT_ENCODERS[cls])
    for cls, tag in (
        (StepCompleted, "step_completed"),
        (Intent, "intent"),
        (ModelCallResult, "model_call_result"),
    )
}


def dumps(value: Encodable) -> str:
    """Compact JSON text of ``value`` (non-ASCII kept as UTF-8 characters)."""
    if type(value) is RunResult:
        return escape(_result_text(value))
    return _json_text(to_dict(value))


def dumps_log_record(record: LogRecord) -> str:
    """One line of JSON: ``{"type": <tag>, "record": <record>}``.

    It holds no line break of any kind (not even one ``str.splitlines`` would split on).
    """
    if type(record) is RunFinished:
        return escape(f'{{"type":"run_finished","record":{_run_finished_text(record)}}}')
    line = _LINE_TEXT.get(type(record))
    if line is not None:
        return escape(f"{line[0]}{line[1](record)}}}")
    return _json_text({"type": log_record_tag(record), "record": to_dict(record)})
