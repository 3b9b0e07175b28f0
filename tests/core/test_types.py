"""``polyloop.types`` matches design 0006 letter by letter, and its constructors refuse the impossible."""

from __future__ import annotations

import copy
import dataclasses
import pickle
import typing
from collections.abc import Mapping
from enum import StrEnum
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings

from polyloop import types
from polyloop.errors import ConfigurationError, PolyLoopError
from polyloop.types import (
    CURRENT_SCHEMA_VERSION,
    ActionOutcome,
    ActionStatus,
    Budget,
    CallNotExecuted,
    ContentBlock,
    Context,
    Injection,
    Intent,
    IntentKind,
    Message,
    ModelCallResult,
    ModelReply,
    ReplayPolicy,
    Role,
    RunFinished,
    RunResult,
    RunStarted,
    StepCompleted,
    StepRecord,
    StopReason,
    SyntheticObservations,
    TextBlock,
)
from tests.strategies import log_records

_NO_DEFAULT = object()

#: (field name, annotation, default) in declaration order, as design 0006 writes them.
EXPECTED_FIELDS: dict[type[Any], list[tuple[str, object, object]]] = {
    TextBlock: [("text", str, _NO_DEFAULT)],
    Message: [
        ("role", Role, _NO_DEFAULT),
        ("content", tuple[TextBlock, ...], _NO_DEFAULT),
        # added after the seed, defaulted: pairs a native tool call with its result (0046)
        ("tool_call_id", str | None, None),
    ],
    Context: [
        ("run_level", tuple[Message, ...], _NO_DEFAULT),
        ("goal_level", tuple[Message, ...], _NO_DEFAULT),
    ],
    Injection: [("entry_id", str, _NO_DEFAULT), ("content", str, _NO_DEFAULT)],
    SyntheticObservations: [
        ("action_rejected", str, _NO_DEFAULT),
        ("env_failed", str, _NO_DEFAULT),
        ("model_call_failed", str, _NO_DEFAULT),
    ],
    ModelReply: [
        ("call_id", str | None, _NO_DEFAULT),
        ("content", str, _NO_DEFAULT),
        ("thinking", str, _NO_DEFAULT),
        # added after schema 1.0, defaulted and optional on read (design 0024)
        ("finish_reason", str | None, None),
        ("usage", Mapping[str, int] | None, None),
        # the model that answered (design 0074)
        ("model", str | None, None),
    ],
    ActionOutcome: [
        ("status", ActionStatus, _NO_DEFAULT),
        ("observation", str, _NO_DEFAULT),
        ("observation_is_synthetic", bool, _NO_DEFAULT),
        ("env_reported_completion", bool, _NO_DEFAULT),
        ("observation_truncated_chars", int, _NO_DEFAULT),
    ],
    Budget: [
        ("max_steps", int, _NO_DEFAULT),
        ("max_actions", int, _NO_DEFAULT),
        ("max_consecutive_parse_failures", int, _NO_DEFAULT),
        ("max_prompt_chars", int, _NO_DEFAULT),
    ],
    StepRecord: [
        ("step_idx", int, _NO_DEFAULT),
        ("raw_output", str, _NO_DEFAULT),
        ("content_chars", int, _NO_DEFAULT),
        ("thinking_chars", int, _NO_DEFAULT),
        ("action", str | None, _NO_DEFAULT),
        ("parse_ok", bool, _NO_DEFAULT),
        ("parse_error", str | None, _NO_DEFAULT),
        ("observation", str, _NO_DEFAULT),
        ("observation_is_synthetic", bool, _NO_DEFAULT),
        ("observation_truncated_chars", int, _NO_DEFAULT),
        ("prompt_chars", int, _NO_DEFAULT),
        ("call_id", str | None, _NO_DEFAULT),
        ("step_wall_ms", int, _NO_DEFAULT),
        ("tool_name", str | None, None),
        ("tool_arguments", str | None, None),
        ("action_status", ActionStatus | None, None),
        ("env_reported_completion", bool, False),
        ("schema_version", int, CURRENT_SCHEMA_VERSION),
        # added after schema 1.0, defaulted and optional on read (design 0045)
        ("calls_not_executed", tuple[CallNotExecuted, ...], ()),
    ],
    CallNotExecuted: [("tool_name", str, _NO_DEFAULT), ("tool_arguments", str, _NO_DEFAULT)],
    RunResult: [
        ("run_id", str, _NO_DEFAULT),
        ("stop_reason", StopReason, _NO_DEFAULT),
        ("final_answer", str | None, _NO_DEFAULT),
        ("steps", tuple[StepRecord, ...], _NO_DEFAULT),
        ("schema_version", int, CURRENT_SCHEMA_VERSION),
        ("event_delivery_failures", int, 0),
    ],
    RunStarted: [
        ("run_id", str, _NO_DEFAULT),
        ("parameter_snapshot", Mapping[str, str], _NO_DEFAULT),
        ("schema_version", int, CURRENT_SCHEMA_VERSION),
        # added after schema 1.0, defaulted and optional on read (design 0052)
        ("follows_run_id", str | None, None),
        ("queued_input", str | None, None),
        # added after schema 1.0, defaulted and optional on read (design 0067)
        ("forked_from_run_id", str | None, None),
        ("forked_at_step", int | None, None),
        ("fork_left_in_doubt", bool, False),
        # added after them, defaulted and optional on read (design 0061)
        ("started_at", str | None, None),
        # Design 0072: a fork's prefix replayed into a fresh session; False when absent.
        ("fork_replayed_prefix", bool, False),
    ],
    Intent: [
        ("run_id", str, _NO_DEFAULT),
        ("kind", IntentKind, _NO_DEFAULT),
        ("call_index", int, _NO_DEFAULT),
        ("result_id", str, _NO_DEFAULT),
        ("replay_policy", ReplayPolicy, _NO_DEFAULT),
    ],
    ModelCallResult: [
        ("run_id", str, _NO_DEFAULT),
        ("result_id", str, _NO_DEFAULT),
        ("reply", ModelReply | None, _NO_DEFAULT),
        ("failure", str | None, _NO_DEFAULT),
        # added after schema 1.0, defaulted and optional on read (design 0065)
        ("failure_usage", Mapping[str, int] | None, None),
    ],
    StepCompleted: [
        ("run_id", str, _NO_DEFAULT),
        ("result_id", str | None, _NO_DEFAULT),
        ("action_outcome", ActionOutcome | None, _NO_DEFAULT),
        ("step", StepRecord, _NO_DEFAULT),
        # added after schema 1.0, defaulted and optional on read (design 0048)
        ("replayed_on_resume", IntentKind | None, None),
    ],
    RunFinished: [("run_id", str, _NO_DEFAULT), ("result", RunResult, _NO_DEFAULT)],
}

#: Every enum with its (member name, string value) pairs in declaration order.
EXPECTED_ENUMS: dict[type[StrEnum], list[tuple[str, str]]] = {
    Role: [
        ("SYSTEM", "system"),
        ("USER", "user"),
        ("ASSISTANT", "assistant"),
        # added after the seed: native tool results (design 0046)
        ("TOOL", "tool"),
    ],
    ReplayPolicy: [("NEVER", "never"), ("SAFE", "safe")],
    IntentKind: [("MODEL_CALL", "model_call"), ("ACTION", "action")],
    ActionStatus: [
        ("EXECUTED", "executed"),
        ("NOT_EXECUTED", "not_executed"),
        ("ENV_ERROR", "env_error"),
    ],
    StopReason: [
        ("TASK_COMPLETED", "task_completed"),
        ("STEP_BUDGET", "step_budget"),
        ("PARSE_FAILED_REPEATEDLY", "parse_failed_repeatedly"),
        ("CONTEXT_OVERFLOW", "context_overflow"),
        ("ENV_ERROR", "env_error"),
        ("LLM_ERROR", "llm_error"),
        ("AGENT_FINISHED", "agent_finished"),
        ("ACTION_BUDGET", "action_budget"),
        ("CANCELLED", "cancelled"),
        ("RESUME_STATE_UNKNOWN", "resume_state_unknown"),
    ],
}

SEED_NAMES = {
    "Role",
    "TextBlock",
    "ContentBlock",
    "Message",
    "Context",
    "Injection",
    "SyntheticObservations",
    "ReplayPolicy",
    "IntentKind",
    "ActionStatus",
    "ActionOutcome",
    "ModelReply",
    "StopReason",
    "Budget",
    "StepRecord",
    "RunResult",
    "RunStarted",
    "Intent",
    "ModelCallResult",
    "StepCompleted",
    "RunFinished",
    "CURRENT_SCHEMA_VERSION",
}
#: Names added after the seed, each with its design record.
ADDED_NAMES = {
    "CallNotExecuted",  # design 0045
    "REQUESTS_USAGE_KEY",  # design 0065
    "RETRIES_USAGE_KEY",  # design 0065
    "model_call_counts",  # design 0065
}


def _step(**changes: Any) -> StepRecord:
    fields: dict[str, Any] = {
        "step_idx": 0,
        "raw_output": "RUN: print(1)",
        "content_chars": 13,
        "thinking_chars": 0,
        "action": "print(1)",
        "parse_ok": True,
        "parse_error": None,
        "observation": "1",
        "observation_is_synthetic": False,
        "observation_truncated_chars": 0,
        "prompt_chars": 100,
        "call_id": "call-1",
        "step_wall_ms": 5,
    }
    fields.update(changes)
    return StepRecord(**fields)


def _outcome(**changes: Any) -> ActionOutcome:
    fields: dict[str, Any] = {
        "status": ActionStatus.EXECUTED,
        "observation": "ok",
        "observation_is_synthetic": False,
        "env_reported_completion": False,
        "observation_truncated_chars": 0,
    }
    fields.update(changes)
    return ActionOutcome(**fields)


def _budget(**changes: Any) -> Budget:
    fields: dict[str, Any] = {
        "max_steps": 10,
        "max_actions": 5,
        "max_consecutive_parse_failures": 3,
        "max_prompt_chars": 10_000,
    }
    fields.update(changes)
    return Budget(**fields)


# ---------------------------------------------------------------------------
# Names, fields, order, defaults
# ---------------------------------------------------------------------------


def test_module_exports_exactly_the_seed_names() -> None:
    """`polyloop.types.__all__` holds exactly the names design 0006 gives the module, plus the
    ones added later with a design record of their own."""
    assert set(types.__all__) == SEED_NAMES | ADDED_NAMES
    assert not SEED_NAMES & ADDED_NAMES
    assert len(types.__all__) == len(set(types.__all__))


def test_every_exported_name_exists() -> None:
    """Every name in `polyloop.types.__all__` is an attribute of the module."""
    missing = [name for name in types.__all__ if not hasattr(types, name)]
    assert missing == []


def test_current_schema_version_is_one() -> None:
    """The only schema version today is 1."""
    assert CURRENT_SCHEMA_VERSION == 1


def test_content_block_is_the_text_block() -> None:
    """`ContentBlock` is today exactly `TextBlock` (a union later is a compatible change)."""
    assert ContentBlock is TextBlock


@pytest.mark.parametrize("cls", list(EXPECTED_FIELDS), ids=lambda cls: cls.__name__)
def test_fields_names_order_and_types(cls: type[Any]) -> None:
    """Each dataclass has exactly the seed's fields, in the seed's order, with the seed's types."""
    hints = typing.get_type_hints(cls)
    actual = [(f.name, hints[f.name]) for f in dataclasses.fields(cls)]
    expected = [(name, annotation) for name, annotation, _ in EXPECTED_FIELDS[cls]]
    assert expected == actual


@pytest.mark.parametrize("cls", list(EXPECTED_FIELDS), ids=lambda cls: cls.__name__)
def test_field_defaults(cls: type[Any]) -> None:
    """Each field has the seed's default (or none), and no field uses a default factory."""
    actual = [
        (f.name, _NO_DEFAULT if f.default is dataclasses.MISSING else f.default)
        for f in dataclasses.fields(cls)
    ]
    expected = [(name, default) for name, _, default in EXPECTED_FIELDS[cls]]
    assert expected == actual
    assert all(f.default_factory is dataclasses.MISSING for f in dataclasses.fields(cls))


def test_step_record_has_eighteen_fields() -> None:
    """`StepRecord` has the seed's 18 fields, the first thirteen inherited verbatim from
    dissect, then only fields added after schema 1.0 (optional on read)."""
    fields = dataclasses.fields(StepRecord)
    names = [f.name for f in fields]
    assert names[17] == "schema_version"
    assert all(f.metadata.get("optional_on_read") is True for f in fields[18:])
    assert names[:13] == [
        "step_idx",
        "raw_output",
        "content_chars",
        "thinking_chars",
        "action",
        "parse_ok",
        "parse_error",
        "observation",
        "observation_is_synthetic",
        "observation_truncated_chars",
        "prompt_chars",
        "call_id",
        "step_wall_ms",
    ]


def test_a_thirteen_field_dissect_row_builds_with_defaults() -> None:
    """A pre-migration row of thirteen fields builds a `StepRecord`, the five new fields defaulted."""
    step = _step()
    assert (
        step.tool_name,
        step.tool_arguments,
        step.action_status,
        step.env_reported_completion,
        step.schema_version,
    ) == (None, None, None, False, 1)


@pytest.mark.parametrize("enum", list(EXPECTED_ENUMS), ids=lambda enum: enum.__name__)
def test_enum_members_and_string_values(enum: type[StrEnum]) -> None:
    """Each enum is a `StrEnum` with exactly the seed's members and string values, in order."""
    assert issubclass(enum, StrEnum)
    assert EXPECTED_ENUMS[enum] == [(member.name, member.value) for member in enum]


def test_stop_reason_has_ten_values() -> None:
    """`StopReason` has the ten values that downstream analyses match on."""
    assert len(StopReason) == 10


def test_enum_members_compare_equal_to_their_strings() -> None:
    """Stop reasons compare equal to the plain strings analyses filter on."""
    assert StopReason.LLM_ERROR == "llm_error"
    assert str(StopReason.LLM_ERROR) == "llm_error"


# ---------------------------------------------------------------------------
# Frozen and slotted
# ---------------------------------------------------------------------------


def _instances() -> list[object]:
    step = _step()
    result = RunResult("run", StopReason.AGENT_FINISHED, "42", (step,))
    return [
        TextBlock("hi"),
        Message(Role.USER, (TextBlock("hi"),)),
        Context((), ()),
        Injection("e1", "text"),
        SyntheticObservations("rejected", "env failed", "model failed"),
        ModelReply(None, "hi", ""),
        _outcome(),
        _budget(),
        step,
        result,
        RunStarted("run", {"a": "b"}),
        Intent("run", IntentKind.MODEL_CALL, 0, "model-0", ReplayPolicy.SAFE),
        ModelCallResult("run", "model-0", ModelReply(None, "hi", ""), None),
        StepCompleted("run", None, None, step),
        CallNotExecuted("write_file", "{}"),
        RunFinished("run", result),
    ]


def test_every_dataclass_is_covered_by_the_instances() -> None:
    """The frozen/slotted checks below cover one instance of every dataclass in the module."""
    classes = {
        obj
        for obj in vars(types).values()
        if isinstance(obj, type)
        and dataclasses.is_dataclass(obj)
        and obj.__module__ == types.__name__
    }
    assert classes == {type(instance) for instance in _instances()}


@pytest.mark.parametrize("instance", _instances(), ids=lambda obj: type(obj).__name__)
def test_values_are_frozen(instance: object) -> None:
    """Assigning to a field of any value or record raises `FrozenInstanceError`."""
    name = dataclasses.fields(instance)[0].name  # type: ignore[arg-type]
    with pytest.raises(dataclasses.FrozenInstanceError):
        setattr(instance, name, getattr(instance, name))


@pytest.mark.parametrize("instance", _instances(), ids=lambda obj: type(obj).__name__)
def test_values_are_slotted(instance: object) -> None:
    """Every value and record uses `__slots__` and has no instance `__dict__`."""
    assert "__slots__" in type(instance).__dict__
    assert not hasattr(instance, "__dict__")


def test_equal_values_are_equal_and_hash_alike() -> None:
    """Two records built from equal fields are equal and have the same hash."""
    left = Intent("run", IntentKind.ACTION, 3, "action-3", ReplayPolicy.NEVER)
    right = Intent("run", IntentKind.ACTION, 3, "action-3", ReplayPolicy.NEVER)
    assert left == right
    assert hash(left) == hash(right)


def test_run_started_snapshot_is_a_read_only_copy() -> None:
    """`RunStarted` keeps a read-only copy of its snapshot: later changes to the input do not leak in."""
    snapshot = {"model_client.model": "m1"}
    record = RunStarted("run", snapshot)
    snapshot["model_client.model"] = "m2"
    assert dict(record.parameter_snapshot) == {"model_client.model": "m1"}
    with pytest.raises(TypeError):
        record.parameter_snapshot["x"] = "y"  # type: ignore[index]


def test_run_started_equals_one_built_from_an_equal_dict() -> None:
    """Two `RunStarted` records with equal snapshots compare equal."""
    assert RunStarted("run", {"a": "1"}) == RunStarted("run", {"a": "1"})


# ---------------------------------------------------------------------------
# Structurally impossible values are refused
# ---------------------------------------------------------------------------


def test_model_reply_refuses_an_empty_call_id() -> None:
    """`ModelReply.call_id == ""` is refused: the absent id is `None`, never the empty string."""
    with pytest.raises(ConfigurationError, match="call_id"):
        ModelReply(call_id="", content="hi", thinking="")


def test_model_reply_accepts_none_as_call_id() -> None:
    """A reply without a provider call id carries `None`."""
    assert ModelReply(call_id=None, content="", thinking="").call_id is None


def test_model_reply_keeps_finish_reason_and_a_read_only_copy_of_usage() -> None:
    """A reply's usage is copied read-only, and the reply still pickles and deep-copies."""
    counts = {"prompt_tokens": 12, "completion_tokens": 3}
    value = ModelReply(None, "hi", "", finish_reason="length", usage=counts)
    counts["prompt_tokens"] = 99
    assert {"prompt_tokens": 12, "completion_tokens": 3} == dict(value.usage or {})
    with pytest.raises(TypeError):
        value.usage["x"] = 1  # type: ignore[index]
    assert value == pickle.loads(pickle.dumps(value))
    assert value == copy.deepcopy(value)
    assert ModelReply(None, "hi", "") == ModelReply(None, "hi", "", None, None, None)
    answered = ModelReply(None, "hi", "", usage=counts, model="m-2026-12-01")
    assert answered == pickle.loads(pickle.dumps(answered))
    assert "m-2026-12-01" == copy.deepcopy(answered).model


@pytest.mark.parametrize(
    ("finish_reason", "usage"),
    [("", None), (None, {"prompt_tokens": -1}), (None, {"prompt_tokens": True}), (None, [1])],
)
def test_model_reply_refuses_impossible_finish_reason_or_usage(
    finish_reason: object, usage: object
) -> None:
    """An empty finish reason, a negative or non-integer count, a non-mapping usage are refused."""
    with pytest.raises(ConfigurationError, match="ModelReply"):
        ModelReply(None, "hi", "", finish_reason=finish_reason, usage=usage)  # type: ignore[arg-type]


@pytest.mark.parametrize("model", ["", 7])
def test_model_reply_refuses_an_empty_or_non_text_model(model: object) -> None:
    """The answering model is a non-empty string or None; the message says to use None."""
    with pytest.raises(ConfigurationError, match=r"ModelReply\.model.*use None"):
        ModelReply(None, "hi", "", model=model)  # type: ignore[arg-type]


def test_model_call_result_refuses_both_reply_and_failure() -> None:
    """A model result with both a reply and a failure is refused, naming its result_id."""
    with pytest.raises(ConfigurationError, match=r"model-0.*both"):
        ModelCallResult("run", "model-0", ModelReply(None, "hi", ""), "RuntimeError: boom")


def test_model_call_result_refuses_neither_reply_nor_failure() -> None:
    """A model result with neither a reply nor a failure is refused."""
    with pytest.raises(ConfigurationError, match="neither"):
        ModelCallResult("run", "model-0", None, None)


def test_model_call_result_accepts_exactly_one() -> None:
    """A reply alone and a failure alone are both valid model results."""
    assert ModelCallResult("run", "m", None, "RuntimeError: boom").reply is None
    assert ModelCallResult("run", "m", ModelReply(None, "", ""), None).failure is None


def test_model_call_result_refuses_an_empty_result_id() -> None:
    """A model result must carry the non-empty pre-allocated id."""
    with pytest.raises(ConfigurationError, match="result_id"):
        ModelCallResult("run", "", None, "RuntimeError: boom")


def test_step_completed_refuses_result_id_without_outcome() -> None:
    """A finished step with a result_id but no action outcome is refused."""
    with pytest.raises(ConfigurationError, match="action_outcome"):
        StepCompleted("run", "action-0", None, _step())


def test_step_completed_refuses_outcome_without_result_id() -> None:
    """A finished step with an action outcome but no result_id is refused."""
    with pytest.raises(ConfigurationError, match="result_id"):
        StepCompleted("run", None, _outcome(), _step())


def test_step_completed_refuses_an_empty_result_id() -> None:
    """The empty string is not a result id; a step without an action uses `None`."""
    with pytest.raises(ConfigurationError, match="result_id"):
        StepCompleted("run", "", _outcome(), _step())


def test_step_completed_accepts_both_or_neither() -> None:
    """Both set (an action intent was written) and both `None` (none was) are valid."""
    assert StepCompleted("run", "action-0", _outcome(), _step()).result_id == "action-0"
    assert StepCompleted("run", None, None, _step()).action_outcome is None


def test_intent_refuses_an_empty_result_id() -> None:
    """An intent must announce a non-empty result id."""
    with pytest.raises(ConfigurationError, match="result_id"):
        Intent("run", IntentKind.MODEL_CALL, 0, "", ReplayPolicy.NEVER)


def test_intent_refuses_plain_strings_for_its_enums() -> None:
    """`Intent.kind` and `Intent.replay_policy` must be enum members, not look-alike strings."""
    with pytest.raises(ConfigurationError, match="kind"):
        Intent("run", "model_call", 0, "m", ReplayPolicy.NEVER)  # type: ignore[arg-type]
    with pytest.raises(ConfigurationError, match="replay_policy"):
        Intent("run", IntentKind.ACTION, 0, "a", "never")  # type: ignore[arg-type]


def test_step_record_refuses_an_empty_call_id() -> None:
    """`StepRecord.call_id` is `None` or non-empty, like `ModelReply.call_id`."""
    with pytest.raises(ConfigurationError, match="call_id"):
        _step(call_id="")


def test_step_record_refuses_a_plain_string_status() -> None:
    """`StepRecord.action_status` must be an `ActionStatus` or `None`."""
    with pytest.raises(ConfigurationError, match="action_status"):
        _step(action_status="executed")


def test_action_outcome_refuses_a_plain_string_status() -> None:
    """`ActionOutcome.status` must be an `ActionStatus`."""
    with pytest.raises(ConfigurationError, match="status"):
        _outcome(status="executed")


def test_run_result_refuses_a_plain_string_stop_reason() -> None:
    """`RunResult.stop_reason` must be a `StopReason`."""
    with pytest.raises(ConfigurationError, match="stop_reason"):
        RunResult("run", "agent_finished", None, ())  # type: ignore[arg-type]


def test_run_result_refuses_a_list_of_steps() -> None:
    """`RunResult.steps` must be a tuple, so the result stays immutable."""
    with pytest.raises(ConfigurationError, match="steps"):
        RunResult("run", StopReason.AGENT_FINISHED, None, [_step()])  # type: ignore[arg-type]


def test_message_refuses_a_list_of_blocks() -> None:
    """`Message.content` must be a tuple of blocks."""
    with pytest.raises(ConfigurationError, match="content"):
        Message(Role.USER, [TextBlock("hi")])  # type: ignore[arg-type]


def test_run_started_refuses_non_string_snapshot_values() -> None:
    """A parameter snapshot maps strings to strings; a number is refused, naming the entry."""
    with pytest.raises(ConfigurationError, match=r"budget\.max_steps"):
        RunStarted("run", {"budget.max_steps": 3})  # type: ignore[dict-item]


COUNT_FIELDS: list[tuple[str, Any]] = [
    *(
        (f"Budget.{name}", lambda v, n=name: _budget(**{n: v}))
        for name in (
            "max_steps",
            "max_actions",
            "max_consecutive_parse_failures",
            "max_prompt_chars",
        )
    ),
    *(
        (f"StepRecord.{name}", lambda v, n=name: _step(**{n: v}))
        for name in (
            "step_idx",
            "content_chars",
            "thinking_chars",
            "observation_truncated_chars",
            "prompt_chars",
            "step_wall_ms",
        )
    ),
    (
        "ActionOutcome.observation_truncated_chars",
        lambda v: _outcome(observation_truncated_chars=v),
    ),
    (
        "RunResult.event_delivery_failures",
        lambda v: RunResult("r", StopReason.CANCELLED, None, (), event_delivery_failures=v),
    ),
    ("Intent.call_index", lambda v: Intent("r", IntentKind.ACTION, v, "a", ReplayPolicy.NEVER)),
]


@pytest.mark.parametrize(("field", "build"), COUNT_FIELDS, ids=[f for f, _ in COUNT_FIELDS])
def test_negative_counts_are_refused(field: str, build: Any) -> None:
    """A negative count is refused with an error naming the type and field."""
    with pytest.raises(ConfigurationError, match=field.replace(".", r"\.")):
        build(-1)


@pytest.mark.parametrize(("field", "build"), COUNT_FIELDS, ids=[f for f, _ in COUNT_FIELDS])
@pytest.mark.parametrize("value", [True, False], ids=["True", "False"])
def test_bools_as_counts_are_refused(field: str, build: Any, value: bool) -> None:
    """`True`/`False` are not counts even though `bool` subclasses `int`."""
    with pytest.raises(ConfigurationError, match=field.replace(".", r"\.")):
        build(value)


@pytest.mark.parametrize(("field", "build"), COUNT_FIELDS, ids=[f for f, _ in COUNT_FIELDS])
@pytest.mark.parametrize("value", [1.0, "1", None], ids=["float", "str", "None"])
def test_non_integers_as_counts_are_refused(field: str, build: Any, value: object) -> None:
    """A float, a numeric string or `None` is not a count."""
    with pytest.raises(ConfigurationError, match=field.replace(".", r"\.")):
        build(value)


@pytest.mark.parametrize(("field", "build"), COUNT_FIELDS, ids=[f for f, _ in COUNT_FIELDS])
def test_zero_and_huge_counts_are_accepted(field: str, build: Any) -> None:
    """Zero and a count beyond 64 bits are valid counts."""
    build(0)
    build(2**70)


VERSIONED: list[tuple[str, Any]] = [
    ("StepRecord", lambda v: _step(schema_version=v)),
    ("RunResult", lambda v: RunResult("r", StopReason.CANCELLED, None, (), schema_version=v)),
    ("RunStarted", lambda v: RunStarted("r", {}, schema_version=v)),
]


@pytest.mark.parametrize(("owner", "build"), VERSIONED, ids=[o for o, _ in VERSIONED])
@pytest.mark.parametrize("value", [0, -1, True, "1", 1.0], ids=["0", "-1", "True", "str", "float"])
def test_impossible_schema_versions_are_refused(owner: str, build: Any, value: object) -> None:
    """A schema version must be a positive int; the error names the record's field."""
    with pytest.raises(ConfigurationError, match=f"{owner}\\.schema_version"):
        build(value)


def test_configuration_errors_share_the_library_base_class() -> None:
    """Constructor errors are `PolyLoopError`s (and `ValueError`s) so callers can catch them once."""
    with pytest.raises(PolyLoopError) as caught:
        _budget(max_steps=-1)
    assert isinstance(caught.value, ValueError)


# ---------------------------------------------------------------------------
# Values can be copied and sent to another process
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("instance", _instances(), ids=lambda obj: type(obj).__name__)
def test_values_pickle_and_deep_copy_to_equal_values(instance: object) -> None:
    """Every value and record survives pickling and `copy.deepcopy` (a harness may use processes)."""
    assert pickle.loads(pickle.dumps(instance)) == instance
    assert copy.deepcopy(instance) == instance


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(record=log_records)
def test_log_records_pickle_to_equal_records(record: object) -> None:
    """Any log record pickles to an equal record of the same type."""
    copied = pickle.loads(pickle.dumps(record))
    assert copied == record
    assert type(copied) is type(record)


def test_a_pickled_run_started_keeps_a_read_only_snapshot() -> None:
    """The copy of a `RunStarted` is as immutable as the original."""
    copied = pickle.loads(pickle.dumps(RunStarted("run", {"a": "b"})))
    with pytest.raises(TypeError):
        copied.parameter_snapshot["a"] = "c"
