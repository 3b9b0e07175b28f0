"""The strict reader: decodes any payload it accepts, and explains every refusal.

A payload must carry every field of its record (a field marked ``optional_on_read`` may be
absent and then takes its default) and no other, each with the right JSON type. Records with a
``schema_version`` field must carry a version this library reads; defaults apply only when
building records in code. Every error names the record and the field, by its path from the
outermost record (``RunFinished.result.steps[3].parse_ok``).

The fast decoders (``_fast``) handle well-formed payloads first; whatever they cannot decode
comes here, so this module decides every error.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from enum import StrEnum
from typing import Any, TypeVar, cast

from polyloop.errors import ConfigurationError, SchemaVersionError, SerializationError
from polyloop.serialization._schema import (
    READABLE_SCHEMA_VERSIONS,
    STORED_FIELDS,
    FieldTables,
    Kind,
    StoredField,
)

__all__ = ["read_record"]

E = TypeVar("E", bound=StrEnum)
R = TypeVar("R")


class _Reader:
    """Reads the fields of one JSON object, naming the record and field in every error."""

    __slots__ = ("_seen", "path", "payload")

    def __init__(self, path: str, payload: object) -> None:
        if not isinstance(payload, dict):
            raise SerializationError(
                f"{path}: expected a JSON object, got {type(payload).__name__}."
            )
        self.path = path
        self.payload: dict[str, Any] = payload
        self._seen: set[str] = set()

    def _get(self, name: str) -> Any:
        if name not in self.payload:
            raise SerializationError(f"{self.path}: field {name!r} is missing.")
        self._seen.add(name)
        return self.payload[name]

    def _wrong(self, name: str, expected: str, value: object) -> SerializationError:
        return SerializationError(
            f"{self.path}.{name}: expected {expected}, got {type(value).__name__} {value!r:.80}."
        )

    def string(self, name: str) -> str:
        value = self._get(name)
        if not isinstance(value, str):
            raise self._wrong(name, "a string", value)
        return value

    def opt_string(self, name: str) -> str | None:
        value = self._get(name)
        if value is not None and not isinstance(value, str):
            raise self._wrong(name, "a string or null", value)
        return value

    def integer(self, name: str) -> int:
        value = self._get(name)
        if isinstance(value, bool) or not isinstance(value, int):
            raise self._wrong(name, "an integer", value)
        return value

    def opt_integer(self, name: str) -> int | None:
        value = self._get(name)
        if value is not None and (isinstance(value, bool) or not isinstance(value, int)):
            raise self._wrong(name, "an integer or null", value)
        return value

    def boolean(self, name: str) -> bool:
        value = self._get(name)
        if not isinstance(value, bool):
            raise self._wrong(name, "true or false", value)
        return value

    def opt_boolean(self, name: str) -> bool | None:
        value = self._get(name)
        if value is not None and not isinstance(value, bool):
            raise self._wrong(name, "true, false or null", value)
        return value

    def enum(self, name: str, enum: type[E]) -> E:
        value = self._get(name)
        try:
            return enum(value)
        except ValueError:
            allowed = ", ".join(repr(m.value) for m in enum)
            raise self._wrong(name, f"one of {allowed}", value) from None

    def opt_enum(self, name: str, enum: type[E]) -> E | None:
        if self.payload.get(name, ...) is None:
            self._seen.add(name)
            return None
        return self.enum(name, enum)

    def nested(self, name: str) -> _Reader:
        return _Reader(f"{self.path}.{name}", self._get(name))

    def opt_nested(self, name: str) -> _Reader | None:
        value = self._get(name)
        return None if value is None else _Reader(f"{self.path}.{name}", value)

    def items(self, name: str) -> list[_Reader]:
        value = self._get(name)
        if not isinstance(value, list):
            raise self._wrong(name, "a list", value)
        return [_Reader(f"{self.path}.{name}[{i}]", item) for i, item in enumerate(value)]

    def str_mapping(self, name: str) -> dict[str, str]:
        value = self._get(name)
        if not isinstance(value, dict):
            raise self._wrong(name, "an object of strings", value)
        for key, item in value.items():
            if not isinstance(item, str):
                raise SerializationError(
                    f"{self.path}.{name}[{key!r}]: expected a string, got {type(item).__name__}."
                )
        return cast(dict[str, str], value)

    def int_mapping(self, name: str) -> dict[str, int]:
        value = self._get(name)
        if not isinstance(value, dict):
            raise self._wrong(name, "an object of integers", value)
        for key, item in value.items():
            if isinstance(item, bool) or not isinstance(item, int):
                raise SerializationError(
                    f"{self.path}.{name}[{key!r}]: expected an integer, got {type(item).__name__}."
                )
        return cast(dict[str, int], value)

    def opt_int_mapping(self, name: str) -> dict[str, int] | None:
        return None if self._get(name) is None else self.int_mapping(name)

    def version(self) -> int:
        if "schema_version" not in self.payload:
            raise SchemaVersionError(
                f"{self.path}: field 'schema_version' is missing; this payload was not written "
                "by PolyLoop (or was altered). Build old rows in code instead of decoding them."
            )
        version = self._get("schema_version")
        # A version of the wrong JSON type ("1", true, 1.0) is a version this library cannot
        # read: the same error as an unknown number, so callers need only one except clause.
        if isinstance(version, bool) or not isinstance(version, int):
            raise SchemaVersionError(
                f"{self.path}.schema_version: expected an integer, got "
                f"{type(version).__name__} {version!r:.80}; this library reads only "
                f"{sorted(READABLE_SCHEMA_VERSIONS)}."
            )
        if version not in READABLE_SCHEMA_VERSIONS:
            raise SchemaVersionError(
                f"{self.path}.schema_version is {version}; this library reads only "
                f"{sorted(READABLE_SCHEMA_VERSIONS)}. Upgrade polyloop-core to read it."
            )
        return version

    def done(self) -> None:
        extra = sorted(set(self.payload) - self._seen)
        if extra:
            raise SerializationError(
                f"{self.path}: unknown field(s) {extra}; refusing to drop data silently."
            )


def _build(path: str, factory: Callable[[], R]) -> R:
    try:
        return factory()
    except ConfigurationError as error:
        raise SerializationError(f"{path}: {error}") from None


#: Reads one field, by (kind, nullable), for the kinds that need no nested record.
_SCALAR_READERS: Mapping[tuple[Kind, bool], Callable[[_Reader, str], object]] = {
    (Kind.STRING, False): _Reader.string,
    (Kind.STRING, True): _Reader.opt_string,
    (Kind.INTEGER, False): _Reader.integer,
    (Kind.INTEGER, True): _Reader.opt_integer,
    (Kind.BOOLEAN, False): _Reader.boolean,
    (Kind.BOOLEAN, True): _Reader.opt_boolean,
    (Kind.STRING_MAP, False): _Reader.str_mapping,
    (Kind.INTEGER_MAP, False): _Reader.int_mapping,
    (Kind.INTEGER_MAP, True): _Reader.opt_int_mapping,
}


def _field_value(
    tables: FieldTables, field: StoredField, r: _Reader, early: dict[str, _Reader | None]
) -> object:
    name, target = field.name, field.target
    if field.kind is Kind.ENUM:
        assert target is not None
        return r.opt_enum(name, target) if field.nullable else r.enum(name, target)
    if field.kind is Kind.RECORD:
        assert target is not None
        nested = early[name] if field.nullable else r.nested(name)
        return None if nested is None else _read(tables, target, nested)
    if field.kind is Kind.RECORDS:
        assert target is not None
        return tuple(_read(tables, target, item) for item in r.items(name))
    return _SCALAR_READERS[field.kind, field.nullable](r, name)


def _read(tables: FieldTables, cls: type[Any], r: _Reader) -> Any:
    fields = tables[cls]
    version = r.version() if any(f.kind is Kind.VERSION for f in fields) else None

    def build() -> Any:
        present = [f for f in fields if not f.optional_on_read or f.name in r.payload]
        # A nullable nested record is checked for presence (and for being an object) before
        # the other fields, as the hand-written reader of schema 1.0 did: a payload with several
        # faults keeps reporting the same first one.
        early = {
            f.name: r.opt_nested(f.name) for f in present if f.kind is Kind.RECORD and f.nullable
        }
        values = {
            f.name: version if f.kind is Kind.VERSION else _field_value(tables, f, r, early)
            for f in present
        }
        return cls(**values)

    value = _build(r.path, build)
    r.done()
    return value


def read_record(cls: type[R], payload: object, tables: FieldTables = STORED_FIELDS) -> R:
    """Decode ``payload`` into the record type ``cls`` (one of ``tables``, by default every
    stored record type) or raise :class:`SerializationError` naming the record and field."""
    return cast(R, _read(tables, cls, _Reader(cls.__name__, payload)))
