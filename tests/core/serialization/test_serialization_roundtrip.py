"""``polyloop.serialization``: exact round trips, and strict refusal of anything else.

Every value and record survives ``to_dict``/``from_dict``, ``dumps``/``loads`` and the tagged log
line exactly (non-ASCII, empty and very large texts included). Decoding refuses a payload with a
missing or unknown ``schema_version``, a missing or unknown field, or a wrong JSON type, and
the error names the record and the field path.
"""

from __future__ import annotations

import copy
import itertools
import json
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from polyloop.errors import SchemaVersionError, SerializationError
from polyloop.serialization import (
    LOG_RECORD_TYPES,
    dumps,
    dumps_log_record,
    from_dict,
    loads,
    loads_log_record,
    log_record_tag,
    to_dict,
)
from polyloop.types import (
    ActionOutcome,
    ActionStatus,
    Budget,
    Intent,
    IntentKind,
    Message,
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
from tests.strategies import (
    action_outcomes,
    budgets,
    intents,
    log_records,
    model_call_results,
    model_replies,
    run_finished_records,
    run_results,
    run_started_records,
    step_completed_records,
    step_records,
)

pytestmark = pytest.mark.filterwarnings("error")

#: Each encodable type with a strategy for its values.
ENCODABLE: list[tuple[type[Any], st.SearchStrategy[Any]]] = [
    (RunStarted, run_started_records),
    (Intent, intents),
    (ModelCallResult, model_call_results),
    (StepCompleted, step_completed_records),
    (RunFinished, run_finished_records),
    (StepRecord, step_records),
    (RunResult, run_results),
    (ActionOutcome, action_outcomes),
    (ModelReply, model_replies),
    (Budget, budgets),
]
IDS = [cls.__name__ for cls, _ in ENCODABLE]

#: The records that carry a schema version.
VERSIONED = (RunStarted, StepRecord, RunResult)

#: Versions this library cannot read, as JSON values.
UNKNOWN_VERSIONS: list[object] = [0, 2, -1, 99, "1", True, False, 1.0, None, [1], {"major": 1}]

relaxed = settings(
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
#: For tests parametrized over many fixed cases, where each case needs fewer examples.
brief = settings(relaxed, max_examples=12)


# ---------------------------------------------------------------------------
# Walking a payload
# ---------------------------------------------------------------------------

Path = tuple[str | int, ...]


def _render(root: str, path: Path) -> str:
    text = root
    for part in path:
        text += f"[{part}]" if isinstance(part, int) else f".{part}"
    return text


#: Fields whose value is a map of data, not an object with fields.
DATA_MAPS = frozenset({"parameter_snapshot", "usage"})
#: Fields added after schema 1.0 (``optional_on_read``): absent reads as the default.
OPTIONAL_ON_READ = frozenset(
    {
        "finish_reason",
        "model",
        "usage",
        "calls_not_executed",
        "follows_run_id",
        "queued_input",
        "forked_from_run_id",
        "forked_at_step",
        "fork_left_in_doubt",
        "started_at",
        "fork_replayed_prefix",
    }
)


def _objects(payload: Any, path: Path = ()) -> Iterator[tuple[Path, dict[str, Any]]]:
    """Every JSON object inside ``payload`` (a snapshot's string map is data, not an object)."""
    if isinstance(payload, dict):
        yield path, payload
        for key, value in payload.items():
            if key not in DATA_MAPS:
                yield from _objects(value, (*path, key))
    elif isinstance(payload, list):
        for index, item in enumerate(payload):
            yield from _objects(item, (*path, index))


def _fields(payload: Any) -> Iterator[Path]:
    """The path of every field of every object inside ``payload``."""
    for path, obj in _objects(payload):
        for key in obj:
            yield (*path, key)


def _versioned_objects(cls: type[Any], payload: Any) -> Iterator[tuple[Path, str]]:
    """Paths of the objects that carry ``schema_version`` (the top one and nested ones)."""
    for path, obj in _objects(payload):
        if "schema_version" in obj:
            yield path, cls.__name__


def _at(payload: Any, path: Path) -> Any:
    for part in path:
        payload = payload[part]
    return payload


# ---------------------------------------------------------------------------
# Round trips
# ---------------------------------------------------------------------------


@pytest.mark.parametrize(("cls", "values"), ENCODABLE, ids=IDS)
@relaxed
@given(data=st.data())
def test_to_dict_from_dict_round_trip(cls: type[Any], values: Any, data: st.DataObject) -> None:
    """`from_dict(cls, to_dict(x)) == x` for every value of every encodable type."""
    value = data.draw(values)
    assert from_dict(cls, to_dict(value)) == value


@pytest.mark.parametrize(("cls", "values"), ENCODABLE, ids=IDS)
@relaxed
@given(data=st.data())
def test_dumps_loads_round_trip(cls: type[Any], values: Any, data: st.DataObject) -> None:
    """`loads(cls, dumps(x)) == x`, from text and from UTF-8 bytes."""
    value = data.draw(values)
    text = dumps(value)
    assert loads(cls, text) == value
    assert loads(cls, text.encode("utf-8")) == value


@pytest.mark.parametrize(("cls", "values"), ENCODABLE, ids=IDS)
@relaxed
@given(data=st.data())
def test_to_dict_is_plain_json(cls: type[Any], values: Any, data: st.DataObject) -> None:
    """`to_dict` returns only JSON types, so a JSON round trip of it changes nothing."""
    payload = to_dict(data.draw(values))
    assert json.loads(json.dumps(payload)) == payload


@relaxed
@given(record=log_records)
def test_log_record_round_trip(record: Any) -> None:
    """A tagged log line decodes back to the very record, of the same type."""
    line = dumps_log_record(record)
    decoded = loads_log_record(line)
    assert decoded == record
    assert type(decoded) is type(record)


@relaxed
@given(record=log_records)
def test_log_record_is_one_line_tagged_with_its_kind(record: Any) -> None:
    """A log line holds no line break of any kind and is `{"type": <tag>, "record": <record>}`."""
    line = dumps_log_record(record)
    assert line.splitlines() == [line]
    assert line.encode("utf-8").count(b"\n") == 0
    payload = json.loads(line)
    assert payload == {"type": log_record_tag(record), "record": to_dict(record)}
    assert LOG_RECORD_TYPES[payload["type"]] is type(record)


def test_log_record_tags_are_the_five_kinds() -> None:
    """The five log record kinds have the five tags; the two records of a run that asks a
    person (design 0037, written by gated runs only) have theirs."""
    assert {tag: cls.__name__ for tag, cls in LOG_RECORD_TYPES.items()} == {
        "run_started": "RunStarted",
        "intent": "Intent",
        "model_call_result": "ModelCallResult",
        "step_completed": "StepCompleted",
        "run_finished": "RunFinished",
        "user_asked": "UserAsked",
        "user_answered": "UserAnswered",
    }


def _intent() -> Intent:
    return Intent("r", IntentKind.ACTION, 2, "action-2", ReplayPolicy.SAFE)


def _outcome() -> ActionOutcome:
    return ActionOutcome(ActionStatus.EXECUTED, "ok", False, True, 3)


def _step(**changes: Any) -> StepRecord:
    fields: dict[str, Any] = {
        "step_idx": 0,
        "raw_output": "",
        "content_chars": 0,
        "thinking_chars": 0,
        "action": None,
        "parse_ok": False,
        "parse_error": None,
        "observation": "",
        "observation_is_synthetic": True,
        "observation_truncated_chars": 0,
        "prompt_chars": 0,
        "call_id": None,
        "step_wall_ms": 0,
    }
    fields.update(changes)
    return StepRecord(**fields)


@pytest.mark.parametrize(
    "text",
    [
        "",
        "naïve café – 東京 – \U0001f600 – עברית",
        "\x00\x01\x1f\x7f",
        "line\nbreak\r\nand\ttab \u2028 \u2029 \x85",
        '"quotes" \\backslash\\ {braces} </script>',
        "x" * 1_000_000,
        "\U0010ffff" * 1000,
    ],
    ids=["empty", "non-ASCII", "controls", "line breaks", "escapes", "one million", "astral"],
)
def test_texts_survive_exactly(text: str) -> None:
    """Empty, non-ASCII, control, line-break and very large texts survive every round trip."""
    step = _step(raw_output=text, observation=text, parse_error=text, call_id=text or None)
    assert loads(StepRecord, dumps(step)) == step
    completed = StepCompleted("r", None, None, step)
    line = dumps_log_record(completed)
    assert loads_log_record(line) == completed
    assert len(line.splitlines()) == 1


def _no_surrogate_pair(text: str) -> bool:
    return not any(
        "\ud800" <= a <= "\udbff" and "\udc00" <= b <= "\udfff" for a, b in itertools.pairwise(text)
    )


#: Texts holding lone surrogates (as a model reply cut inside an emoji decodes to), but never a
#: high surrogate directly followed by a low one (JSON would read that back as one character).
surrogate_texts = st.text(
    st.one_of(
        st.characters(exclude_categories=("Cs",)),
        st.sampled_from(["\ud800", "\udbff", "\udc00", "\udfff", "\ud83d"]),
    ),
    max_size=20,
).filter(_no_surrogate_pair)


@relaxed
@given(text=surrogate_texts)
def test_lone_surrogates_are_escaped_and_survive(text: str) -> None:
    """Texts with lone surrogates encode to UTF-8-safe JSON and decode back exactly."""
    reply = ModelReply(call_id=None, content=text, thinking=text)
    line = dumps_log_record(ModelCallResult("r", "model-0", reply, None))
    line.encode("utf-8")  # a store must be able to write it
    assert loads_log_record(line.encode("utf-8")) == ModelCallResult("r", "model-0", reply, None)
    assert loads(ModelReply, dumps(reply).encode("utf-8")) == reply


def test_a_reply_cut_inside_an_emoji_can_be_stored() -> None:
    """A reply whose JSON ended halfway through a surrogate pair is written as an escape."""
    content = json.loads('"so close \\ud83d"')
    text = dumps(ModelReply(None, content, ""))
    assert "\\ud83d" in text
    assert loads(ModelReply, text.encode("utf-8")).content == content


def test_dumps_keeps_non_ascii_as_characters() -> None:
    """The JSON text carries non-ASCII as UTF-8 characters, not `\\u` escapes."""
    assert "東京" in dumps(ModelReply(None, "東京", ""))


def test_huge_counts_survive() -> None:
    """Counts beyond 64 bits survive the round trip exactly."""
    budget = Budget(2**80, 0, 1, 2**64 + 1)
    assert loads(Budget, dumps(budget)) == budget


# ---------------------------------------------------------------------------
# Schema versions
# ---------------------------------------------------------------------------

VERSIONED_STRATEGIES: list[tuple[type[Any], st.SearchStrategy[Any]]] = [
    (RunStarted, run_started_records),
    (StepRecord, step_records),
    (RunResult, run_results),
    (StepCompleted, step_completed_records),
    (RunFinished, run_finished_records),
]
VERSIONED_IDS = [cls.__name__ for cls, _ in VERSIONED_STRATEGIES]


@pytest.mark.parametrize(("cls", "values"), VERSIONED_STRATEGIES, ids=VERSIONED_IDS)
@relaxed
@given(data=st.data())
def test_missing_schema_version_is_refused(
    cls: type[Any], values: Any, data: st.DataObject
) -> None:
    """A payload whose (possibly nested) versioned record lacks `schema_version` is refused, naming where."""
    payload = to_dict(data.draw(values))
    where = data.draw(st.sampled_from(sorted(_versioned_objects(cls, payload), key=str)))
    path, root = where
    del _at(payload, path)["schema_version"]
    with pytest.raises(SchemaVersionError) as caught:
        from_dict(cls, payload)
    message = str(caught.value)
    assert f"{_render(root, path)}: field 'schema_version' is missing" in message


@pytest.mark.parametrize(("cls", "values"), VERSIONED_STRATEGIES, ids=VERSIONED_IDS)
@pytest.mark.parametrize("version", UNKNOWN_VERSIONS, ids=repr)
@brief
@given(data=st.data())
def test_unknown_schema_version_is_refused(
    cls: type[Any], values: Any, version: object, data: st.DataObject
) -> None:
    """A payload with a version this library cannot read is refused, naming the record's field."""
    payload = to_dict(data.draw(values))
    path, root = data.draw(st.sampled_from(sorted(_versioned_objects(cls, payload), key=str)))
    _at(payload, path)["schema_version"] = version
    with pytest.raises(SchemaVersionError) as caught:
        from_dict(cls, payload)
    assert f"{_render(root, path)}.schema_version" in str(caught.value)


@pytest.mark.parametrize("cls", VERSIONED, ids=lambda cls: cls.__name__)
def test_versioned_records_refuse_a_missing_version_even_when_everything_else_is_right(
    cls: type[Any],
) -> None:
    """The default version applies to construction only, never to decoding."""
    value = {
        RunStarted: RunStarted("r", {"k": "v"}),
        StepRecord: _step(),
        RunResult: RunResult("r", StopReason.AGENT_FINISHED, "42", ()),
    }[cls]
    payload = to_dict(value)
    del payload["schema_version"]
    with pytest.raises(SchemaVersionError, match=rf"^{cls.__name__}: field 'schema_version'"):
        from_dict(cls, payload)
    with pytest.raises(SchemaVersionError):
        loads(cls, json.dumps(payload))


def test_unversioned_records_carry_no_version() -> None:
    """Only RunStarted, StepRecord and RunResult carry `schema_version`; the others do not."""
    intent_payload = to_dict(_intent())
    assert "schema_version" not in intent_payload
    completed = to_dict(StepCompleted("r", None, None, _step()))
    assert "schema_version" not in completed
    assert completed["step"]["schema_version"] == 1


def test_schema_version_errors_are_serialization_errors() -> None:
    """A version error is a `SerializationError`, so one except clause catches every bad payload."""
    assert issubclass(SchemaVersionError, SerializationError)


# ---------------------------------------------------------------------------
# Unknown fields, missing fields, wrong types
# ---------------------------------------------------------------------------


@pytest.mark.parametrize(("cls", "values"), ENCODABLE, ids=IDS)
@relaxed
@given(data=st.data())
def test_unknown_fields_are_refused(cls: type[Any], values: Any, data: st.DataObject) -> None:
    """An extra field in any (nested) object is refused, naming the object and the field."""
    payload = to_dict(data.draw(values))
    path, obj = data.draw(st.sampled_from(list(_objects(payload))))
    obj["surplus_field"] = 0
    with pytest.raises(SerializationError) as caught:
        from_dict(cls, payload)
    message = str(caught.value)
    assert f"{_render(cls.__name__, path)}: unknown field(s) ['surplus_field']" in message


@pytest.mark.parametrize(("cls", "values"), ENCODABLE, ids=IDS)
@relaxed
@given(data=st.data())
def test_missing_fields_are_refused(cls: type[Any], values: Any, data: st.DataObject) -> None:
    """A payload lacking any (nested) field is refused, naming the object and the field (fields
    added after schema 1.0 excepted: they read as their default)."""
    payload = to_dict(data.draw(values))
    path = data.draw(
        st.sampled_from([p for p in _fields(payload) if p[-1] not in OPTIONAL_ON_READ])
    )
    del _at(payload, path[:-1])[path[-1]]
    with pytest.raises(SerializationError) as caught:
        from_dict(cls, payload)
    assert f"{_render(cls.__name__, path[:-1])}: field {path[-1]!r} is missing" in str(caught.value)


@pytest.mark.parametrize(("cls", "values"), ENCODABLE, ids=IDS)
@relaxed
@given(data=st.data())
def test_wrong_json_types_are_refused_with_the_field_path(
    cls: type[Any], values: Any, data: st.DataObject
) -> None:
    """A field holding a JSON type it can never have (a float) is refused, naming its full path."""
    payload = to_dict(data.draw(values))
    path = data.draw(st.sampled_from(list(_fields(payload))))
    _at(payload, path[:-1])[path[-1]] = 1.5
    with pytest.raises(SerializationError) as caught:
        from_dict(cls, payload)
    assert _render(cls.__name__, path) in str(caught.value)


@pytest.mark.parametrize(("cls", "values"), ENCODABLE, ids=IDS)
@relaxed
@given(data=st.data())
def test_list_items_of_the_wrong_type_are_refused(
    cls: type[Any], values: Any, data: st.DataObject
) -> None:
    """A field replaced by a list (never valid where a scalar or object belongs) is refused by path."""
    payload = to_dict(data.draw(values))
    candidates = [p for p in _fields(payload) if not isinstance(_at(payload, p), list)]
    path = data.draw(st.sampled_from(candidates))
    _at(payload, path[:-1])[path[-1]] = []
    with pytest.raises(SerializationError) as caught:
        from_dict(cls, payload)
    assert _render(cls.__name__, path) in str(caught.value)


@pytest.mark.parametrize(
    ("cls", "field", "value"),
    [
        (StepRecord, "step_idx", True),
        (StepRecord, "step_idx", "3"),
        (StepRecord, "parse_ok", 1),
        (StepRecord, "parse_ok", "true"),
        (StepRecord, "action_status", "EXECUTED"),
        (StepRecord, "action_status", "done"),
        (StepRecord, "call_id", 7),
        (StepRecord, "raw_output", None),
        (RunResult, "stop_reason", "finished"),
        (RunResult, "steps", {}),
        (RunResult, "final_answer", 42),
        (RunStarted, "parameter_snapshot", ["a", "b"]),
        (Intent, "kind", "model-call"),
        (Intent, "replay_policy", "SAFE"),
        (Intent, "call_index", "0"),
        (ActionOutcome, "status", None),
        (ActionOutcome, "observation_truncated_chars", False),
        (Budget, "max_steps", None),
    ],
    ids=lambda value: repr(value) if not isinstance(value, type) else value.__name__,
)
def test_specific_wrong_values_name_the_field(cls: type[Any], field: str, value: object) -> None:
    """Booleans as numbers, numbers as booleans, unknown enum strings and nulls are refused by field."""
    samples: dict[type[Any], Any] = {
        StepRecord: _step(action_status=ActionStatus.EXECUTED),
        RunResult: RunResult("r", StopReason.STEP_BUDGET, None, (_step(),)),
        RunStarted: RunStarted("r", {"k": "v"}),
        Intent: _intent(),
        ActionOutcome: _outcome(),
        Budget: Budget(1, 2, 3, 4),
    }
    payload = to_dict(samples[cls])
    payload[field] = value
    with pytest.raises(SerializationError, match=rf"^{cls.__name__}\.{field}: expected"):
        from_dict(cls, payload)


def test_snapshot_values_must_be_strings() -> None:
    """A snapshot entry that is not a string is refused, naming the snapshot key."""
    payload = to_dict(RunStarted("r", {"budget.max_steps": "3"}))
    payload["parameter_snapshot"]["budget.max_steps"] = 3
    with pytest.raises(
        SerializationError, match=r"RunStarted\.parameter_snapshot\['budget\.max_steps'\]"
    ):
        from_dict(RunStarted, payload)


@pytest.mark.parametrize(
    ("cls", "payload", "where"),
    [
        (StepRecord, {**to_dict(_step()), "step_idx": -1}, "step_idx"),
        (StepRecord, {**to_dict(_step()), "call_id": ""}, "call_id"),
        (ModelReply, {"call_id": "", "content": "", "thinking": ""}, "call_id"),
        (
            ModelCallResult,
            {
                "run_id": "r",
                "result_id": "m-0",
                "reply": {"call_id": None, "content": "", "thinking": ""},
                "failure": "RuntimeError: x",
            },
            "both",
        ),
        (
            ModelCallResult,
            {"run_id": "r", "result_id": "m-0", "reply": None, "failure": None},
            "neither",
        ),
        (
            StepCompleted,
            {"run_id": "r", "result_id": "a-0", "action_outcome": None, "step": to_dict(_step())},
            "action_outcome",
        ),
        (Intent, {**to_dict(_intent()), "result_id": ""}, "result_id"),
    ],
    ids=[
        "negative count",
        "empty call id in a step",
        "empty call id in a reply",
        "reply and failure",
        "neither reply nor failure",
        "result id without outcome",
        "empty result id",
    ],
)
def test_structurally_impossible_payloads_are_refused(
    cls: type[Any], payload: Any, where: str
) -> None:
    """A payload the constructor would refuse is a `SerializationError` naming the record."""
    with pytest.raises(SerializationError) as caught:
        from_dict(cls, payload)
    assert str(caught.value).startswith(cls.__name__)
    assert where in str(caught.value)


@pytest.mark.parametrize(("cls", "values"), ENCODABLE, ids=IDS)
@pytest.mark.parametrize("payload", [None, [], "text", 3, 1.5, True], ids=repr)
def test_non_object_payloads_are_refused(cls: type[Any], values: Any, payload: object) -> None:
    """A payload that is not a JSON object is refused, naming the record."""
    with pytest.raises(SerializationError, match=rf"^{cls.__name__}: expected a JSON object"):
        from_dict(cls, payload)


# ---------------------------------------------------------------------------
# Log lines and text
# ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("line", "match"),
    [
        ("", "not valid JSON"),
        ('{"type": "intent", "record": ', "not valid JSON"),
        (b"\xff\xfe", "not valid JSON"),
        ("[]", "exactly the fields"),
        ('{"type": "intent"}', "exactly the fields"),
        ('{"type": "intent", "record": {}, "extra": 1}', "exactly the fields"),
        ('{"type": "step", "record": {}}', "unknown type 'step'"),
        ('{"type": 1, "record": {}}', "unknown type 1"),
        ('{"type": "intent", "record": []}', r"^Intent: expected a JSON object"),
        ('{"type": "intent", "record": {}}', r"^Intent: field '"),
    ],
    ids=[
        "empty",
        "torn",
        "not UTF-8",
        "array",
        "no record",
        "extra key",
        "unknown tag",
        "non-string tag",
        "record not an object",
        "record empty",
    ],
)
def test_bad_log_lines_are_refused(line: str | bytes, match: str) -> None:
    """A line that is not a well-formed tagged record is refused with a `SerializationError`."""
    with pytest.raises(SerializationError, match=match):
        loads_log_record(line)


def test_a_log_record_tagged_as_another_kind_is_refused() -> None:
    """An intent payload tagged as a run start does not decode."""
    line = json.dumps({"type": "run_started", "record": to_dict(_intent())})
    with pytest.raises(SerializationError, match="RunStarted"):
        loads_log_record(line)


def test_encoding_an_unknown_type_is_refused() -> None:
    """`to_dict` of a non-record raises a `SerializationError` naming the type."""
    with pytest.raises(SerializationError, match="dict"):
        to_dict({"a": 1})  # type: ignore[arg-type]


def test_decoding_into_an_unknown_type_is_refused() -> None:
    """`from_dict` into a type that is not encodable raises, naming it."""
    with pytest.raises(SerializationError, match="Message"):
        from_dict(Message, {})  # type: ignore[type-var]


def test_non_log_records_have_no_tag() -> None:
    """Only the five log records can be written as a log line."""
    with pytest.raises(SerializationError, match="StepRecord"):
        dumps_log_record(_step())  # type: ignore[arg-type]


def test_decoded_records_do_not_alias_the_payload() -> None:
    """Changing the payload after decoding does not change the decoded record."""
    payload = to_dict(RunStarted("r", {"k": "v"}))
    record = from_dict(RunStarted, payload)
    payload["parameter_snapshot"]["k"] = "changed"
    assert record.parameter_snapshot["k"] == "v"


def test_encoded_payloads_do_not_alias_the_record() -> None:
    """Mutating the dict from `to_dict` does not change the record (or the next encoding)."""
    record = RunResult("r", StopReason.AGENT_FINISHED, "x", (_step(),))
    payload = to_dict(record)
    payload["steps"][0]["raw_output"] = "changed"
    snapshot_payload = to_dict(RunStarted("r", {"k": "v"}))
    snapshot_payload["parameter_snapshot"]["k"] = "changed"
    assert to_dict(record)["steps"][0]["raw_output"] == ""
    assert copy.deepcopy(to_dict(record)) == to_dict(record)
