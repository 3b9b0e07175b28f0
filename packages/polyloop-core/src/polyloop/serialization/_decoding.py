"""Decoding entry points: the fast decoder first, the strict reader for anything it declines."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, cast

from polyloop.errors import ConfigurationError, SerializationError
from polyloop.serialization._fast import FAST_DECODERS, parse_json
from polyloop.serialization._schema import ENCODABLE_TYPES, LOG_RECORD_TYPES, LogRecord, T
from polyloop.serialization._strict import read_record

__all__ = ["from_dict", "loads", "loads_log_record", "log_record_from_dict"]

_DECODABLE = frozenset(ENCODABLE_TYPES)
_TAGGED_KEYS = frozenset(("type", "record"))
_FAST_BY_TAG: Mapping[str, Callable[[Any], Any]] = {
    tag: FAST_DECODERS[cls] for tag, cls in LOG_RECORD_TYPES.items() if cls in FAST_DECODERS
}


def _decode(cls: type[T], payload: object) -> T:
    fast = FAST_DECODERS.get(cls)
    if fast is not None:
        try:
            value = fast(payload)
        except (ConfigurationError, TypeError, KeyError):
            value = None  # the strict path below says what is wrong
        if value is not None:
            return cast(T, value)
    return read_record(cls, payload)


def from_dict(cls: type[T], payload: object) -> T:
    """Decode a plain JSON object into ``cls``; raise :class:`SerializationError` naming the field."""
    if cls not in _DECODABLE:
        raise SerializationError(
            f"Cannot decode {getattr(cls, '__name__', cls)!r}; decodable types are "
            f"{sorted(t.__name__ for t in _DECODABLE)}."
        )
    return _decode(cls, payload)


def loads(cls: type[T], text: str | bytes) -> T:
    """Decode JSON text into ``cls`` (strict; see the package docstring)."""
    return from_dict(cls, parse_json(cls.__name__, text))


def loads_log_record(text: str | bytes) -> LogRecord:
    """Decode one tagged log record written by :func:`dumps_log_record`."""
    return log_record_from_dict(parse_json("log record", text))


def log_record_from_dict(payload: object) -> LogRecord:
    """Decode a tagged log record that is already parsed JSON (``{"type": ..., "record": ...}``).

    For a store that parses JSON itself: the result, and any error, are those of
    :func:`loads_log_record` on the text that parses into ``payload``.
    """
    if type(payload) is dict and len(payload) == 2:
        try:
            fast = _FAST_BY_TAG.get(payload["type"])
            value = None if fast is None else fast(payload["record"])
        except (ValueError, TypeError, LookupError):
            value = None  # ConfigurationError is a ValueError; the general path says what is wrong
        if value is not None:
            return cast(LogRecord, value)
    if not isinstance(payload, dict) or payload.keys() != _TAGGED_KEYS:
        raise SerializationError(
            "log record: expected an object with exactly the fields 'type' and 'record'."
        )
    tag = payload["type"]
    cls = LOG_RECORD_TYPES.get(tag) if isinstance(tag, str) else None
    if cls is None:
        raise SerializationError(
            f"log record: unknown type {tag!r}; expected one of {sorted(LOG_RECORD_TYPES)}."
        )
    return _decode(cls, payload["record"])
