"""Exact JSON encoding of every value and record that can enter a run log.

``to_dict``/``from_dict`` map a record to plain JSON objects and back; ``dumps``/``loads`` add
the JSON text. Log records travel tagged (``dumps_log_record``/``loads_log_record``) so a store
can keep the five kinds in one stream.

Decoding is strict: a payload must carry every field of its type and no other, with the right
JSON type. The one exception is a field added after schema 1.0, declared with the field metadata
``{"optional_on_read": True}``: it may be absent (it then reads as its default), and it is
written only when it differs from its default, so records that do not use it stay byte-identical. ``RunStarted``, ``StepRecord`` and ``RunResult`` must carry ``schema_version`` equal
to a version this library reads (only ``1`` today); defaults apply only when building records
in code, never when reading. Every error names the record and the field.
"""

from __future__ import annotations

import dataclasses
import json
import re
from collections.abc import Callable, Iterable, Mapping
from enum import StrEnum
from typing import Any, TypeVar, cast

from polyloop.errors import ConfigurationError, SchemaVersionError, SerializationError
from polyloop.types import (
    ActionOutcome,
    ActionStatus,
    Budget,
    Intent,
    IntentKind,
    ModelCallResult,
    ModelReply,
    ReplayPolicy,
    RunFinished,
    RunResult,
    RunStarted,
    StepCompleted,
    StepRecord,
    StopReason,
)

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

#: Schema versions this library can read.
READABLE_SCHEMA_VERSIONS = frozenset({1})

LogRecord = RunStarted | Intent | ModelCallResult | StepCompleted | RunFinished

#: The tag each log record kind carries in a tagged payload.
LOG_RECORD_TYPES: Mapping[str, type[LogRecord]] = {
    "run_started": RunStarted,
    "intent": Intent,
    "model_call_result": ModelCallResult,
    "step_completed": StepCompleted,
    "run_finished": RunFinished,
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
)
T = TypeVar("T", bound=Encodable)
E = TypeVar("E", bound=StrEnum)

# ---------------------------------------------------------------------------
# Encoding
# ---------------------------------------------------------------------------


def _reply(value: ModelReply) -> dict[str, Any]:
    payload: dict[str, Any] = {
        "call_id": value.call_id,
        "content": value.content,
        "thinking": value.thinking,
    }
    # Fields added after schema 1.0: written only when set (see the module docstring).
    if value.finish_reason is not None:
        payload["finish_reason"] = value.finish_reason
    if value.usage is not None:
        payload["usage"] = dict(value.usage)
    return payload


def _outcome(value: ActionOutcome) -> dict[str, Any]:
    return {
        "status": value.status.value,
        "observation": value.observation,
        "observation_is_synthetic": value.observation_is_synthetic,
        "env_reported_completion": value.env_reported_completion,
        "observation_truncated_chars": value.observation_truncated_chars,
    }


def _step(value: StepRecord) -> dict[str, Any]:
    return {
        "step_idx": value.step_idx,
        "raw_output": value.raw_output,
        "content_chars": value.content_chars,
        "thinking_chars": value.thinking_chars,
        "action": value.action,
        "parse_ok": value.parse_ok,
        "parse_error": value.parse_error,
        "observation": value.observation,
        "observation_is_synthetic": value.observation_is_synthetic,
        "observation_truncated_chars": value.observation_truncated_chars,
        "prompt_chars": value.prompt_chars,
        "call_id": value.call_id,
        "step_wall_ms": value.step_wall_ms,
        "tool_name": value.tool_name,
        "tool_arguments": value.tool_arguments,
        "action_status": None if value.action_status is None else value.action_status.value,
        "env_reported_completion": value.env_reported_completion,
        "schema_version": value.schema_version,
    }


def _result(value: RunResult) -> dict[str, Any]:
    return {
        "run_id": value.run_id,
        "stop_reason": value.stop_reason.value,
        "final_answer": value.final_answer,
        "steps": [_step(s) for s in value.steps],
        "schema_version": value.schema_version,
        "event_delivery_failures": value.event_delivery_failures,
    }


def _budget(value: Budget) -> dict[str, Any]:
    return {
        "max_steps": value.max_steps,
        "max_actions": value.max_actions,
        "max_consecutive_parse_failures": value.max_consecutive_parse_failures,
        "max_prompt_chars": value.max_prompt_chars,
    }


def _run_started(value: RunStarted) -> dict[str, Any]:
    return {
        "run_id": value.run_id,
        "parameter_snapshot": dict(value.parameter_snapshot),
        "schema_version": value.schema_version,
    }


def _intent(value: Intent) -> dict[str, Any]:
    return {
        "run_id": value.run_id,
        "kind": value.kind.value,
        "call_index": value.call_index,
        "result_id": value.result_id,
        "replay_policy": value.replay_policy.value,
    }


def _model_call_result(value: ModelCallResult) -> dict[str, Any]:
    return {
        "run_id": value.run_id,
        "result_id": value.result_id,
        "reply": None if value.reply is None else _reply(value.reply),
        "failure": value.failure,
    }


def _step_completed(value: StepCompleted) -> dict[str, Any]:
    return {
        "run_id": value.run_id,
        "result_id": value.result_id,
        "action_outcome": None if value.action_outcome is None else _outcome(value.action_outcome),
        "step": _step(value.step),
    }


def _run_finished(value: RunFinished) -> dict[str, Any]:
    return {"run_id": value.run_id, "result": _result(value.result)}


_ENCODERS: Mapping[type[object], Callable[[Any], dict[str, Any]]] = {
    RunStarted: _run_started,
    Intent: _intent,
    ModelCallResult: _model_call_result,
    StepCompleted: _step_completed,
    RunFinished: _run_finished,
    StepRecord: _step,
    RunResult: _result,
    ActionOutcome: _outcome,
    ModelReply: _reply,
    Budget: _budget,
}


def to_dict(value: Encodable) -> dict[str, Any]:
    """A plain JSON object (dicts, lists, str, int, bool, None) for ``value``."""
    encoder = _ENCODERS.get(type(value))
    if encoder is None:
        raise SerializationError(
            f"Cannot encode {type(value).__name__}; encodable types are "
            f"{sorted(t.__name__ for t in _ENCODERS)}."
        )
    return encoder(value)


#: Characters kept out of the JSON text as ``\uXXXX`` escapes: lone surrogates (a Python string
#: may hold one, e.g. a model reply cut inside an emoji, but UTF-8 cannot encode it) and the
#: line separators other than ``\n``/``\r`` that ``str.splitlines`` breaks on (U+0085,
#: U+2028, U+2029; JSON already escapes the control characters).
_ESCAPED = re.compile("[\ud800-\udfff\x85\u2028\u2029]")


def _escape(text: str) -> str:
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


def _compact(payload: object) -> str:
    """Compact JSON with non-ASCII kept as characters (nothing escaped yet)."""
    return json.dumps(payload, ensure_ascii=False, separators=(",", ":"))


def _json_text(payload: object) -> str:
    """Compact JSON with non-ASCII kept as characters, except those in ``_ESCAPED``."""
    return _escape(_compact(payload))


# A run's result holds every step of the run, so a step whose fields all have their usual types
# is written straight into text instead of through a dict; that text is what ``_compact`` gives
# for ``_step(value)``. Any other step goes through ``_compact`` itself.

_quote = json.encoder.encode_basestring
_STATUS_TEXT: dict[ActionStatus | None, str] = {None: "null"}
_STATUS_TEXT.update((m, _quote(m.value)) for m in ActionStatus)


def _step_text(value: StepRecord) -> str:
    v = value
    action, parse_error, call_id = v.action, v.parse_error, v.call_id
    tool_name, tool_arguments, status = v.tool_name, v.tool_arguments, v.action_status
    if not (
        type(v.step_idx) is int
        and type(v.content_chars) is int
        and type(v.thinking_chars) is int
        and type(v.observation_truncated_chars) is int
        and type(v.prompt_chars) is int
        and type(v.step_wall_ms) is int
        and type(v.schema_version) is int
        and type(v.raw_output) is str
        and type(v.observation) is str
        and (action is None or type(action) is str)
        and (parse_error is None or type(parse_error) is str)
        and (call_id is None or type(call_id) is str)
        and (tool_name is None or type(tool_name) is str)
        and (tool_arguments is None or type(tool_arguments) is str)
        and type(v.parse_ok) is bool
        and type(v.observation_is_synthetic) is bool
        and type(v.env_reported_completion) is bool
        and (status is None or type(status) is ActionStatus)
    ):
        return _compact(_step(value))
    return (
        f'{{"step_idx":{v.step_idx},"raw_output":{_quote(v.raw_output)},'
        f'"content_chars":{v.content_chars},"thinking_chars":{v.thinking_chars},'
        f'"action":{"null" if action is None else _quote(action)},'
        f'"parse_ok":{"true" if v.parse_ok else "false"},'
        f'"parse_error":{"null" if parse_error is None else _quote(parse_error)},'
        f'"observation":{_quote(v.observation)},'
        f'"observation_is_synthetic":{"true" if v.observation_is_synthetic else "false"},'
        f'"observation_truncated_chars":{v.observation_truncated_chars},'
        f'"prompt_chars":{v.prompt_chars},'
        f'"call_id":{"null" if call_id is None else _quote(call_id)},'
        f'"step_wall_ms":{v.step_wall_ms},'
        f'"tool_name":{"null" if tool_name is None else _quote(tool_name)},'
        f'"tool_arguments":{"null" if tool_arguments is None else _quote(tool_arguments)},'
        f'"action_status":{_STATUS_TEXT[status]},'
        f'"env_reported_completion":{"true" if v.env_reported_completion else "false"},'
        f'"schema_version":{v.schema_version}}}'
    )


def _result_text(value: RunResult) -> str:
    return (
        f'{{"run_id":{_compact(value.run_id)},"stop_reason":{_compact(value.stop_reason.value)},'
        f'"final_answer":{_compact(value.final_answer)},'
        f'"steps":[{",".join([_step_text(step) for step in value.steps])}],'
        f'"schema_version":{_compact(value.schema_version)},'
        f'"event_delivery_failures":{_compact(value.event_delivery_failures)}}}'
    )


def dumps(value: Encodable) -> str:
    """Compact JSON text of ``value`` (non-ASCII kept as UTF-8 characters)."""
    if type(value) is RunResult:
        return _escape(_result_text(value))
    return _json_text(to_dict(value))


def log_record_tag(record: LogRecord) -> str:
    """The tag of a log record kind (``"run_started"``, ``"intent"``, ...)."""
    try:
        return _TAG_OF[type(record)]
    except KeyError:
        raise SerializationError(
            f"{type(record).__name__} is not a log record; expected one of "
            f"{sorted(t.__name__ for t in _TAG_OF)}."
        ) from None


def dumps_log_record(record: LogRecord) -> str:
    """One line of JSON: ``{"type": <tag>, "record": <record>}``.

    It holds no line break of any kind (not even one ``str.splitlines`` would split on).
    """
    if type(record) is RunFinished:
        return _escape(
            f'{{"type":"run_finished","record":{{"run_id":{_compact(record.run_id)},'
            f'"result":{_result_text(record.result)}}}}}'
        )
    return _json_text({"type": log_record_tag(record), "record": to_dict(record)})


# ---------------------------------------------------------------------------
# Decoding
# ---------------------------------------------------------------------------


class _Reader:
    """Reads the fields of one JSON object, naming the record and field in every error."""

    __slots__ = ("_path", "_payload", "_seen")

    def __init__(self, path: str, payload: object) -> None:
        if not isinstance(payload, dict):
            raise SerializationError(
                f"{path}: expected a JSON object, got {type(payload).__name__}."
            )
        self._path = path
        self._payload: dict[str, Any] = payload
        self._seen: set[str] = set()

    def _get(self, name: str) -> Any:
        if name not in self._payload:
            raise SerializationError(f"{self._path}: field {name!r} is missing.")
        self._seen.add(name)
        return self._payload[name]

    def _wrong(self, name: str, expected: str, value: object) -> SerializationError:
        return SerializationError(
            f"{self._path}.{name}: expected {expected}, got {type(value).__name__} {value!r:.80}."
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

    def boolean(self, name: str) -> bool:
        value = self._get(name)
        if not isinstance(value, bool):
            raise self._wrong(name, "true or false", value)
        return value

    def enum(self, name: str, enum: type[E]) -> E:
        value = self._get(name)
        try:
            return enum(value)
        except ValueError:
            allowed = ", ".join(repr(m.value) for m in enum)
            raise self._wrong(name, f"one of {allowed}", value) from None

    def opt_enum(self, name: str, enum: type[E]) -> E | None:
        if self._payload.get(name, ...) is None:
            self._seen.add(name)
            return None
        return self.enum(name, enum)

    def nested(self, name: str) -> _Reader:
        return _Reader(f"{self._path}.{name}", self._get(name))

    def opt_nested(self, name: str) -> _Reader | None:
        value = self._get(name)
        return None if value is None else _Reader(f"{self._path}.{name}", value)

    def items(self, name: str) -> list[_Reader]:
        value = self._get(name)
        if not isinstance(value, list):
            raise self._wrong(name, "a list", value)
        return [_Reader(f"{self._path}.{name}[{i}]", item) for i, item in enumerate(value)]

    def present(self, name: str) -> bool:
        """Whether a field that may be absent (``optional_on_read``) is in the payload."""
        return name in self._payload

    def int_mapping(self, name: str) -> dict[str, int]:
        value = self._get(name)
        if not isinstance(value, dict):
            raise self._wrong(name, "an object of integers", value)
        for key, item in value.items():
            if isinstance(item, bool) or not isinstance(item, int):
                raise SerializationError(
                    f"{self._path}.{name}[{key!r}]: expected an integer, got {type(item).__name__}."
                )
        return cast(dict[str, int], value)

    def str_mapping(self, name: str) -> dict[str, str]:
        value = self._get(name)
        if not isinstance(value, dict):
            raise self._wrong(name, "an object of strings", value)
        for key, item in value.items():
            if not isinstance(item, str):
                raise SerializationError(
                    f"{self._path}.{name}[{key!r}]: expected a string, got {type(item).__name__}."
                )
        return cast(dict[str, str], value)

    def version(self) -> int:
        if "schema_version" not in self._payload:
            raise SchemaVersionError(
                f"{self._path}: field 'schema_version' is missing; this payload was not written "
                "by PolyLoop (or was altered). Build old rows in code instead of decoding them."
            )
        version = self._get("schema_version")
        # A version of the wrong JSON type ("1", true, 1.0) is a version this library cannot
        # read: the same error as an unknown number, so callers need only one except clause.
        if isinstance(version, bool) or not isinstance(version, int):
            raise SchemaVersionError(
                f"{self._path}.schema_version: expected an integer, got "
                f"{type(version).__name__} {version!r:.80}; this library reads only "
                f"{sorted(READABLE_SCHEMA_VERSIONS)}."
            )
        if version not in READABLE_SCHEMA_VERSIONS:
            raise SchemaVersionError(
                f"{self._path}.schema_version is {version}; this library reads only "
                f"{sorted(READABLE_SCHEMA_VERSIONS)}. Upgrade polyloop-core to read it."
            )
        return version

    def done(self) -> None:
        extra = sorted(set(self._payload) - self._seen)
        if extra:
            raise SerializationError(
                f"{self._path}: unknown field(s) {extra}; refusing to drop data silently."
            )


def _build(path: str, factory: Callable[[], T]) -> T:
    try:
        return factory()
    except ConfigurationError as error:
        raise SerializationError(f"{path}: {error}") from None


def _read_reply(r: _Reader) -> ModelReply:
    value = _build(
        r._path,
        lambda: ModelReply(
            call_id=r.opt_string("call_id"),
            content=r.string("content"),
            thinking=r.string("thinking"),
            finish_reason=r.opt_string("finish_reason") if r.present("finish_reason") else None,
            usage=r.int_mapping("usage") if r.present("usage") else None,
        ),
    )
    r.done()
    return value


def _read_outcome(r: _Reader) -> ActionOutcome:
    value = _build(
        r._path,
        lambda: ActionOutcome(
            status=r.enum("status", ActionStatus),
            observation=r.string("observation"),
            observation_is_synthetic=r.boolean("observation_is_synthetic"),
            env_reported_completion=r.boolean("env_reported_completion"),
            observation_truncated_chars=r.integer("observation_truncated_chars"),
        ),
    )
    r.done()
    return value


def _read_step(r: _Reader) -> StepRecord:
    version = r.version()
    value = _build(
        r._path,
        lambda: StepRecord(
            step_idx=r.integer("step_idx"),
            raw_output=r.string("raw_output"),
            content_chars=r.integer("content_chars"),
            thinking_chars=r.integer("thinking_chars"),
            action=r.opt_string("action"),
            parse_ok=r.boolean("parse_ok"),
            parse_error=r.opt_string("parse_error"),
            observation=r.string("observation"),
            observation_is_synthetic=r.boolean("observation_is_synthetic"),
            observation_truncated_chars=r.integer("observation_truncated_chars"),
            prompt_chars=r.integer("prompt_chars"),
            call_id=r.opt_string("call_id"),
            step_wall_ms=r.integer("step_wall_ms"),
            tool_name=r.opt_string("tool_name"),
            tool_arguments=r.opt_string("tool_arguments"),
            action_status=r.opt_enum("action_status", ActionStatus),
            env_reported_completion=r.boolean("env_reported_completion"),
            schema_version=version,
        ),
    )
    r.done()
    return value


def _read_result(r: _Reader) -> RunResult:
    version = r.version()
    value = _build(
        r._path,
        lambda: RunResult(
            run_id=r.string("run_id"),
            stop_reason=r.enum("stop_reason", StopReason),
            final_answer=r.opt_string("final_answer"),
            steps=tuple(_read_step(s) for s in r.items("steps")),
            schema_version=version,
            event_delivery_failures=r.integer("event_delivery_failures"),
        ),
    )
    r.done()
    return value


def _read_budget(r: _Reader) -> Budget:
    value = _build(
        r._path,
        lambda: Budget(
            max_steps=r.integer("max_steps"),
            max_actions=r.integer("max_actions"),
            max_consecutive_parse_failures=r.integer("max_consecutive_parse_failures"),
            max_prompt_chars=r.integer("max_prompt_chars"),
        ),
    )
    r.done()
    return value


def _read_run_started(r: _Reader) -> RunStarted:
    version = r.version()
    value = _build(
        r._path,
        lambda: RunStarted(
            run_id=r.string("run_id"),
            parameter_snapshot=r.str_mapping("parameter_snapshot"),
            schema_version=version,
        ),
    )
    r.done()
    return value


def _read_intent(r: _Reader) -> Intent:
    value = _build(
        r._path,
        lambda: Intent(
            run_id=r.string("run_id"),
            kind=r.enum("kind", IntentKind),
            call_index=r.integer("call_index"),
            result_id=r.string("result_id"),
            replay_policy=r.enum("replay_policy", ReplayPolicy),
        ),
    )
    r.done()
    return value


def _read_model_call_result(r: _Reader) -> ModelCallResult:
    def build() -> ModelCallResult:
        reply_reader = r.opt_nested("reply")
        return ModelCallResult(
            run_id=r.string("run_id"),
            result_id=r.string("result_id"),
            reply=None if reply_reader is None else _read_reply(reply_reader),
            failure=r.opt_string("failure"),
        )

    value = _build(r._path, build)
    r.done()
    return value


def _read_step_completed(r: _Reader) -> StepCompleted:
    def build() -> StepCompleted:
        outcome_reader = r.opt_nested("action_outcome")
        return StepCompleted(
            run_id=r.string("run_id"),
            result_id=r.opt_string("result_id"),
            action_outcome=None if outcome_reader is None else _read_outcome(outcome_reader),
            step=_read_step(r.nested("step")),
        )

    value = _build(r._path, build)
    r.done()
    return value


def _read_run_finished(r: _Reader) -> RunFinished:
    value = _build(
        r._path,
        lambda: RunFinished(run_id=r.string("run_id"), result=_read_result(r.nested("result"))),
    )
    r.done()
    return value


_DECODERS: Mapping[type[object], Callable[[_Reader], Any]] = {
    RunStarted: _read_run_started,
    Intent: _read_intent,
    ModelCallResult: _read_model_call_result,
    StepCompleted: _read_step_completed,
    RunFinished: _read_run_finished,
    StepRecord: _read_step,
    RunResult: _read_result,
    ActionOutcome: _read_outcome,
    ModelReply: _read_reply,
    Budget: _read_budget,
}


# ---------------------------------------------------------------------------
# Fast path: a well-formed payload is decoded with a few type checks; anything unusual falls
# through to the strict path above, which produces the error naming the record and field.
#
# A fast decoder reads each field by name from an object with exactly as many entries, so a
# missing or unknown field raises KeyError; the record's constructor (and its ``__post_init__``)
# still checks counts and the structural rules. A KeyError, TypeError or ConfigurationError
# makes it give up exactly as returning None does.
# ---------------------------------------------------------------------------

_STEP_FIELDS = (
    "step_idx", "raw_output", "content_chars", "thinking_chars", "action", "parse_ok",
    "parse_error", "observation", "observation_is_synthetic", "observation_truncated_chars",
    "prompt_chars", "call_id", "step_wall_ms", "tool_name", "tool_arguments", "action_status",
    "env_reported_completion", "schema_version",
)  # fmt: skip
_REPLY_FIELDS = ("call_id", "content", "thinking", "finish_reason", "usage")
#: The fields every stored reply has; the others are ``optional_on_read``.
_REPLY_REQUIRED = 3
_OUTCOME_FIELDS = (
    "status", "observation", "observation_is_synthetic", "env_reported_completion",
    "observation_truncated_chars",
)  # fmt: skip
_INTENT_FIELDS = ("run_id", "kind", "call_index", "result_id", "replay_policy")
_RESULT_FIELDS = ("run_id", "result_id", "reply", "failure")
_COMPLETED_FIELDS = ("run_id", "result_id", "action_outcome", "step")


def _expect_fields(cls: type[Any], names: tuple[str, ...]) -> None:
    """Refuse to start if ``cls``'s fields are not ``names``: the fast decoders pass them in
    this order."""
    actual = tuple(field.name for field in dataclasses.fields(cls))
    if actual != names:
        raise RuntimeError(
            f"polyloop.serialization's fast decoder of {cls.__name__} expects the fields "
            f"{names}, but {cls.__name__} has {actual}; update the decoder with the type."
        )


_expect_fields(StepRecord, _STEP_FIELDS)
_expect_fields(ModelReply, _REPLY_FIELDS)
_expect_fields(ActionOutcome, _OUTCOME_FIELDS)
_expect_fields(Intent, _INTENT_FIELDS)
_expect_fields(ModelCallResult, _RESULT_FIELDS)
_expect_fields(StepCompleted, _COMPLETED_FIELDS)

_ACTION_STATUS = {m.value: m for m in ActionStatus}
_INTENT_KIND = {m.value: m for m in IntentKind}
_REPLAY_POLICY = {m.value: m for m in ReplayPolicy}


def _fast_step(p: Any) -> StepRecord | None:
    if type(p) is not dict or len(p) != len(_STEP_FIELDS):
        return None
    status = p["action_status"]
    if status is not None:
        status = _ACTION_STATUS.get(status) if type(status) is str else None
        if status is None:
            return None
    version = p["schema_version"]
    raw_output = p["raw_output"]
    action = p["action"]
    parse_ok = p["parse_ok"]
    parse_error = p["parse_error"]
    observation = p["observation"]
    synthetic = p["observation_is_synthetic"]
    call_id = p["call_id"]
    tool_name = p["tool_name"]
    tool_arguments = p["tool_arguments"]
    completion = p["env_reported_completion"]
    if not (
        type(version) is int
        and version in READABLE_SCHEMA_VERSIONS
        and type(raw_output) is str
        and type(observation) is str
        and (action is None or type(action) is str)
        and (parse_error is None or type(parse_error) is str)
        and (call_id is None or type(call_id) is str)
        and (tool_name is None or type(tool_name) is str)
        and (tool_arguments is None or type(tool_arguments) is str)
        and type(parse_ok) is bool
        and type(synthetic) is bool
        and type(completion) is bool
    ):
        return None
    return StepRecord(
        p["step_idx"],
        raw_output,
        p["content_chars"],
        p["thinking_chars"],
        action,
        parse_ok,
        parse_error,
        observation,
        synthetic,
        p["observation_truncated_chars"],
        p["prompt_chars"],
        call_id,
        p["step_wall_ms"],
        tool_name,
        tool_arguments,
        status,
        completion,
        version,
    )


def _fast_reply(p: Any) -> ModelReply | None:
    if type(p) is not dict:
        return None
    call_id = p["call_id"]
    content = p["content"]
    thinking = p["thinking"]
    if not (
        type(content) is str and type(thinking) is str and (call_id is None or type(call_id) is str)
    ):
        return None
    if len(p) == _REPLY_REQUIRED:
        return ModelReply(call_id, content, thinking)
    finish_reason = p.get("finish_reason")
    usage = p.get("usage")
    if len(p) != _REPLY_REQUIRED + ("finish_reason" in p) + ("usage" in p) or not (
        (finish_reason is None or type(finish_reason) is str)
        and (usage is None or (type(usage) is dict and _all_ints(usage.values())))
    ):
        return None  # the strict path says what is wrong
    return ModelReply(call_id, content, thinking, finish_reason, usage)


def _all_ints(values: Iterable[object]) -> bool:
    return all(type(value) is int for value in values)


def _fast_outcome(p: Any) -> ActionOutcome | None:
    if type(p) is not dict or len(p) != len(_OUTCOME_FIELDS):
        return None
    status = p["status"]
    status = _ACTION_STATUS.get(status) if type(status) is str else None
    observation = p["observation"]
    synthetic = p["observation_is_synthetic"]
    completion = p["env_reported_completion"]
    if not (
        status is not None
        and type(observation) is str
        and type(synthetic) is bool
        and type(completion) is bool
    ):
        return None
    return ActionOutcome(
        status, observation, synthetic, completion, p["observation_truncated_chars"]
    )


def _fast_intent(p: Any) -> Intent | None:
    if type(p) is not dict or len(p) != len(_INTENT_FIELDS):
        return None
    run_id = p["run_id"]
    kind = p["kind"]
    result_id = p["result_id"]
    policy = p["replay_policy"]
    kind = _INTENT_KIND.get(kind) if type(kind) is str else None
    policy = _REPLAY_POLICY.get(policy) if type(policy) is str else None
    if not (
        kind is not None and policy is not None and type(run_id) is str and type(result_id) is str
    ):
        return None
    return Intent(run_id, kind, p["call_index"], result_id, policy)


def _fast_model_call_result(p: Any) -> ModelCallResult | None:
    if type(p) is not dict or len(p) != len(_RESULT_FIELDS):
        return None
    run_id = p["run_id"]
    result_id = p["result_id"]
    reply = p["reply"]
    failure = p["failure"]
    if not (
        type(run_id) is str and type(result_id) is str and (failure is None or type(failure) is str)
    ):
        return None
    if reply is not None:
        reply = _fast_reply(reply)
        if reply is None:
            return None
    return ModelCallResult(run_id, result_id, reply, failure)


def _fast_step_completed(p: Any) -> StepCompleted | None:
    if type(p) is not dict or len(p) != len(_COMPLETED_FIELDS):
        return None
    run_id = p["run_id"]
    result_id = p["result_id"]
    if type(run_id) is not str or (result_id is not None and type(result_id) is not str):
        return None
    outcome = p["action_outcome"]
    if outcome is not None:
        outcome = _fast_outcome(outcome)
        if outcome is None:
            return None
    step = _fast_step(p["step"])
    if step is None:
        return None
    return StepCompleted(run_id, result_id, outcome, step)


_TAGGED_KEYS = frozenset(("type", "record"))
_FAST_BY_TAG: Mapping[str, Callable[[Any], Any]] = {
    "intent": _fast_intent,
    "model_call_result": _fast_model_call_result,
    "step_completed": _fast_step_completed,
}

_FAST_DECODERS: Mapping[type[object], Callable[[Any], Any]] = {
    Intent: _fast_intent,
    ModelCallResult: _fast_model_call_result,
    StepCompleted: _fast_step_completed,
    StepRecord: _fast_step,
    ActionOutcome: _fast_outcome,
    ModelReply: _fast_reply,
}


def _decode(cls: type[T], payload: object) -> T:
    fast = _FAST_DECODERS.get(cls)
    if fast is not None:
        try:
            value = fast(payload)
        except (ConfigurationError, TypeError, KeyError):
            value = None  # the strict path below says what is wrong
        if value is not None:
            return cast(T, value)
    return cast(T, _DECODERS[cls](_Reader(cls.__name__, payload)))


def from_dict(cls: type[T], payload: object) -> T:
    """Decode a plain JSON object into ``cls``; raise :class:`SerializationError` naming the field."""
    if cls not in _DECODERS:
        raise SerializationError(
            f"Cannot decode {getattr(cls, '__name__', cls)!r}; decodable types are "
            f"{sorted(t.__name__ for t in _DECODERS)}."
        )
    return _decode(cls, payload)


#: ``json.loads`` without its per-call preamble: the same scanner (strict, default hooks).
_scan_once: Callable[[str, int], tuple[Any, int]] = json.JSONDecoder().scan_once  # type: ignore[attr-defined]


def _parse_json(what: str, text: str | bytes) -> object:
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
        return json.loads(text)
    except (ValueError, UnicodeDecodeError) as error:
        raise SerializationError(f"{what}: not valid JSON ({error}).") from None


def loads(cls: type[T], text: str | bytes) -> T:
    """Decode JSON text into ``cls`` (strict; see the module docstring)."""
    return from_dict(cls, _parse_json(cls.__name__, text))


def loads_log_record(text: str | bytes) -> LogRecord:
    """Decode one tagged log record written by :func:`dumps_log_record`."""
    return log_record_from_dict(_parse_json("log record", text))


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
