"""``polyloop.tools``: registration, model-visible schema, validation and dispatch from one registry."""

from __future__ import annotations

import asyncio
import dataclasses
import json
from collections.abc import Mapping
from typing import Any

import pytest

from polyloop.errors import ConfigurationError, PolyLoopError, ToolCallRejected
from polyloop.ports import Action, ActionExecutor, ToolCall
from polyloop.tools import (
    RegistryExecutor,
    Tool,
    ToolRegistry,
    ToolSpec,
    canonical_arguments,
)
from polyloop.types import ActionStatus, ReplayPolicy

SEARCH_SCHEMA: Mapping[str, object] = {
    "type": "object",
    "properties": {
        "query": {"type": "string", "minLength": 1},
        "limit": {"type": "integer", "minimum": 1, "maximum": 50},
        "mode": {"enum": ["fast", "exact"]},
        "tags": {"type": "array", "items": {"type": "string"}, "uniqueItems": True},
        "filter": {
            "type": "object",
            "properties": {"lang": {"type": "string", "pattern": "^[a-z]{2}$"}},
            "required": ["lang"],
            "additionalProperties": False,
        },
    },
    "required": ["query"],
    "additionalProperties": False,
}


def _echo(arguments: Mapping[str, object]) -> str:
    return "echo " + json.dumps(dict(arguments), sort_keys=True)


async def _async_echo(arguments: Mapping[str, object]) -> str:
    await asyncio.sleep(0)
    return "async " + json.dumps(dict(arguments), sort_keys=True)


def _tool(
    name: str, schema: Mapping[str, object] | None = None, handler: Any = _echo, **kw: Any
) -> Tool:
    return Tool(ToolSpec(name, f"The {name} tool.", schema or {"type": "object"}, **kw), handler)


def _registry() -> ToolRegistry:
    return ToolRegistry(
        [
            _tool("search", SEARCH_SCHEMA, replay_policy=ReplayPolicy.SAFE),
            _tool("write", {"type": "object", "properties": {"path": {"type": "string"}}}),
            _tool("submit", completes_run=True),
        ]
    )


def _action(name: str, arguments: Mapping[str, object]) -> Action:
    return Action(text=canonical_arguments(arguments), tool_call=ToolCall(name, arguments))


# ---------------------------------------------------------------------------
# ToolSpec
# ---------------------------------------------------------------------------


def test_tool_spec_fields_and_defaults() -> None:
    """`ToolSpec` has the seed's five fields, then the two defaulted gating flags of design 0037;
    replay policy defaults to NEVER, the three flags to False."""
    assert [f.name for f in dataclasses.fields(ToolSpec)] == [
        "name",
        "description",
        "parameters",
        "replay_policy",
        "completes_run",
        "requires_approval",
        "asks_user",
    ]
    spec = ToolSpec("t", "d", {"type": "object"})
    assert (spec.replay_policy, spec.completes_run) == (ReplayPolicy.NEVER, False)
    assert (spec.requires_approval, spec.asks_user) == (False, False)


def test_tool_spec_is_frozen_and_keeps_its_own_copy_of_the_schema() -> None:
    """A spec cannot be reassigned, and changing the caller's schema dict afterwards does not change it."""
    schema: dict[str, Any] = {"type": "object", "properties": {"a": {"type": "string"}}}
    spec = ToolSpec("t", "d", schema)
    schema["properties"]["a"] = {"type": "integer"}
    assert spec.parameters["properties"]["a"] == {"type": "string"}  # type: ignore[index]
    with pytest.raises(dataclasses.FrozenInstanceError):
        spec.name = "u"  # type: ignore[misc]


def test_tool_spec_accepts_another_specs_schema_as_a_sub_schema() -> None:
    """A spec's read-only `parameters` can be nested inside another spec's schema and still validates."""
    inner = ToolSpec("inner", "d", {"type": "object", "required": ["lang"]})
    outer = ToolSpec("outer", "d", {"type": "object", "properties": {"filter": inner.parameters}})
    registry = ToolRegistry([Tool(outer, _echo)])
    registry.validate(ToolCall("outer", {"filter": {"lang": "de"}}))
    with pytest.raises(ToolCallRejected, match="lang"):
        registry.validate(ToolCall("outer", {"filter": {}}))
    assert registry.schema_for_model()[0]["parameters"] == {
        "type": "object",
        "properties": {"filter": {"type": "object", "required": ["lang"]}},
    }


def test_tool_spec_refuses_an_empty_name() -> None:
    """A tool needs a non-empty name."""
    with pytest.raises(ConfigurationError, match="name"):
        ToolSpec("", "d", {})


def test_tool_spec_refuses_a_plain_string_replay_policy() -> None:
    """`replay_policy` must be a `ReplayPolicy` member."""
    with pytest.raises(ConfigurationError, match="replay_policy"):
        ToolSpec("t", "d", {}, replay_policy="safe")  # type: ignore[arg-type]


def test_tool_spec_can_be_replaced() -> None:
    """`dataclasses.replace` on a spec builds a new valid spec with the same schema."""
    spec = ToolSpec("t", "d", {"type": "object"})
    renamed = dataclasses.replace(spec, name="u")
    assert (renamed.name, dict(renamed.parameters)) == ("u", {"type": "object"})


# ---------------------------------------------------------------------------
# Registration
# ---------------------------------------------------------------------------


def test_registry_refuses_duplicate_names() -> None:
    """Two tools with one name are refused at registration, naming the tool."""
    with pytest.raises(ConfigurationError, match="'search'"):
        ToolRegistry([_tool("search"), _tool("search")])


@pytest.mark.parametrize(
    "schema",
    [
        {"type": "no-such-type"},
        {"type": 5},
        {"properties": {"a": {"minimum": "zero"}}},
        {"required": "query"},
    ],
    ids=["unknown type", "type not a string", "minimum not a number", "required not a list"],
)
def test_registry_refuses_an_invalid_json_schema(schema: Mapping[str, object]) -> None:
    """A tool whose parameter schema is not valid JSON Schema is refused at registration."""
    with pytest.raises(ConfigurationError, match=r"'broken'.*invalid JSON Schema"):
        ToolRegistry([_tool("broken", schema)])


def test_registry_refuses_a_non_callable_handler() -> None:
    """A handler must be callable."""
    with pytest.raises(ConfigurationError, match="handler"):
        ToolRegistry([Tool(ToolSpec("t", "d", {}), "not callable")])  # type: ignore[arg-type]


def test_registry_refuses_something_other_than_tools() -> None:
    """A registry is built from `Tool` objects only."""
    with pytest.raises(ConfigurationError, match="Tool"):
        ToolRegistry([ToolSpec("t", "d", {})])  # type: ignore[list-item]


def test_empty_registry_is_falsy_and_has_no_tools() -> None:
    """`ToolRegistry()` is the registry of a tool-less agent."""
    registry = ToolRegistry()
    assert (
        len(registry),
        bool(registry),
        registry.names(),
        registry.schema_for_model(),
    ) == (0, False, (), [])


def test_registry_is_immutable() -> None:
    """A registry's attributes cannot be reassigned after construction."""
    registry = _registry()
    with pytest.raises(AttributeError):
        registry._tools = {}  # type: ignore[misc]


# ---------------------------------------------------------------------------
# restrict_to
# ---------------------------------------------------------------------------


def test_restrict_to_keeps_registry_order() -> None:
    """`restrict_to` keeps the registry's order, whatever order the names are given in."""
    narrowed = _registry().restrict_to(["submit", "search"])
    assert narrowed.names() == ("search", "submit")
    assert [t["name"] for t in narrowed.schema_for_model()] == ["search", "submit"]


def test_restrict_to_returns_a_new_registry_and_leaves_the_original() -> None:
    """Narrowing builds a new registry; the original still has every tool."""
    registry = _registry()
    narrowed = registry.restrict_to(["write"])
    assert narrowed is not registry
    assert registry.names() == ("search", "write", "submit")
    assert narrowed.names() == ("write",)


def test_restrict_to_names_every_missing_tool() -> None:
    """Asking for tools the registry lacks raises, naming each missing one."""
    with pytest.raises(ConfigurationError) as caught:
        _registry().restrict_to(["search", "delete", "format_disk"])
    message = str(caught.value)
    assert "'delete'" in message
    assert "'format_disk'" in message


def test_restrict_to_refuses_a_single_string() -> None:
    """A string is a collection of characters, so `restrict_to("search")` is refused."""
    with pytest.raises(ConfigurationError, match="restrict_to"):
        _registry().restrict_to("search")


def test_restrict_to_nothing_gives_an_empty_registry() -> None:
    """Narrowing to no names gives an empty registry."""
    assert len(_registry().restrict_to([])) == 0


def test_restricted_registry_validates_and_dispatches_only_its_tools() -> None:
    """A narrowed registry rejects calls to the tools it dropped."""
    narrowed = _registry().restrict_to(["write"])
    narrowed.validate(ToolCall("write", {"path": "a.txt"}))
    with pytest.raises(ToolCallRejected, match="'search'"):
        narrowed.validate(ToolCall("search", {"query": "x"}))


# ---------------------------------------------------------------------------
# Validation
# ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "arguments",
    [
        {"query": "cats"},
        {"query": "cats", "limit": 50},
        {"query": "é", "mode": "exact", "tags": ["a", "b"]},
        {"query": "x", "filter": {"lang": "de"}},
    ],
)
def test_validate_accepts_arguments_that_match_the_schema(arguments: Mapping[str, object]) -> None:
    """Arguments the tool's JSON Schema accepts pass validation."""
    _registry().validate(ToolCall("search", arguments))


@pytest.mark.parametrize(
    ("arguments", "where"),
    [
        ({}, "query"),
        ({"query": ""}, "query"),
        ({"query": 3}, "query"),
        ({"query": "x", "limit": 0}, "limit"),
        ({"query": "x", "limit": 1.5}, "limit"),
        ({"query": "x", "mode": "slow"}, "mode"),
        ({"query": "x", "tags": ["a", "a"]}, "tags"),
        ({"query": "x", "tags": [1]}, "tags/0"),
        ({"query": "x", "filter": {"lang": "deu"}}, "filter/lang"),
        ({"query": "x", "filter": {}}, "lang"),
        ({"query": "x", "filter": {"lang": "de", "x": 1}}, "x"),
        ({"query": "x", "extra": True}, "extra"),
    ],
    ids=[
        "required missing",
        "minLength",
        "wrong type",
        "minimum",
        "integer not float",
        "enum",
        "uniqueItems",
        "items type",
        "pattern",
        "nested required",
        "nested additionalProperties",
        "additionalProperties",
    ],
)
def test_validate_rejects_arguments_that_break_the_schema(
    arguments: Mapping[str, object], where: str
) -> None:
    """Arguments the JSON Schema rejects raise `ToolCallRejected` naming the tool and the place."""
    with pytest.raises(ToolCallRejected) as caught:
        _registry().validate(ToolCall("search", arguments))
    assert "'search'" in str(caught.value)
    assert where in str(caught.value)


def test_validate_rejects_an_unknown_tool() -> None:
    """A call to a tool the registry does not have is rejected, naming it."""
    with pytest.raises(ToolCallRejected, match="'delete'"):
        _registry().validate(ToolCall("delete", {}))


def test_validate_rejects_non_object_arguments() -> None:
    """Arguments must be a JSON object (a mapping)."""
    with pytest.raises(ToolCallRejected, match="JSON object"):
        _registry().validate(ToolCall("write", ["a.txt"]))  # type: ignore[arg-type]


def test_validate_honours_the_declared_draft() -> None:
    """A schema declaring draft-07 is validated by draft-07 rules (tuple `items`)."""
    schema = {
        "$schema": "http://json-schema.org/draft-07/schema#",
        "type": "object",
        "properties": {
            "pair": {"type": "array", "items": [{"type": "string"}, {"type": "integer"}]}
        },
    }
    registry = ToolRegistry([_tool("pair", schema)])
    registry.validate(ToolCall("pair", {"pair": ["a", 1]}))
    with pytest.raises(ToolCallRejected, match="pair"):
        registry.validate(ToolCall("pair", {"pair": [1, "a"]}))


def test_validate_resolves_local_refs() -> None:
    """`$ref` into `$defs` is resolved by the validator."""
    schema = {
        "type": "object",
        "$defs": {"path": {"type": "string", "pattern": "^/"}},
        "properties": {"src": {"$ref": "#/$defs/path"}},
    }
    registry = ToolRegistry([_tool("copy", schema)])
    registry.validate(ToolCall("copy", {"src": "/a"}))
    with pytest.raises(ToolCallRejected, match="src"):
        registry.validate(ToolCall("copy", {"src": "a"}))


def test_tool_call_rejected_is_a_library_error() -> None:
    """`ToolCallRejected` shares the library's base class."""
    assert issubclass(ToolCallRejected, PolyLoopError)


# ---------------------------------------------------------------------------
# schema_for_model and spec_for
# ---------------------------------------------------------------------------


def test_schema_for_model_lists_name_description_parameters() -> None:
    """The model sees each tool's name, description and parameter schema, in registry order."""
    schema = _registry().schema_for_model()
    assert [entry["name"] for entry in schema] == ["search", "write", "submit"]
    assert schema[2] == {
        "name": "submit",
        "description": "The submit tool.",
        "parameters": {"type": "object"},
    }
    assert json.loads(json.dumps(schema)) == schema


def test_schema_for_model_returns_fresh_copies() -> None:
    """Mutating what `schema_for_model` returned does not change the registry or later calls."""
    registry = _registry()
    first = registry.schema_for_model()
    first[0]["parameters"]["properties"]["query"]["type"] = "integer"  # type: ignore[index]
    first[0]["name"] = "hacked"  # type: ignore[index]
    second = registry.schema_for_model()
    assert second[0]["name"] == "search"
    assert second[0]["parameters"]["properties"]["query"]["type"] == "string"  # type: ignore[index]
    registry.validate(ToolCall("search", {"query": "still a string"}))


def test_spec_for_returns_the_spec() -> None:
    """`spec_for` returns the registered spec, with its replay policy and completion flag."""
    registry = _registry()
    search, submit = registry.spec_for("search"), registry.spec_for("submit")
    assert search is not None
    assert submit is not None
    assert (search.replay_policy, search.completes_run) == (ReplayPolicy.SAFE, False)
    assert (submit.replay_policy, submit.completes_run) == (ReplayPolicy.NEVER, True)


def test_spec_for_returns_none_for_an_unknown_name() -> None:
    """Asking for a tool the registry does not have is normal and returns `None`."""
    assert _registry().spec_for("delete") is None
    assert _registry().restrict_to(["write"]).spec_for("search") is None


# ---------------------------------------------------------------------------
# The executor
# ---------------------------------------------------------------------------


def test_executor_is_a_registry_executor_that_remembers_its_registry() -> None:
    """`executor()` returns a `RegistryExecutor` holding that very registry, and it is an `ActionExecutor`."""
    registry = _registry()
    executor = registry.executor()
    assert isinstance(executor, RegistryExecutor)
    assert isinstance(executor, ActionExecutor)
    assert registry is executor.registry


def test_executor_of_a_restricted_registry_remembers_the_restricted_one() -> None:
    """The executor of a narrowed registry remembers the narrowed registry, not its parent."""
    narrowed = _registry().restrict_to(["write"])
    executor = narrowed.executor()
    assert isinstance(executor, RegistryExecutor)
    assert narrowed is executor.registry


def test_executor_parameters_are_strings() -> None:
    """The executor reports string parameters naming the tools it dispatches to."""
    parameters = _registry().executor().parameters()
    assert all(isinstance(k, str) and isinstance(v, str) for k, v in parameters.items())
    assert parameters["tools"] == "search,write,submit"


async def test_executor_dispatches_to_a_sync_handler() -> None:
    """A plain-function handler's text becomes the observation of an executed action."""
    outcome = await _registry().executor().execute(_action("write", {"path": "a.txt"}))
    assert outcome.status == ActionStatus.EXECUTED
    assert outcome.observation == 'echo {"path": "a.txt"}'
    assert (
        outcome.observation_is_synthetic,
        outcome.env_reported_completion,
        outcome.observation_truncated_chars,
    ) == (False, False, 0)


async def test_executor_dispatches_to_an_async_handler() -> None:
    """A coroutine handler is awaited and its text becomes the observation."""
    registry = ToolRegistry([_tool("fetch", handler=_async_echo)])
    outcome = await registry.executor().execute(_action("fetch", {"url": "x"}))
    assert (outcome.status, outcome.observation) == (ActionStatus.EXECUTED, 'async {"url": "x"}')


async def test_executor_passes_the_call_arguments_to_the_handler() -> None:
    """The handler receives the call's arguments."""
    seen: list[Mapping[str, object]] = []

    def record(arguments: Mapping[str, object]) -> str:
        seen.append(arguments)
        return "ok"

    registry = ToolRegistry([_tool("rec", handler=record)])
    await registry.executor().execute(_action("rec", {"a": 1, "b": ["é"]}))
    assert seen == [{"a": 1, "b": ["é"]}]


class _ToolBroke(RuntimeError):
    pass


def _broken(arguments: Mapping[str, object]) -> str:
    raise _ToolBroke("disk full")


async def _async_broken(arguments: Mapping[str, object]) -> str:
    await asyncio.sleep(0)
    raise KeyError("missing")


@pytest.mark.parametrize(
    ("handler", "error_name", "detail"),
    [(_broken, "_ToolBroke", "disk full"), (_async_broken, "KeyError", "missing")],
    ids=["sync", "async"],
)
async def test_a_handler_that_raises_is_an_executed_action_naming_the_error(
    handler: Any, error_name: str, detail: str
) -> None:
    """A handler exception becomes an EXECUTED outcome whose observation names the tool and the error."""
    registry = ToolRegistry([_tool("flaky", handler=handler)])
    outcome = await registry.executor().execute(_action("flaky", {}))
    assert outcome.status == ActionStatus.EXECUTED
    assert outcome.observation_is_synthetic
    assert "'flaky'" in outcome.observation
    assert error_name in outcome.observation
    assert detail in outcome.observation


async def test_a_handler_returning_non_text_is_reported() -> None:
    """A handler that returns something other than a string yields an observation saying so."""
    registry = ToolRegistry([_tool("num", handler=lambda arguments: 42)])
    outcome = await registry.executor().execute(_action("num", {}))
    assert outcome.status == ActionStatus.EXECUTED
    assert "int" in outcome.observation


async def test_a_cancelled_handler_propagates_cancellation() -> None:
    """Cancellation inside a handler is not turned into an observation."""

    async def cancelled(arguments: Mapping[str, object]) -> str:
        raise asyncio.CancelledError

    registry = ToolRegistry([_tool("c", handler=cancelled)])
    with pytest.raises(asyncio.CancelledError):
        await registry.executor().execute(_action("c", {}))


async def test_executor_refuses_an_invalid_call_without_running_the_handler() -> None:
    """A call the schema rejects is NOT_EXECUTED and its handler never runs."""
    ran: list[object] = []
    registry = ToolRegistry(
        [
            _tool(
                "strict",
                {"type": "object", "required": ["x"]},
                handler=lambda a: ran.append(a) or "ran",
            )
        ]
    )
    outcome = await registry.executor().execute(_action("strict", {}))
    assert (outcome.status, ran) == (ActionStatus.NOT_EXECUTED, [])
    assert "'x'" in outcome.observation


async def test_executor_refuses_an_unknown_tool() -> None:
    """A call to a tool the registry lacks is NOT_EXECUTED."""
    outcome = await _registry().executor().execute(_action("delete", {}))
    assert outcome.status == ActionStatus.NOT_EXECUTED
    assert "'delete'" in outcome.observation


async def test_executor_refuses_a_tool_less_action() -> None:
    """An action without a tool call is NOT_EXECUTED by a registry executor."""
    outcome = await _registry().executor().execute(Action("print(1)", None))
    assert outcome.status == ActionStatus.NOT_EXECUTED


# ---------------------------------------------------------------------------
# canonical_arguments
# ---------------------------------------------------------------------------


def test_canonical_arguments_sorts_keys_without_spaces() -> None:
    """Canonical JSON sorts keys at every depth and has no spaces."""
    text = canonical_arguments({"b": 1, "a": {"d": [1, 2], "c": None}})
    assert text == '{"a":{"c":null,"d":[1,2]},"b":1}'


def test_canonical_arguments_keeps_non_ascii() -> None:
    """Non-ASCII text stays as characters, not `\\u` escapes."""
    assert canonical_arguments({"q": "naïve 東京"}) == '{"q":"naïve 東京"}'


def test_canonical_arguments_writes_read_only_mappings_as_objects() -> None:
    """Arguments held in a read-only mapping (any `Mapping`) give the same JSON as a dict."""
    from types import MappingProxyType

    arguments = MappingProxyType({"b": MappingProxyType({"d": (1, 2), "c": None}), "a": "x"})
    assert canonical_arguments(arguments) == '{"a":"x","b":{"c":null,"d":[1,2]}}'


def test_canonical_arguments_never_raises_on_odd_keys_or_values() -> None:
    """Non-string keys and values JSON cannot encode are still recorded, not an exception."""
    text = canonical_arguments({1: "one", "b": {2, 3} - {3}, "a": b"x"})  # type: ignore[dict-item]
    assert text == '{"1":"one","a":"b\'x\'","b":"{2}"}'


def test_canonical_arguments_is_independent_of_insertion_order() -> None:
    """Equal argument mappings built in different orders give the same text."""
    assert canonical_arguments({"x": 1, "y": 2}) == canonical_arguments({"y": 2, "x": 1})
