"""Fast decoders: a well-formed payload becomes its record after a few type checks.

Reading a run decodes every record of it, so each record type gets a decoder generated from its
stored fields: straight-line code that reads each field by name from an object with exactly as
many entries (a missing or unknown field then raises ``KeyError`` or fails the count), checks
the JSON type of every field, and builds the record positionally, whose constructor (and its
``__post_init__``) still checks the structural rules. A decoder that meets anything unusual
returns ``None`` or raises ``KeyError``/``TypeError``/``ConfigurationError``; the caller then
asks the strict reader (``_strict``), which gives the same record or the error that names the
field. ``tests/stores/test_stored_record_decoding.py`` and the round-trip tests hold the two
paths to the same answers.

Also here: :func:`parse_json`, the JSON scanner without ``json.loads``'s per-call preamble.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from typing import Any

from polyloop.errors import SerializationError
from polyloop.serialization._schema import (
    READABLE_SCHEMA_VERSIONS,
    STORED_FIELDS,
    FieldTables,
    Kind,
    StoredField,
    default_name,
    generate_function,
)

__all__ = ["FAST_DECODERS", "build_decoders", "parse_json"]


def _decoder_name(cls: type[Any]) -> str:
    return f"_fast_{cls.__name__}"


def _enum_table_name(enum: type[Any]) -> str:
    return f"_{enum.__name__}_BY_VALUE"


def _check(field: StoredField, value: str) -> tuple[list[str], str | None]:
    """Statements that convert ``value`` in place (returning None on failure), and a condition
    it must meet afterwards (None: nothing left to check)."""
    kind, target = field.kind, field.target
    if kind is Kind.ENUM:
        assert target is not None
        table = _enum_table_name(target)
        convert = f"{value} = {table}.get({value}) if type({value}) is str else None"
        if field.nullable:
            return [
                f"if {value} is not None:",
                f"    {convert}",
                f"    if {value} is None: return None",
            ], None
        return [convert], f"{value} is not None"
    if kind in (Kind.RECORD, Kind.RECORDS):
        assert target is not None
        decode = _decoder_name(target)
        if kind is Kind.RECORDS:
            # The strict reader names the faulty item; here any fault just gives up.
            return [
                f"if type({value}) is not list: return None",
                "items = []",
                f"for item in {value}:",
                f"    item = {decode}(item)",
                "    if item is None: return None",
                "    items.append(item)",
                f"{value} = tuple(items)",
            ], None
        lines = [f"{value} = {decode}({value})", f"if {value} is None: return None"]
        if field.nullable:
            return [f"if {value} is not None:", *(f"    {line}" for line in lines)], None
        return lines, None
    exact = {
        # The record's own constructor checks each count (ConfigurationError: strict path).
        Kind.INTEGER_MAP: f"type({value}) is dict",
        Kind.STRING: f"type({value}) is str",
        Kind.INTEGER: f"type({value}) is int",
        Kind.BOOLEAN: f"type({value}) is bool",
        Kind.VERSION: f"type({value}) is int and {value} in _READABLE",
    }.get(kind)
    if exact is None:  # STRING_MAP: the strict reader checks it
        raise TypeError(f"no fast decoder for {kind}")
    return [], f"({value} is None or {exact})" if field.nullable else exact


def _decoder_source(cls: type[Any], fields: tuple[StoredField, ...]) -> str:
    name = _decoder_name(cls)
    required = [f for f in fields if not f.optional_on_read]
    optional = [f for f in fields if f.optional_on_read]
    lines = [f"def {name}(p):"]
    if optional:
        present = " + ".join(f"({f.name!r} in p)" for f in optional)
        lines.append("    if type(p) is not dict: return None")
        lines.append(f"    if len(p) != {len(required)} + {present}: return None")
    else:
        lines.append(f"    if type(p) is not dict or len(p) != {len(fields)}: return None")
    conditions = []
    for field in fields:
        value = f"{field.name}_"
        statements, condition = _check(field, value)
        if field.optional_on_read:
            # A default needs no check; a stored value gets its checks right here.
            lines.append(f"    if {field.name!r} in p:")
            lines.append(f"        {value} = p[{field.name!r}]")
            lines += [f"        {line}" for line in statements]
            if condition is not None:
                lines.append(f"        if not ({condition}): return None")
            lines.append("    else:")
            lines.append(f"        {value} = {default_name(cls, field)}")
        else:
            lines.append(f"    {value} = p[{field.name!r}]")
            lines += [f"    {line}" for line in statements]
            if condition is not None:
                conditions.append(condition)
    if conditions:
        lines.append(f"    if not ({' and '.join(conditions)}): return None")
    arguments = ", ".join(f"{field.name}_" for field in fields)
    lines.append(f"    return {cls.__name__}({arguments})")
    return "\n".join(lines) + "\n"


def build_decoders(tables: FieldTables) -> dict[type[Any], Callable[[Any], Any]]:
    """The fast decoder of every record type in ``tables`` that can have one: all but those
    holding a string map (and the records that nest them), which the strict reader reads alone."""
    namespace: dict[str, Any] = {"_READABLE": READABLE_SCHEMA_VERSIONS}
    decoders: dict[type[Any], Callable[[Any], Any]] = {}
    for cls, fields in tables.items():  # inner types first
        nested = [f.target for f in fields if f.kind in (Kind.RECORD, Kind.RECORDS)]
        if any(f.kind is Kind.STRING_MAP for f in fields) or any(
            target not in decoders for target in nested
        ):
            continue
        namespace[cls.__name__] = cls
        for field in fields:
            if field.optional_on_read:
                namespace[default_name(cls, field)] = field.default
            if field.kind is Kind.ENUM:
                assert field.target is not None
                table = {member.value: member for member in field.target}
                namespace[_enum_table_name(field.target)] = table
        source = _decoder_source(cls, fields)
        decoders[cls] = generate_function(_decoder_name(cls), source, namespace)
    return decoders


#: The fast decoder of every stored record type that has one.
FAST_DECODERS: Mapping[type[Any], Callable[[Any], Any]] = build_decoders(STORED_FIELDS)


#: ``json.loads`` without its per-call preamble: the same scanner (strict, default hooks).
_scan_once: Callable[[str, int], tuple[Any, int]] = json.JSONDecoder().scan_once  # type: ignore[attr-defined]


def parse_json(what: str, text: str | bytes) -> object:
    """The JSON value of ``text``, exactly as ``json.loads`` reads it; ``what`` names it in the
    error."""
    if type(text) is str:
        try:
            payload, end = _scan_once(text, 0)
        except (StopIteration, ValueError, RecursionError):
            pass  # json.loads below raises the error (or accepts what the scanner did not)
        else:
            # A value that fills the whole text is what json.loads would return; leading or
            # trailing whitespace, a BOM and extra data take the general path.
            if end == len(text):
                return payload
    try:
        # Bytes are UTF-8 text: json.loads would guess UTF-16 or UTF-32 from NUL bytes.
        return json.loads(text if isinstance(text, str) else text.decode("utf-8"))
    except (ValueError, UnicodeDecodeError) as error:
        raise SerializationError(f"{what}: not valid JSON ({error}).") from None
