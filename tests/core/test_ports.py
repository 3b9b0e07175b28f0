"""``polyloop.ports`` has the five seams and the call shells exactly as the user's draft."""

from __future__ import annotations

import copy
import dataclasses
import inspect
import pickle
import typing
from collections.abc import Mapping
from typing import Any, Protocol

import pytest

from polyloop import ports
from polyloop.asking import UserAnswered, UserAsked
from polyloop.ports import (
    Action,
    ActionExecutor,
    Decision,
    DecisionParser,
    Event,
    EventSink,
    FinalAnswer,
    InvalidDecision,
    ModelCall,
    ModelClient,
    ParsedReply,
    RunLog,
    RunStore,
    ToolCall,
)
from polyloop.types import (
    ActionOutcome,
    CallNotExecuted,
    Intent,
    Message,
    ModelCallResult,
    ModelReply,
    RunFinished,
    RunStarted,
    StepCompleted,
)

SEED_NAMES = {
    "Action",
    "ActionExecutor",
    "Decision",
    "DecisionParser",
    "Event",
    "EventSink",
    "FinalAnswer",
    "InvalidDecision",
    "ModelCall",
    "ModelClient",
    "ParsedReply",
    "RunLog",
    "RunStore",
    "ToolCall",
}

_PARAMETERS = ("parameters", False, [], Mapping[str, str])

#: For each seam: (method, is a coroutine, [(parameter, annotation)], return annotation),
#: in the draft's order.
EXPECTED_METHODS: dict[type[Any], list[tuple[str, bool, list[tuple[str, object]], object]]] = {
    ModelClient: [("call", True, [("call", ModelCall)], ModelReply), _PARAMETERS],
    DecisionParser: [("parse", False, [("reply", ModelReply)], ParsedReply), _PARAMETERS],
    ActionExecutor: [("execute", True, [("action", Action)], ActionOutcome), _PARAMETERS],
    RunStore: [
        ("write_run_started", True, [("record", RunStarted)], type(None)),
        ("write_intent", True, [("record", Intent)], type(None)),
        ("write_model_call_result", True, [("record", ModelCallResult)], type(None)),
        ("write_step_completed", True, [("record", StepCompleted)], type(None)),
        ("read_log", True, [("run_id", str)], RunLog),
        ("write_run_finished", True, [("record", RunFinished)], type(None)),
        _PARAMETERS,
    ],
    EventSink: [("emit", True, [("event", Event)], type(None)), _PARAMETERS],
}

_NO_DEFAULT = object()

#: The shells' fields: (name, annotation, default) in the draft's order.
EXPECTED_SHELLS: dict[type[Any], list[tuple[str, object, object]]] = {
    ModelCall: [
        ("messages", tuple[Message, ...], _NO_DEFAULT),
        ("call_index", int, _NO_DEFAULT),
        ("run_id", str, _NO_DEFAULT),
        ("result_id", str, _NO_DEFAULT),
        ("binding", Mapping[str, str], _NO_DEFAULT),
        # added after the seed, defaulted: the request's tools in model form (design 0024)
        ("tools", tuple[Mapping[str, object], ...], ()),
    ],
    ToolCall: [("name", str, _NO_DEFAULT), ("arguments", Mapping[str, object], _NO_DEFAULT)],
    Action: [("text", str, _NO_DEFAULT), ("tool_call", ToolCall | None, _NO_DEFAULT)],
    FinalAnswer: [("text", str, _NO_DEFAULT)],
    InvalidDecision: [("explanation", str, _NO_DEFAULT)],
    ParsedReply: [
        ("history_text", str, _NO_DEFAULT),
        ("decision", Action | FinalAnswer | InvalidDecision, _NO_DEFAULT),
        # added after the seed, defaulted: the reply's calls the step does not execute (0045)
        ("calls_not_executed", tuple[CallNotExecuted, ...], ()),
    ],
    RunLog: [
        ("started", RunStarted | None, None),
        ("intents", tuple[Intent, ...], ()),
        ("model_results", tuple[ModelCallResult, ...], ()),
        ("steps", tuple[StepCompleted, ...], ()),
        ("finished", RunFinished | None, None),
        # added after the seed, defaulted: the records of a run that asks a person (design 0037)
        ("asks", tuple[UserAsked, ...], ()),
        ("answers", tuple[UserAnswered, ...], ()),
    ],
}


def _own_methods(protocol: type[Any]) -> list[str]:
    return [
        name
        for name, value in vars(protocol).items()
        if not name.startswith("_") and inspect.isfunction(value)
    ]


def test_module_exports_the_seed_names() -> None:
    """`polyloop.ports.__all__` holds every name of the draft; the additions are `EventKind` and
    the optional capabilities (leases, listing, closing, asking a person, batching, copying a
    fork's records; an executor replaying a fork's prefix)."""
    additions = {
        "BatchedRecord",
        "PrefixReplaying",
        "RecordCopying",
        "EventKind",
        "LeaseHolder",
        "RunLease",
        "RunLeasing",
        "RunListing",
        "RecordBatching",
        "StoreClosing",
        "UserAsking",
        "supports_prefix_replay",
        "supports_record_batching",
        "supports_record_copying",
        "supports_user_asking",
    }
    assert set(ports.__all__) >= SEED_NAMES
    assert additions == set(ports.__all__) - SEED_NAMES
    assert all(hasattr(ports, name) for name in ports.__all__)


def test_decision_is_the_union_of_the_three_branches() -> None:
    """`Decision` is exactly `Action | FinalAnswer | InvalidDecision`."""
    assert Action | FinalAnswer | InvalidDecision == Decision
    assert (Action, FinalAnswer, InvalidDecision) == typing.get_args(Decision)


@pytest.mark.parametrize("protocol", list(EXPECTED_METHODS), ids=lambda p: p.__name__)
def test_seams_are_runtime_checkable_protocols(protocol: type[Any]) -> None:
    """Each seam is a `typing.Protocol` that `isinstance` can check at run time."""
    assert Protocol in protocol.__mro__
    assert not isinstance(object(), protocol)


@pytest.mark.parametrize("protocol", list(EXPECTED_METHODS), ids=lambda p: p.__name__)
def test_seam_methods_names_in_order(protocol: type[Any]) -> None:
    """Each seam declares exactly the draft's methods, in the draft's order."""
    assert [name for name, *_ in EXPECTED_METHODS[protocol]] == _own_methods(protocol)


@pytest.mark.parametrize("protocol", list(EXPECTED_METHODS), ids=lambda p: p.__name__)
def test_seam_methods_sync_or_async(protocol: type[Any]) -> None:
    """`parse` and every `parameters` are synchronous; every other seam method is a coroutine."""
    expected = {name: is_async for name, is_async, *_ in EXPECTED_METHODS[protocol]}
    actual = {name: inspect.iscoroutinefunction(getattr(protocol, name)) for name in expected}
    assert expected == actual


@pytest.mark.parametrize("protocol", list(EXPECTED_METHODS), ids=lambda p: p.__name__)
def test_seam_method_signatures(protocol: type[Any]) -> None:
    """Each seam method takes the draft's one parameter (or none) and returns the draft's type."""
    for name, _, parameters, returns in EXPECTED_METHODS[protocol]:
        method = getattr(protocol, name)
        hints = typing.get_type_hints(method)
        signature = inspect.signature(method)
        assert ["self", *(p for p, _ in parameters)] == list(signature.parameters), name
        assert all(
            p.kind is inspect.Parameter.POSITIONAL_OR_KEYWORD
            and p.default is inspect.Parameter.empty
            for p in signature.parameters.values()
        ), name
        assert {**dict(parameters), "return": returns} == hints, name


class _Client:
    async def call(self, call: ModelCall) -> ModelReply:
        return ModelReply(None, "", "")

    def parameters(self) -> Mapping[str, str]:
        return {}


class _Parser:
    def parse(self, reply: ModelReply) -> ParsedReply:
        return ParsedReply(reply.content, FinalAnswer(reply.content))

    def parameters(self) -> Mapping[str, str]:
        return {}


class _Executor:
    async def execute(self, action: Action) -> ActionOutcome:
        raise NotImplementedError

    def parameters(self) -> Mapping[str, str]:
        return {}


class _Sink:
    async def emit(self, event: Event) -> None:
        return None

    def parameters(self) -> Mapping[str, str]:
        return {}


class _Store:
    async def write_run_started(self, record: RunStarted) -> None:
        return None

    async def write_intent(self, record: Intent) -> None:
        return None

    async def write_model_call_result(self, record: ModelCallResult) -> None:
        return None

    async def write_step_completed(self, record: StepCompleted) -> None:
        return None

    async def read_log(self, run_id: str) -> RunLog:
        return RunLog()

    async def write_run_finished(self, record: RunFinished) -> None:
        return None

    def parameters(self) -> Mapping[str, str]:
        return {}


IMPLEMENTATIONS: list[tuple[type[Any], type[Any]]] = [
    (ModelClient, _Client),
    (DecisionParser, _Parser),
    (ActionExecutor, _Executor),
    (RunStore, _Store),
    (EventSink, _Sink),
]


@pytest.mark.parametrize(
    ("protocol", "implementation"), IMPLEMENTATIONS, ids=[p.__name__ for p, _ in IMPLEMENTATIONS]
)
def test_a_plain_class_satisfies_its_seam_structurally(
    protocol: type[Any], implementation: type[Any]
) -> None:
    """A class that merely has the seam's methods is an instance of the seam (no base class)."""
    assert isinstance(implementation(), protocol)


@pytest.mark.parametrize(
    ("protocol", "implementation"), IMPLEMENTATIONS, ids=[p.__name__ for p, _ in IMPLEMENTATIONS]
)
def test_a_class_missing_parameters_is_not_a_seam(
    protocol: type[Any], implementation: type[Any]
) -> None:
    """Without `parameters()` an object does not satisfy any of the five seams."""
    stripped = type(
        "Stripped", (), {k: v for k, v in vars(implementation).items() if k != "parameters"}
    )
    assert not isinstance(stripped(), protocol)


@pytest.mark.parametrize("cls", list(EXPECTED_SHELLS), ids=lambda cls: cls.__name__)
def test_shell_fields_order_types_and_defaults(cls: type[Any]) -> None:
    """Each shell has the draft's fields in order, with their types and defaults."""
    hints = typing.get_type_hints(cls)
    actual = [
        (f.name, hints[f.name], _NO_DEFAULT if f.default is dataclasses.MISSING else f.default)
        for f in dataclasses.fields(cls)
    ]
    assert EXPECTED_SHELLS[cls] == actual


@pytest.mark.parametrize("cls", [*EXPECTED_SHELLS, Event], ids=lambda cls: cls.__name__)
def test_shells_are_frozen_and_slotted(cls: type[Any]) -> None:
    """Every shell is a frozen dataclass with `__slots__`."""
    assert dataclasses.is_dataclass(cls)
    assert cls.__dataclass_params__.frozen  # type: ignore[attr-defined]
    assert "__slots__" in cls.__dict__


def test_empty_run_log_is_the_default() -> None:
    """`RunLog()` is the log of a run never written: nothing started, no records, not finished."""
    log = RunLog()
    assert (
        log.started,
        log.intents,
        log.model_results,
        log.steps,
        log.finished,
    ) == (None, (), (), (), None)
    assert RunLog() == log


def test_parsed_reply_carries_any_of_the_three_decisions() -> None:
    """A `ParsedReply` holds the history text next to an action, a final answer or an invalid decision."""
    decisions: list[Decision] = [
        Action("print(1)", None),
        Action('{"q":1}', ToolCall("search", {"q": 1})),
        FinalAnswer("42"),
        InvalidDecision("Write one code block."),
    ]
    for decision in decisions:
        assert decision is ParsedReply("text", decision).decision


def test_shells_pickle_and_deep_copy_even_with_read_only_mappings() -> None:
    """A model call and an event carrying read-only mappings (as the loop builds them) can be copied."""
    from types import MappingProxyType

    from polyloop.ports import EventKind

    call = ModelCall((), 0, "run", "model-0", MappingProxyType({"task": "t-1"}))
    event = Event(
        EventKind.RUN_STARTED, "run", 0, injection_entry_ids=MappingProxyType({"skills": ("s1",)})
    )
    plain = Event(EventKind.STEP_STARTED, "run", 3)
    for shell in (call, event, plain, ToolCall("search", {"q": 1}), RunLog()):
        assert pickle.loads(pickle.dumps(shell)) == shell
        assert copy.deepcopy(shell) == shell


#: Every Protocol whose methods an implementation writes: the five seams and the capabilities.
IMPLEMENTED_PROTOCOLS = (
    *EXPECTED_METHODS,
    ports.RunLease,
    ports.RunLeasing,
    ports.RunListing,
    ports.StoreClosing,
)


def _methods_and_properties(protocol: type[Any]) -> dict[str, Any]:
    return {
        name: value.fget if isinstance(value, property) else value
        for name, value in vars(protocol).items()
        if not name.startswith("_") and (inspect.isfunction(value) or isinstance(value, property))
    }


@pytest.mark.parametrize("protocol", IMPLEMENTED_PROTOCOLS, ids=lambda p: p.__name__)
def test_every_seam_method_documents_what_an_implementation_guarantees(
    protocol: type[Any],
) -> None:
    """Each method of each seam and optional capability has its own docstring, where an
    implementer reads what it must guarantee."""
    undocumented = [
        name
        for name, function in _methods_and_properties(protocol).items()
        if not (function.__doc__ or "").strip()
    ]
    assert [] == undocumented


#: The methods whose callers rely on what they raise: each docstring says it ("Raises ...").
RAISING_METHODS = (
    (ports.ModelClient, "call"),
    (ports.DecisionParser, "parse"),
    (ports.ActionExecutor, "execute"),
    (ports.EventSink, "emit"),
    (ports.RunStore, "write_run_started"),
    (ports.RunStore, "write_intent"),
    (ports.RunStore, "write_model_call_result"),
    (ports.RunStore, "write_step_completed"),
    (ports.RunStore, "read_log"),
    (ports.RunStore, "write_run_finished"),
    (ports.RunLeasing, "acquire_run_lease"),
    (ports.RunLeasing, "run_lease_holder"),
    (ports.RunListing, "list_run_ids"),
)

#: The awaited seam calls the contract kit cancels: each says that cancellation passes through.
CANCELLED_BY_THE_KIT = (
    (ports.ModelClient, "call"),
    (ports.ActionExecutor, "execute"),
    (ports.EventSink, "emit"),
)


@pytest.mark.parametrize(
    ("protocol", "method"), RAISING_METHODS, ids=[f"{p.__name__}.{m}" for p, m in RAISING_METHODS]
)
def test_seam_methods_say_what_they_raise(protocol: type[Any], method: str) -> None:
    """The docstring of each method a caller handles the errors of has a "Raises" sentence."""
    assert "Raises" in (getattr(protocol, method).__doc__ or "")


@pytest.mark.parametrize(
    ("protocol", "method"),
    CANCELLED_BY_THE_KIT,
    ids=[f"{p.__name__}.{m}" for p, m in CANCELLED_BY_THE_KIT],
)
def test_cancellable_seam_methods_say_cancellation_passes_through(
    protocol: type[Any], method: str
) -> None:
    """The seam methods the contract kit cancels say that CancelledError must propagate."""
    text = " ".join((getattr(protocol, method).__doc__ or "").split())
    assert "Cancellation passes through" in text
    assert "CancelledError" in text
