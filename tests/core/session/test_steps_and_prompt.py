"""The order of writes inside a step, how StepRecords are filled, and how prompts grow."""

from __future__ import annotations

import itertools
import json

import pytest

from polyloop.ports import Action, EventKind, ModelCall
from polyloop.session import run
from polyloop.stores.memory import MemoryRunStore
from polyloop.testing import ScriptedExecutor, reply
from polyloop.tools import ToolRegistry
from polyloop.types import (
    ActionStatus,
    Injection,
    IntentKind,
    ReplayPolicy,
    Role,
    StepCompleted,
    StopReason,
)
from tests.loop_kit import (
    SCENARIO,
    SYNTHETIC,
    Effects,
    MixedExecutor,
    RecordingStore,
    make_definition,
    make_request,
    replies,
    scenario_tools,
    ticking_clock,
)


async def _scenario_run() -> tuple[RecordingStore, object, Effects]:
    effects = Effects()
    tools = scenario_tools(effects)
    store = RecordingStore(MemoryRunStore())
    definition = make_definition(replies(*SCENARIO), store)
    request = make_request("r", tools=tools, executor=MixedExecutor(tools, effects))
    result = await run(definition, request, clock=ticking_clock())
    return store, result, effects


async def test_writes_reach_the_store_in_the_specified_order() -> None:
    """Per step: model intent, model result, [action intent], step completed; then RunFinished."""
    store, result, _ = await _scenario_run()
    names = [name.removeprefix("write_") for name, _ in store.writes]
    step = ["intent", "model_call_result"]
    action, plain = [*step, "intent", "step_completed"], [*step, "step_completed"]
    expected = [
        "run_started",
        *action,  # write (never)
        *action,  # read (safe)
        *action,  # tool-less code
        *plain,  # rejected call: no action intent
        *plain,  # parse failure
        *action,  # submit
        "run_finished",
    ]
    assert expected == names
    assert StopReason.TASK_COMPLETED == result.stop_reason  # type: ignore[attr-defined]


async def test_step_completed_carries_result_id_exactly_when_an_action_intent_was_written() -> None:
    """`result_id`/`action_outcome` are set on a StepCompleted iff its step wrote an action intent."""
    store, _, _ = await _scenario_run()
    action_intents = {
        record.call_index: record.result_id  # type: ignore[attr-defined]
        for name, record in store.writes
        if name == "write_intent" and record.kind is IntentKind.ACTION  # type: ignore[attr-defined]
    }
    completed = [r for n, r in store.writes if n == "write_step_completed"]
    assert 6 == len(completed)
    for record in completed:
        assert isinstance(record, StepCompleted)
        assert action_intents.get(record.step.step_idx) == record.result_id
        assert (record.result_id is None) == (record.action_outcome is None)


async def test_intents_carry_replay_policies_and_deterministic_ids() -> None:
    """Model intents carry the request's policy; action intents the tool's (never for tool-less)."""
    store, _, _ = await _scenario_run()
    intents = [r for n, r in store.writes if n == "write_intent"]
    assert [
        ("model_call", 0, "model-0", "safe"),
        ("action", 0, "action-0", "never"),
        ("model_call", 1, "model-1", "safe"),
        ("action", 1, "action-1", "safe"),
        ("model_call", 2, "model-2", "safe"),
        ("action", 2, "action-2", "never"),
        ("model_call", 3, "model-3", "safe"),
        ("model_call", 4, "model-4", "safe"),
        ("model_call", 5, "model-5", "safe"),
        ("action", 5, "action-5", "never"),
    ] == [
        (i.kind.value, i.call_index, i.result_id, i.replay_policy.value)  # type: ignore[attr-defined]
        for i in intents
    ]


async def test_step_records_of_the_scenario() -> None:
    """Each StepRecord field comes from the source the spec names."""
    _, result, effects = await _scenario_run()
    steps = result.steps  # type: ignore[attr-defined]
    assert [0, 1, 2, 3, 4, 5] == [s.step_idx for s in steps]
    assert [
        ActionStatus.EXECUTED,
        ActionStatus.EXECUTED,
        ActionStatus.EXECUTED,
        ActionStatus.NOT_EXECUTED,
        None,
        ActionStatus.EXECUTED,
    ] == [s.action_status for s in steps]
    assert ["write", "read", None, "delete_everything", None, "submit"] == [
        s.tool_name for s in steps
    ]
    assert '{"path":"a.txt"}' == steps[0].tool_arguments
    assert "print(6 * 7)" == steps[2].action
    assert SYNTHETIC.action_rejected == steps[3].observation
    assert steps[3].observation_is_synthetic
    assert steps[3].parse_ok
    assert steps[4].parse_ok is False
    assert steps[4].parse_error == steps[4].observation
    assert [f"c{i}" for i in range(6)] == [s.call_id for s in steps]
    assert [i for i in range(6)] == [s.thinking_chars for s in steps]
    assert [len(t) for t in SCENARIO] == [s.content_chars for s in steps]
    assert all(s.step_wall_ms > 0 for s in steps)
    assert {"write": 1, "read": 1, "code": 1, "submit": 1} == dict(effects.counts)


async def test_messages_of_each_call_begin_with_the_previous_call() -> None:
    """Prefix stability: call k+1's messages start with call k's, and prompt_chars is exact."""
    _, result, _ = await _scenario_run()
    effects = Effects()
    tools = scenario_tools(effects)
    definition = make_definition(replies(*SCENARIO))
    request = make_request("p", tools=tools, executor=MixedExecutor(tools, effects))
    result = await run(definition, request)
    calls: list[ModelCall] = definition.model_client.calls  # type: ignore[attr-defined]
    for earlier, later in itertools.pairwise(calls):
        assert earlier.messages == later.messages[: len(earlier.messages)]
        assert len(later.messages) == len(earlier.messages) + 2
    for call, step in zip(calls, result.steps, strict=True):
        sent = sum(len(block.text) for m in call.messages for block in m.content)
        assert sent == step.prompt_chars
        assert call.call_index == step.step_idx
        assert f"model-{call.call_index}" == call.result_id
        assert {"project": "tests"} == dict(call.binding)


async def test_prompt_layout_tools_injections_goal_history() -> None:
    """Messages: run level, tool section, injections by channel, goal level, then history pairs."""
    effects = Effects()
    tools = scenario_tools(effects).restrict_to(["noop"])
    definition = make_definition(replies("CALL noop {}", "FINAL: done"))
    request = make_request(
        "r",
        tools=tools,
        injections={
            "skills": (Injection("s1", "Skill one {observation}"), Injection("s2", "Skill two")),
            "notes": (Injection("n1", "Note"),),
        },
        observation_template="<obs>{observation}</obs> {tools} {0}",
        tool_section_template="Use these {tools} {observation}",
    )
    await run(definition, request)
    second = definition.model_client.calls[1]  # type: ignore[attr-defined]
    texts = [(m.role, m.content[0].text) for m in second.messages]
    schema = json.dumps(list(tools.schema_for_model()), ensure_ascii=False)
    assert [
        (Role.SYSTEM, "You are a careful agent."),
        (Role.SYSTEM, f"Use these {schema} {{observation}}"),
        (Role.SYSTEM, "Skill one {observation}"),
        (Role.SYSTEM, "Skill two"),
        (Role.SYSTEM, "Note"),
        (Role.USER, "Do the task."),
        (Role.ASSISTANT, "CALL noop {}"),
        (Role.USER, "<obs>ok</obs> {tools} {0}"),
    ] == texts


async def test_tool_less_run_sends_no_tool_section() -> None:
    """With an empty registry no tool-section message is sent, whatever the template says."""
    definition = make_definition(replies("FINAL: x"))
    await run(definition, make_request("r", tool_section_template="no token here"))
    (call,) = definition.model_client.calls  # type: ignore[attr-defined]
    assert ["You are a careful agent.", "Do the task."] == [
        m.content[0].text for m in call.messages
    ]


async def test_injection_entry_ids_travel_in_the_run_started_event() -> None:
    """The run-started event carries the injection entry ids by channel."""
    definition = make_definition(replies("FINAL: x"))
    request = make_request("r", injections={"skills": (Injection("s1", "a"), Injection("s2", "b"))})
    await run(definition, request)
    started = definition.event_sink.events[0]  # type: ignore[attr-defined]
    assert EventKind.RUN_STARTED == started.kind
    assert {"skills": ("s1", "s2")} == dict(started.injection_entry_ids)


async def test_step_wall_ms_uses_the_injected_clock() -> None:
    """step_wall_ms is measured with the keyword-only clock."""
    readings = iter([10.0, 10.25, 11.0, 11.5, 100.0, 100.0])
    definition = make_definition(replies("RUN: a", "FINAL: b"))
    result = await run(
        definition, make_request("r", executor=ScriptedExecutor()), clock=lambda: next(readings)
    )
    assert [250, 500] == [s.step_wall_ms for s in result.steps]


async def test_parser_exception_propagates_without_inventing_a_stop_reason() -> None:
    """A decision parser that raises is a bug: the exception propagates and no RunFinished is written."""

    class Exploding:
        def parse(self, reply: object) -> object:
            raise ZeroDivisionError("parser bug")

        def parameters(self) -> dict[str, str]:
            return {"kind": "exploding"}

    definition = make_definition(replies("x"), parser=Exploding())
    with pytest.raises(ZeroDivisionError):
        await run(definition, make_request("r"))
    log = await definition.store.read_log("r")
    assert log.finished is None
    assert 1 == len(log.model_results)


async def test_tool_less_action_with_registry_executor_is_not_executed() -> None:
    """A code action sent to a registry-derived executor is NOT_EXECUTED, not a fake success."""
    tools = scenario_tools(Effects())
    definition = make_definition(replies("RUN: rm -rf /", "FINAL: ok"))
    result = await run(definition, make_request("r", tools=tools))
    assert ActionStatus.NOT_EXECUTED == result.steps[0].action_status
    assert StopReason.AGENT_FINISHED == result.stop_reason


async def test_model_returning_wrong_type_is_recorded_as_llm_error() -> None:
    """A model client returning something other than a ModelReply is recorded as a failure."""
    definition = make_definition([lambda call: "just a string"])
    result = await run(definition, make_request("r"))
    assert StopReason.LLM_ERROR == result.stop_reason
    log = await definition.store.read_log("r")
    assert log.model_results[0].failure is not None
    assert log.model_results[0].failure.startswith("TypeError")


async def test_registry_executor_and_policy_for_safe_tools() -> None:
    """A registry tool declared safe is announced with replay policy safe."""
    tools = scenario_tools(Effects())
    store = RecordingStore(MemoryRunStore())
    await run(
        make_definition(replies("CALL noop {}", "FINAL: x"), store), make_request("r", tools=tools)
    )
    action_intent = [r for n, r in store.writes if n == "write_intent"][1]
    assert ReplayPolicy.SAFE == action_intent.replay_policy  # type: ignore[attr-defined]


async def test_run_on_existing_run_id_raises_and_writes_nothing() -> None:
    """`run` on a run_id with a log raises and leaves the log untouched."""
    store = RecordingStore(MemoryRunStore())
    await run(make_definition(replies("FINAL: a"), store), make_request("r"))
    before = await store.read_log("r")
    writes = len(store.writes)
    from polyloop.errors import RunAlreadyStartedError

    with pytest.raises(RunAlreadyStartedError, match="resume"):
        await run(make_definition(replies("FINAL: a"), store), make_request("r"))
    assert writes == len(store.writes)
    assert before == await store.read_log("r")


def test_action_shell_is_what_executors_receive() -> None:
    """Sanity of the kit: a reply with RUN: becomes a tool-less Action."""
    from polyloop.testing import LineDecisionParser

    parsed = LineDecisionParser().parse(reply("RUN: x = 1"))
    assert Action(text="x = 1", tool_call=None) == parsed.decision


def test_registry_is_tool_less_by_default() -> None:
    """An empty ToolRegistry is falsy and has no names."""
    assert not ToolRegistry()
    assert () == ToolRegistry().names()
