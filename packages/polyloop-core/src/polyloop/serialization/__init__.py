"""Exact JSON encoding of every value and record that can enter a run log.

``to_dict``/``from_dict`` map a record to plain JSON objects and back; ``dumps``/``loads`` add
the JSON text. Log records travel tagged (``dumps_log_record``/``loads_log_record``) so a store
can keep every kind in one stream.

Decoding is strict: a payload must carry every field of its type and no other, with the right
JSON type. ``RunStarted``, ``StepRecord`` and ``RunResult`` must carry ``schema_version`` equal
to a version this library reads (only ``1`` today); defaults apply only when building records
in code, never when reading. Every error names the record and the field.

**Fields added after schema 1.0.** A record field declared
``dataclasses.field(default=..., metadata={"optional_on_read": True})`` may be absent from a
stored payload, which then decodes to the default; the encoders leave the field out while its
value equals its default, so the log of a run that never sets it is byte for byte what it was
before the field existed. A library older than the field refuses a payload that carries it
(unknown field), with an error naming the record and the field (design 0023).

The package has one module per job: ``_schema`` (record kinds, tags, versions and the stored
fields of every record, derived from ``dataclasses.fields``), ``_dicts`` (dict encoders),
``_text`` (JSON text, with the text encoder of results), ``_strict`` (the strict reader, which
explains every refusal), ``_fast`` (fast decoders and the JSON-scanner shortcut) and
``_decoding`` (the entry points that try the fast path, then the strict one).
"""

from __future__ import annotations

from polyloop.serialization._decoding import (
    from_dict,
    loads,
    loads_log_record,
    log_record_from_dict,
)
from polyloop.serialization._dicts import to_dict
from polyloop.serialization._schema import (
    LOG_RECORD_TYPES,
    READABLE_SCHEMA_VERSIONS,
    LogRecord,
    log_record_tag,
)
from polyloop.serialization._text import dumps, dumps_log_record

__all__ = [
    "LOG_RECORD_TYPES",
    "READABLE_SCHEMA_VERSIONS",
    "LogRecord",
    "dumps",
    "dumps_log_record",
    "from_dict",
    "loads",
    "loads_log_record",
    "log_record_from_dict",
    "log_record_tag",
    "to_dict",
]
