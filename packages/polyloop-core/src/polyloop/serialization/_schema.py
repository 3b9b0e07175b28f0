"""What the log format is: the record kinds, their tags, the readable versions, and one table of
stored fields per record type, derived once from ``dataclasses.fields``.

Every codec of the package (dict encoders, text encoder, strict reader, fast decoders) is built
from these tables, so a field added to a record in ``polyloop.types`` is written and read
without touching this package, as long as its annotation maps to one of the kinds below
(:class:`Kind`).
"""

from __future__ import annotations

import dataclasses
import linecache
import types
import typing
from collections.abc import Callable, Mapping
from enum import Enum, StrEnum
from typing import Any, TypeVar

from polyloop.asking import (
    UserAnswered,
    UserAsked,
)
from polyloop.errors import SerializationError
from polyloop.types import (
    ActionOutcome,
    Budget,
    Intent,
    ModelCallResult,
    ModelReply,
    RunFinished,
    RunResult,
    RunStarted,
    StepCompleted,
    StepRecord,
)

__all__ = [
    "ENCODABLE_TYPES",
    "LOG_RECORD_TYPES",
    "OPTIONAL_ON_READ",
    "READABLE_SCHEMA_VERSIONS",
    "STORED_FIELDS",
    "Encodable",
    "FieldTables",
    "Kind",
    "LogRecord",
    "StoredField",
    "T",
    "default_name",
    "field_tables",
    "generate_function",
    "log_record_tag",
    "unless_default",
]

#: Schema versions this library can read.
READABLE_SCHEMA_VERSIONS = frozenset({1})

#: The ``dataclasses.field`` metadata key of a field added after schema 1.0 (see
#: :class:`StoredField`). Spelled out, not imported, where a record declares it.
OPTIONAL_ON_READ = "optional_on_read"

LogRecord = (
    RunStarted | Intent | ModelCallResult | StepCompleted | RunFinished | UserAsked | UserAnswered
)

#: The tag each log record kind carries in a tagged payload.
LOG_RECORD_TYPES: Mapping[str, type[LogRecord]] = {
    "run_started": RunStarted,
    "intent": Intent,
    "model_call_result": ModelCallResult,
    "step_completed": StepCompleted,
    "run_finished": RunFinished,
    # Written only by runs that ask a person (design 0037): no log of an ungated run holds one.
    "user_asked": UserAsked,
    "user_answered": UserAnswered,
}
_TAG_OF: Mapping[type[object], str] = {cls: tag for tag, cls in LOG_RECORD_TYPES.items()}

Encodable = (
    RunStarted
    | Intent
    | ModelCallResult
    | StepCompleted
    | RunFinished
    | StepRecord
    | RunResult
    | ActionOutcome
    | ModelReply
    | Budget
    | UserAsked
    | UserAnswered
)
T = TypeVar("T", bound=Encodable)

#: The types ``to_dict``/``from_dict`` take (their error messages list them sorted by name).
ENCODABLE_TYPES: tuple[type[Encodable], ...] = (
    RunStarted,
    Intent,
    ModelCallResult,
    StepCompleted,
    RunFinished,
    StepRecord,
    RunResult,
    ActionOutcome,
    ModelReply,
    Budget,
    UserAsked,
    UserAnswered,
)


def log_record_tag(record: LogRecord) -> str:
    """The tag of a log record kind (``"run_started"``, ``"intent"``, ...)."""
    try:
        return _TAG_OF[type(record)]
    except KeyError:
        raise SerializationError(
            f"{type(record).__name__} is not a log record; expected one of "
            f"{sorted(t.__name__ for t in _TAG_OF)}."
        ) from None


class Kind(Enum):
    """How a field's value is stored in JSON; decided by the field's annotation."""

    STRING = "str"
    INTEGER = "int"
    BOOLEAN = "bool"
    #: A ``StrEnum``, stored as its value.
    ENUM = "StrEnum"
    #: A nested record (a dataclass), stored as an object.
    RECORD = "a dataclass"
    #: ``tuple[<record>, ...]``, stored as a list of objects.
    RECORDS = "tuple[<dataclass>, ...]"
    #: ``Mapping[str, str]``, stored as an object of strings.
    STRING_MAP = "Mapping[str, str]"
    #: ``Mapping[str, int]``, stored as an object of integers (counts).
    INTEGER_MAP = "Mapping[str, int]"
    #: The ``schema_version`` field: an integer that must be a readable version.
    VERSION = "schema_version: int"


#: Kinds that may also be ``None`` (annotated ``X | None``).
_NULLABLE_KINDS = frozenset(
    {Kind.STRING, Kind.INTEGER, Kind.BOOLEAN, Kind.ENUM, Kind.RECORD, Kind.INTEGER_MAP}
)


@dataclasses.dataclass(frozen=True, slots=True)
class StoredField:
    """One field of a record as the codecs see it.

    ``optional_on_read`` marks a field added after schema 1.0: it is declared
    ``dataclasses.field(default=..., metadata={"optional_on_read": True})``. A stored payload
    may lack it (it then decodes to ``default``), and the encoders leave it out while its value
    equals ``default``, so logs of runs that never set it stay byte for byte what they were.
    Every other field is required on read; unknown keys are refused.
    """

    name: str
    kind: Kind
    nullable: bool
    #: The enum class of an ``ENUM``, the record class of a ``RECORD``/``RECORDS``, else None.
    target: type[Any] | None
    optional_on_read: bool
    #: The field's default (only used for ``optional_on_read`` fields).
    default: object


def _kind_of(owner: type[Any], name: str, hint: object) -> tuple[Kind, bool, type[Any] | None]:
    """(kind, nullable, target) of a field annotated ``hint``; raise for any other type."""
    nullable = False
    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        rest = [arg for arg in typing.get_args(hint) if arg is not type(None)]
        nullable = len(rest) < len(typing.get_args(hint))
        hint = rest[0] if len(rest) == 1 else hint
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    kind: Kind | None = None
    target: type[Any] | None = None
    if name == "schema_version" and hint is int:
        kind = Kind.VERSION
    elif hint is str:
        kind = Kind.STRING
    elif hint is bool:
        kind = Kind.BOOLEAN
    elif hint is int:
        kind = Kind.INTEGER
    elif isinstance(hint, type) and issubclass(hint, StrEnum):
        kind, target = Kind.ENUM, hint
    elif isinstance(hint, type) and dataclasses.is_dataclass(hint):
        kind, target = Kind.RECORD, hint
    elif (
        origin is tuple
        and len(args) == 2
        and args[1] is Ellipsis
        and isinstance(args[0], type)
        and dataclasses.is_dataclass(args[0])
    ):
        kind, target = Kind.RECORDS, args[0]
    elif origin is Mapping and args == (str, str):
        kind = Kind.STRING_MAP
    elif origin is Mapping and args == (str, int):
        kind = Kind.INTEGER_MAP
    if kind is None or (nullable and kind not in _NULLABLE_KINDS):
        supported = ", ".join(k.value for k in Kind)
        raise TypeError(
            f"polyloop.serialization cannot store {owner.__name__}.{name} annotated {hint!r}; "
            f"give it one of the supported types ({supported}; all but RECORDS, STRING_MAP and VERSION may be "
            "'| None') or teach the codecs a new Kind."
        )
    return kind, nullable, target


def _stored_fields(cls: type[Any]) -> tuple[StoredField, ...]:
    hints = typing.get_type_hints(cls)
    result = []
    for field in dataclasses.fields(cls):
        kind, nullable, target = _kind_of(cls, field.name, hints[field.name])
        optional = field.metadata.get(OPTIONAL_ON_READ, False) is True
        if optional and (field.default is dataclasses.MISSING or kind is Kind.VERSION):
            raise TypeError(
                f"{cls.__name__}.{field.name} is marked {OPTIONAL_ON_READ!r} but "
                + (
                    "is the schema version, which every payload must carry."
                    if kind is Kind.VERSION
                    else "has no default; declare it dataclasses.field(default=..., "
                    f"metadata={{{OPTIONAL_ON_READ!r}: True}})."
                )
            )
        result.append(
            StoredField(
                field.name,
                kind,
                nullable,
                target,
                optional,
                field.default if optional else None,
            )
        )
    return tuple(result)


#: The stored fields of some record types, inner types before the records that hold them.
FieldTables = Mapping[type[Any], tuple[StoredField, ...]]


def field_tables(roots: tuple[type[Any], ...]) -> FieldTables:
    """The stored fields of ``roots`` and of every record nested in them, inner types first
    (so a generated codec can refer to the codecs of its nested records)."""
    tables: dict[type[Any], tuple[StoredField, ...]] = {}

    def visit(cls: type[Any]) -> None:
        if cls in tables:
            return
        fields = _stored_fields(cls)
        for field in fields:
            if field.kind in (Kind.RECORD, Kind.RECORDS):
                assert field.target is not None
                visit(field.target)
        tables[cls] = fields

    for root in roots:
        visit(root)
    return tables


#: The stored fields of every encodable record and of the records nested in them, in
#: declaration order (the order of the keys in the JSON).
STORED_FIELDS: FieldTables = field_tables(ENCODABLE_TYPES)


def default_name(cls: type[Any], field: StoredField) -> str:
    """The name under which generated code finds the default of an optional field."""
    return f"_default_{cls.__name__}_{field.name}"


def unless_default(cls: type[Any], field: StoredField, statement: str) -> list[str]:
    """Generated lines (in a function body) running ``statement``, which writes ``field``: for a
    field added after schema 1.0 only while its value (in local ``<name>_``) is not its default."""
    if not field.optional_on_read:
        return [f"    {statement}"]
    return [f"    if {field.name}_ != {default_name(cls, field)}:", f"        {statement}"]


def generate_function(name: str, source: str, namespace: dict[str, Any]) -> Callable[..., Any]:
    """Compile ``source`` (which defines ``name``) in ``namespace`` and return the function.

    The source is registered with :mod:`linecache`, so a traceback through a generated codec
    shows its lines.
    """
    filename = f"<polyloop.serialization {name}>"
    linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
    exec(compile(source, filename, "exec"), namespace)  # the technique dataclasses itself uses
    function: Callable[..., Any] = namespace[name]
    return function
