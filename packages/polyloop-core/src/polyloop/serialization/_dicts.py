"""Records to plain JSON objects (dicts, lists, str, int, bool, None): ``to_dict``.

One encoder per record type, generated from its stored fields (``_schema.STORED_FIELDS``): a
function that reads each field once and builds the dict in declaration order. Every log write
goes through one of them, so they are straight-line code rather than a loop over the table.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from polyloop.errors import SerializationError
from polyloop.serialization._schema import (
    ENCODABLE_TYPES,
    STORED_FIELDS,
    Encodable,
    FieldTables,
    Kind,
    StoredField,
    default_name,
    generate_function,
    unless_default,
)

__all__ = ["ENCODERS", "build_encoders", "encoder_name", "to_dict"]


def encoder_name(cls: type[Any]) -> str:
    return f"_encode_{cls.__name__}"


def value_expression(field: StoredField, value: str) -> str:
    """Python expression for the JSON value of ``field``, whose value is in variable ``value``."""
    target = field.target
    if field.kind is Kind.ENUM:
        encoded = f"{value}.value"
    elif field.kind is Kind.RECORD:
        assert target is not None
        encoded = f"{encoder_name(target)}({value})"
    elif field.kind is Kind.RECORDS:
        assert target is not None
        return f"[{encoder_name(target)}(item) for item in {value}]"
    elif field.kind is Kind.STRING_MAP:
        return f"dict({value})"
    elif field.kind is Kind.INTEGER_MAP:
        encoded = f"dict({value})"
    else:
        return value
    return f"None if {value} is None else {encoded}" if field.nullable else encoded


def _local(field: StoredField) -> bool:
    """Whether the generated code reads the field into a local first (it uses it twice)."""
    return field.optional_on_read or (field.nullable and field.kind in (Kind.ENUM, Kind.RECORD))


def _encoder_source(cls: type[Any], fields: tuple[StoredField, ...]) -> str:
    name = encoder_name(cls)
    lines = [f"def {name}(value):"]
    lines += [f"    {f.name}_ = value.{f.name}" for f in fields if _local(f)]

    def value_of(field: StoredField) -> str:
        return value_expression(field, f"{field.name}_" if _local(field) else f"value.{field.name}")

    # The dict display holds the fields up to the first optional one; the rest are added in
    # order, so the keys keep declaration order whichever optional fields are left out.
    leading: list[StoredField] = []
    for field in fields:
        if field.optional_on_read:
            break
        leading.append(field)
    entries = ", ".join(f"{f.name!r}: {value_of(f)}" for f in leading)
    lines.append(f"    payload = {{{entries}}}")
    for field in fields[len(leading) :]:
        lines += unless_default(cls, field, f"payload[{field.name!r}] = {value_of(field)}")
    lines.append("    return payload")
    return "\n".join(lines) + "\n"


def build_encoders(tables: FieldTables) -> dict[type[Any], Callable[[Any], dict[str, Any]]]:
    """The dict encoder of every record type in ``tables``."""
    namespace: dict[str, Any] = {}
    encoders: dict[type[Any], Callable[[Any], dict[str, Any]]] = {}
    for cls, fields in tables.items():  # inner types first: their names exist when used
        namespace.update(
            (default_name(cls, field), field.default) for field in fields if field.optional_on_read
        )
        name = encoder_name(cls)
        encoders[cls] = generate_function(name, _encoder_source(cls, fields), namespace)
    return encoders


#: The dict encoder of every stored record type (encodable or nested).
ENCODERS: Mapping[type[Any], Callable[[Any], dict[str, Any]]] = build_encoders(STORED_FIELDS)
_PUBLIC_ENCODERS: Mapping[type[object], Callable[[Any], dict[str, Any]]] = {
    cls: ENCODERS[cls] for cls in ENCODABLE_TYPES
}


def to_dict(value: Encodable) -> dict[str, Any]:
    """A plain JSON object (dicts, lists, str, int, bool, None) for ``value``."""
    encoder = _PUBLIC_ENCODERS.get(type(value))
    if encoder is None:
        raise SerializationError(
            f"Cannot encode {type(value).__name__}; encodable types are "
            f"{sorted(t.__name__ for t in _PUBLIC_ENCODERS)}."
        )
    return encoder(value)
