"""``AgentDefinition`` and ``RunRequest``: the parameter snapshot and the cheap construction checks."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping
from typing import Any

import pytest

from polyloop.errors import ConfigurationError
from polyloop.ports import Action, Event, ModelCall, ParsedReply, RunLog
from polyloop.session import AgentDefinition, RunRequest, merge_snapshots, run_snapshot
from polyloop.tools import Tool, ToolRegistry, ToolSpec
from polyloop.types import (
    ActionOutcome,
    Budget,
    Context,
    Injection,
    Intent,
    Message,
    ModelCallResult,
    ModelReply,
    ReplayPolicy,
    Role,
    RunFinished,
    RunStarted,
    StepCompleted,
    SyntheticObservations,
    TextBlock,
)

DEFINITION_PREFIXES = (
    "model_client.",
    "decision_parser.",
    "store.",
    "event_sink.",
    "synthetic_observations.",
)
REQUEST_PREFIXES = ("request.", "action_executor.")


class _Explodes(AssertionError):
    """Raised by a seam that must not be touched during construction."""


class _Seam:
    """A seam with fixed parameters; any I/O-like method raises if called."""

    def __init__(self, parameters: Mapping[str, Any] | None = None, *, explode: bool = False):
        self._parameters = dict(parameters or {})
        self._explode = explode

    def parameters(self) -> Mapping[str, str]:
        if self._explode:
            raise _Explodes("parameters() was called")
        return self._parameters


class _Client(_Seam):
    async def call(self, call: ModelCall) -> ModelReply:
        raise _Explodes("call() was called")


class _Parser(_Seam):
    def parse(self, reply: ModelReply) -> ParsedReply:
        raise _Explodes("parse() was called")


class _Store(_Seam):
    async def write_run_started(self, record: RunStarted) -> None:
        raise _Explodes("write_run_started() was called")

    async def write_intent(self, record: Intent) -> None:
        raise _Explodes("write_intent() was called")

    async def write_model_call_result(self, record: ModelCallResult) -> None:
        raise _Explodes("write_model_call_result() was called")

    async def write_step_completed(self, record: StepCompleted) -> None:
        raise _Explodes("write_step_completed() was called")

    async def read_log(self, run_id: str) -> RunLog:
        raise _Explodes("read_log() was called")

    async def write_run_finished(self, record: RunFinished) -> None:
        raise _Explodes("write_run_finished() was called")


class _Sink(_Seam):
    async def emit(self, event: Event) -> None:
        raise _Explodes("emit() was called")


class _Executor(_Seam):
    async def execute(self, action: Action) -> ActionOutcome:
        raise _Explodes("execute() was called")


SYNTHETIC = SyntheticObservations(
    action_rejected="Rejected: that tool call is not valid.",
    env_failed="The environment failed.",
    model_call_failed="The model could not be reached.",
)
BUDGET = Budget(max_steps=8, max_actions=4, max_consecutive_parse_failures=3, max_prompt_chars=9000)
CONTEXT = Context(
    run_level=(Message(Role.SYSTEM, (TextBlock("Be careful."),)),),
    goal_level=(Message(Role.USER, (TextBlock("Sum 1 and 2."),)),),
)


def _definition(**seams: Any) -> AgentDefinition:
    fields: dict[str, Any] = {
        "model_client": _Client({"model": "m-1", "temperature": "0"}),
        "decision_parser": _Parser({"kind": "code"}),
        "store": _Store({"kind": "memory"}),
        "event_sink": _Sink({"kind": "null"}),
        "synthetic_observations": SYNTHETIC,
    }
    fields.update(seams)
    return AgentDefinition(**fields)


def _tools() -> ToolRegistry:
    return ToolRegistry(
        [
            Tool(
                ToolSpec("search", "Search.", {"type": "object"}, ReplayPolicy.SAFE),
                lambda a: "found",
            ),
            Tool(
                ToolSpec("submit", "Submit.", {"type": "object"}, completes_run=True),
                lambda a: "ok",
            ),
        ]
    )


def _request(**changes: Any) -> RunRequest:
    tools = changes.pop("tools", ToolRegistry())
    fields: dict[str, Any] = {
        "run_id": "run-1",
        "budget": BUDGET,
        "action_executor": _Executor({"session": "s-1", "stateful": "true"}),
        "tools": tools,
        "context": CONTEXT,
        "injections": {"skills": (Injection("skill-1", "Use print."),)},
        "model_binding": {"task": "t-7", "attempt": "2"},
        "model_replay_policy": ReplayPolicy.NEVER,
        "observation_template": "Observation:\n{observation}",
        "tool_section_template": "Tools: {tools}",
        "cancel_grace_seconds": 2.5,
    }
    fields.update(changes)
    return RunRequest(**fields)


# ---------------------------------------------------------------------------
# Field lists
# ---------------------------------------------------------------------------


def test_agent_definition_has_the_seed_fields() -> None:
    """`AgentDefinition` has exactly the five fields of design 0006, in order."""
    assert [f.name for f in dataclasses.fields(AgentDefinition)] == [
        "model_client",
        "decision_parser",
        "store",
        "event_sink",
        "synthetic_observations",
    ]


def test_run_request_has_the_seed_fields() -> None:
    """`RunRequest` has the eleven fields of design 0006, in order, none defaulted; fields
    added after the seed follow them, each defaulted (so every seed-era call still builds)."""
    fields = dataclasses.fields(RunRequest)
    added = fields[11:]
    fields = fields[:11]
    assert [(f.name, f.default) for f in added] == [("native_tools", False)]  # design 0046
    assert [f.name for f in fields] == [
        "run_id",
        "budget",
        "action_executor",
        "tools",
        "context",
        "injections",
        "model_binding",
        "model_replay_policy",
        "observation_template",
        "tool_section_template",
        "cancel_grace_seconds",
    ]
    assert all(f.default is dataclasses.MISSING for f in fields)


def test_definition_and_request_are_frozen() -> None:
    """Definitions and requests cannot be changed after construction."""
    with pytest.raises(dataclasses.FrozenInstanceError):
        _definition().store = _Store()  # type: ignore[misc]
    with pytest.raises(dataclasses.FrozenInstanceError):
        _request().run_id = "other"  # type: ignore[misc]


# ---------------------------------------------------------------------------
# Snapshots
# ---------------------------------------------------------------------------


def test_definition_snapshot_keys_carry_the_seam_prefixes() -> None:
    """Every key of the definition's snapshot starts with the prefix of the seam that reported it."""
    snapshot = _definition().parameter_snapshot()
    assert all(key.startswith(DEFINITION_PREFIXES) for key in snapshot)
    assert snapshot == {
        "model_client.model": "m-1",
        "model_client.temperature": "0",
        "decision_parser.kind": "code",
        "store.kind": "memory",
        "event_sink.kind": "null",
        "synthetic_observations.action_rejected": SYNTHETIC.action_rejected,
        "synthetic_observations.env_failed": SYNTHETIC.env_failed,
        "synthetic_observations.model_call_failed": SYNTHETIC.model_call_failed,
    }


def test_request_snapshot_keys_carry_request_and_executor_prefixes() -> None:
    """The request's snapshot holds its own fields under `request.` and the executor's under `action_executor.`."""
    snapshot = _request(
        tools=_tools(), action_executor=_Executor({"session": "s-1"})
    ).parameter_snapshot()
    assert all(key.startswith(REQUEST_PREFIXES) for key in snapshot)
    assert snapshot["request.budget.max_steps"] == "8"
    assert snapshot["request.budget.max_actions"] == "4"
    assert snapshot["request.budget.max_consecutive_parse_failures"] == "3"
    assert snapshot["request.budget.max_prompt_chars"] == "9000"
    assert snapshot["request.model_replay_policy"] == "never"
    assert snapshot["request.observation_template"] == "Observation:\n{observation}"
    assert snapshot["request.tool_section_template"] == "Tools: {tools}"
    assert float(snapshot["request.cancel_grace_seconds"]) == 2.5
    assert json.loads(snapshot["request.tools"]) == ["search", "submit"]
    assert snapshot["action_executor.session"] == "s-1"


def test_request_snapshot_holds_every_binding_key() -> None:
    """Every `model_binding` entry enters the snapshot, key and value."""
    binding = {"task": "t-7", "attempt": "2", "ledger": "é-ledger", "": "empty key"}
    snapshot = _request(model_binding=binding).parameter_snapshot()
    for key, value in binding.items():
        assert snapshot[f"request.model_binding.{key}"] == value


def test_request_snapshot_holds_tool_replay_policies_and_completion_flags() -> None:
    """A tool's replay policy and completion flag are parameters: changing them changes the snapshot."""
    snapshot = _request(tools=_tools()).parameter_snapshot()
    assert snapshot["request.tools.search.replay_policy"] == "safe"
    assert snapshot["request.tools.submit.completes_run"] == "true"


def test_request_snapshot_leaves_out_context_and_injections() -> None:
    """Context and injections are run data, not parameters, so no snapshot value contains them."""
    snapshot = _request().parameter_snapshot()
    assert not any("Sum 1 and 2." in value or "Use print." in value for value in snapshot.values())


@pytest.mark.parametrize(
    "change",
    [
        {"budget": dataclasses.replace(BUDGET, max_steps=9)},
        {"model_replay_policy": ReplayPolicy.SAFE},
        {"observation_template": "{observation}"},
        {"tool_section_template": "other"},
        {"cancel_grace_seconds": 3.0},
        {"model_binding": {"task": "t-8", "attempt": "2"}},
        {"action_executor": _Executor({"session": "s-2", "stateful": "true"})},
        {"tools": ToolRegistry([Tool(ToolSpec("x", "", {}), lambda a: "")])},
    ],
    ids=lambda change: next(iter(change)),
)
def test_every_request_parameter_changes_the_snapshot(change: dict[str, Any]) -> None:
    """Changing any parameter of a request changes its snapshot, so resume would notice."""
    if "tools" in change:
        change["tool_section_template"] = "{tools}"
    assert _request(**change).parameter_snapshot() != _request().parameter_snapshot()


def test_request_snapshot_ignores_run_data() -> None:
    """Changing only the context, the injections or the run id leaves the snapshot equal."""
    other = _request(
        run_id="run-2",
        context=Context((), ()),
        injections={"skills": (Injection("skill-2", "Other text."),)},
    )
    assert other.parameter_snapshot() == _request().parameter_snapshot()


def test_run_snapshot_is_the_union_of_definition_and_request() -> None:
    """The snapshot a run records is exactly the definition's and the request's, under all seven prefixes."""
    definition, request = _definition(), _request(tools=_tools())
    snapshot = run_snapshot(definition, request)
    assert dict(snapshot) == {**definition.parameter_snapshot(), **request.parameter_snapshot()}
    assert len(snapshot) == len(definition.parameter_snapshot()) + len(request.parameter_snapshot())
    prefixes = {
        next(p for p in DEFINITION_PREFIXES + REQUEST_PREFIXES if key.startswith(p))
        for key in snapshot
    }
    assert prefixes == set(DEFINITION_PREFIXES + REQUEST_PREFIXES)


def test_merge_refuses_a_key_produced_twice() -> None:
    """A full key produced by two sources raises, naming the key; nothing is overwritten."""
    with pytest.raises(ConfigurationError, match=r"'a\.b\.c'"):
        merge_snapshots(("a.", {"b.c": "1"}), ("a.b.", {"c": "2"}))


def test_merge_refuses_a_duplicate_even_with_equal_values() -> None:
    """A key produced twice raises even when both values agree: the merge never picks silently."""
    with pytest.raises(ConfigurationError, match="twice"):
        merge_snapshots(("x.", {"k": "v"}), ("x.", {"k": "v"}))


def test_merge_prefixes_and_keeps_every_key() -> None:
    """Distinct sources merge into one flat mapping of prefix + key."""
    assert merge_snapshots(("a.", {"k": "1"}), ("b.", {"k": "2"})) == {"a.k": "1", "b.k": "2"}


@pytest.mark.parametrize(
    ("seam", "parameters"),
    [
        ("model_client", {"temperature": 0.0}),
        ("decision_parser", {"version": 1}),
        ("store", {"fsync": True}),
        ("event_sink", {"endpoint": None}),
        ("model_client", {1: "one"}),
    ],
    ids=["float", "int", "bool", "None", "int key"],
)
def test_non_string_parameters_are_refused_naming_the_seam(
    seam: str, parameters: Mapping[Any, Any]
) -> None:
    """A seam reporting a non-string key or value makes the snapshot raise, naming the seam."""
    factory = {
        "model_client": _Client,
        "decision_parser": _Parser,
        "store": _Store,
        "event_sink": _Sink,
    }
    definition = _definition(**{seam: factory[seam](parameters)})
    with pytest.raises(ConfigurationError, match=rf"{seam}.*strings"):
        definition.parameter_snapshot()


def test_non_string_executor_parameters_are_refused() -> None:
    """The executor's parameters must be strings too; the error names `action_executor`."""
    request = _request(action_executor=_Executor({"timeout": 30}))
    with pytest.raises(ConfigurationError, match="action_executor"):
        request.parameter_snapshot()


def test_parameters_that_are_not_a_mapping_are_refused() -> None:
    """`parameters()` must return a mapping; a list is refused, naming the seam."""
    definition = _definition(store=_Store())
    definition.store._parameters = [("kind", "memory")]  # type: ignore[attr-defined]
    with pytest.raises(ConfigurationError, match="store"):
        definition.parameter_snapshot()


def test_snapshot_asks_the_seams_each_time() -> None:
    """The snapshot is read from the seams when asked, not frozen at construction."""
    client = _Client({"model": "m-1"})
    definition = _definition(model_client=client)
    client._parameters["model"] = "m-2"
    assert definition.parameter_snapshot()["model_client.model"] == "m-2"


# ---------------------------------------------------------------------------
# Construction checks
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("template", ["Observation:", "{Observation}", "{ observation }", ""])
def test_request_refuses_an_observation_template_without_its_token(template: str) -> None:
    """An observation template without `{observation}` is refused at construction."""
    with pytest.raises(ConfigurationError, match=r"\{observation\}"):
        _request(observation_template=template)


def test_request_accepts_other_braces_in_the_observation_template() -> None:
    """Templates are replaced literally, so other braces (a JSON example) are fine."""
    request = _request(observation_template='{"result": {observation}} {0} {x}')
    assert "{observation}" in request.observation_template


@pytest.mark.parametrize("template", ["Tools:", "{tool}", ""])
def test_request_with_tools_refuses_a_tool_section_template_without_its_token(
    template: str,
) -> None:
    """With tools, a tool-section template without `{tools}` is refused at construction."""
    with pytest.raises(ConfigurationError, match=r"\{tools\}"):
        _request(tools=_tools(), tool_section_template=template)


@pytest.mark.parametrize("template", ["", "No tools here.", "{tools}"])
def test_tool_less_request_accepts_any_tool_section_template(template: str) -> None:
    """A tool-less run may pass any text as its tool-section template (it is never used)."""
    assert _request(tool_section_template=template).tool_section_template == template


def test_request_refuses_an_executor_from_another_registry() -> None:
    """An executor derived from one registry is refused next to another registry object."""
    with pytest.raises(ConfigurationError, match="different ToolRegistry"):
        _request(tools=_tools(), action_executor=_tools().executor())


def test_request_refuses_an_executor_from_an_equal_but_distinct_registry() -> None:
    """Identity, not equality: a registry restricted to all its own tools is another object."""
    tools = _tools()
    same_tools = tools.restrict_to(tools.names())
    assert same_tools.names() == tools.names()
    with pytest.raises(ConfigurationError, match="different ToolRegistry"):
        _request(tools=tools, action_executor=same_tools.executor())


def test_request_refuses_the_parent_registry_executor_with_a_narrowed_registry() -> None:
    """A phase that narrows its tools must also narrow its executor."""
    tools = _tools()
    with pytest.raises(ConfigurationError, match="different ToolRegistry"):
        _request(tools=tools.restrict_to(["search"]), action_executor=tools.executor())


def test_request_accepts_the_executor_of_its_own_registry() -> None:
    """`tools.executor()` of the very `tools` object is accepted."""
    tools = _tools()
    executor = tools.executor()
    request = _request(tools=tools, action_executor=executor)
    assert request.action_executor is executor


def test_request_accepts_an_executor_not_derived_from_a_registry() -> None:
    """A hand-written executor (dissect's session) is accepted whatever `tools` holds."""
    executor = _Executor({"session": "s-1"})
    assert _request(tools=_tools(), action_executor=executor).action_executor is executor


def test_request_refuses_an_object_that_is_not_an_executor() -> None:
    """An object without `execute` and `parameters` is not an executor."""
    with pytest.raises(ConfigurationError, match="ActionExecutor"):
        _request(action_executor=object())


def test_request_refuses_a_missing_replay_policy() -> None:
    """The model replay policy has no default and must be a `ReplayPolicy`."""
    with pytest.raises(ConfigurationError, match="model_replay_policy"):
        _request(model_replay_policy="safe")


def test_request_refuses_non_string_binding_values() -> None:
    """`model_binding` maps strings to strings."""
    with pytest.raises(ConfigurationError, match="model_binding"):
        _request(model_binding={"attempt": 2})


@pytest.mark.parametrize("grace", [-1.0, float("nan"), float("inf"), True, "2"])
def test_request_refuses_an_impossible_cancel_grace(grace: object) -> None:
    """`cancel_grace_seconds` is a finite number of seconds, at least zero."""
    with pytest.raises(ConfigurationError, match="cancel_grace_seconds"):
        _request(cancel_grace_seconds=grace)


def test_request_copies_its_mappings() -> None:
    """Changing the caller's binding or injections after construction does not change the request."""
    binding = {"task": "t-7"}
    injections: dict[str, tuple[Injection, ...]] = {"skills": ()}
    request = _request(model_binding=binding, injections=injections)
    binding["task"] = "t-8"
    injections["other"] = (Injection("x", "y"),)
    assert dict(request.model_binding) == {"task": "t-7"}
    assert list(request.injections) == ["skills"]


def test_definition_refuses_an_object_that_is_not_its_seam() -> None:
    """A definition seam that lacks the Protocol's methods is refused, naming the field."""
    with pytest.raises(ConfigurationError, match="store"):
        _definition(store=_Client())


def test_construction_calls_no_seam() -> None:
    """Building a definition and a request calls no seam method, not even `parameters()`."""
    definition = _definition(
        model_client=_Client(explode=True),
        decision_parser=_Parser(explode=True),
        store=_Store(explode=True),
        event_sink=_Sink(explode=True),
    )
    request = _request(action_executor=_Executor(explode=True), tools=_tools())
    assert definition.store is not None
    assert request.run_id == "run-1"
    with pytest.raises(_Explodes):
        definition.parameter_snapshot()
    with pytest.raises(_Explodes):
        request.parameter_snapshot()
