"""Every one of the ten stop reasons is reachable, with the step records the spec prescribes."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping

import pytest

from polyloop.ports import Action
from polyloop.session import resume, run
from polyloop.stores.memory import MemoryRunStore
from polyloop.testing import ScriptedExecutor, reply
from polyloop.types import (
    ActionOutcome,
    ActionStatus,
    Budget,
    ReplayPolicy,
    StopReason,
)
from tests.loop_kit import (
    SYNTHETIC,
    Crash,
    CrashingStore,
    Effects,
    make_definition,
    make_request,
    replies,
    scenario_tools,
    ticking_clock,
)


async def test_agent_finished_records_final_answer_step() -> None:
    """A final answer stops `agent_finished` with an empty, non-synthetic observation."""
    definition = make_definition(replies("FINAL: 42"))
    result = await run(definition, make_request("r"), clock=ticking_clock())
    assert StopReason.AGENT_FINISHED == result.stop_reason
    assert "42" == result.final_answer
    (step,) = result.steps
    assert (step.parse_ok, step.action, step.observation) == (True, None, "")
    assert step.observation_is_synthetic is False
    assert step.action_status is None
    assert (step.content_chars, step.thinking_chars, step.call_id) == (9, 0, "c0")
    assert "FINAL: 42" == step.raw_output


async def test_task_completed_by_completes_run_tool() -> None:
    """An executed `completes_run` tool stops `task_completed`."""
    effects = Effects()
    tools = scenario_tools(effects)
    definition = make_definition(replies("CALL submit {}"))
    result = await run(definition, make_request("r", tools=tools))
    assert StopReason.TASK_COMPLETED == result.stop_reason
    (step,) = result.steps
    assert ActionStatus.EXECUTED == step.action_status
    assert ("submit", "{}") == (step.tool_name, step.tool_arguments)
    assert 1 == effects.counts["submit"]
    assert result.final_answer is None


async def test_task_completed_by_env_reported_completion() -> None:
    """An executed action whose outcome reports completion stops `task_completed`."""
    executor = ScriptedExecutor(
        lambda code: ActionOutcome(ActionStatus.EXECUTED, "all tests pass", False, True, 0)
    )
    definition = make_definition(replies("RUN: solve()"))
    result = await run(definition, make_request("r", executor=executor))
    assert StopReason.TASK_COMPLETED == result.stop_reason
    (step,) = result.steps
    assert step.env_reported_completion is True
    assert ("solve()", None, None) == (step.action, step.tool_name, step.tool_arguments)


async def test_step_budget_stops_before_the_next_model_call() -> None:
    """With max_steps=2 exactly two steps are recorded and no third model call is made."""
    definition = make_definition(replies("RUN: a", "RUN: b", "RUN: c"))
    request = make_request("r", executor=ScriptedExecutor(), budget=Budget(2, 10, 3, 1_000_000))
    result = await run(definition, request)
    assert StopReason.STEP_BUDGET == result.stop_reason
    assert [0, 1] == [s.step_idx for s in result.steps]
    assert 2 == len(definition.model_client.calls)  # type: ignore[attr-defined]


async def test_action_budget_counts_executed_actions_only() -> None:
    """Rejected calls count toward steps, not actions; `action_budget` fires on executed ones."""
    effects = Effects()
    tools = scenario_tools(effects)
    definition = make_definition(
        replies(
            "CALL unknown {}", "CALL noop {}", "CALL unknown {}", "CALL noop {}", "CALL noop {}"
        )
    )
    request = make_request("r", tools=tools, budget=Budget(10, 2, 3, 1_000_000))
    result = await run(definition, request)
    assert StopReason.ACTION_BUDGET == result.stop_reason
    assert [
        ActionStatus.NOT_EXECUTED,
        ActionStatus.EXECUTED,
        ActionStatus.NOT_EXECUTED,
        ActionStatus.EXECUTED,
    ] == [s.action_status for s in result.steps]


async def test_parse_failed_repeatedly_after_consecutive_failures() -> None:
    """Parse failures in a row reaching the limit stop the run; a parsed step resets the count."""
    definition = make_definition(replies("??", "??", "RUN: x", "??", "??", "??"))
    request = make_request("r", executor=ScriptedExecutor(), budget=Budget(10, 10, 3, 1_000_000))
    result = await run(definition, request)
    assert StopReason.PARSE_FAILED_REPEATEDLY == result.stop_reason
    assert [False, False, True, False, False, False] == [s.parse_ok for s in result.steps]
    failure = result.steps[-1]
    assert failure.parse_error == failure.observation
    assert failure.parse_error is not None
    assert failure.observation_is_synthetic is True
    assert failure.action_status is None


async def test_context_overflow_records_no_step() -> None:
    """A prompt over max_prompt_chars stops `context_overflow` without calling the model."""
    definition = make_definition(replies("RUN: a", "RUN: b"))
    first = await run(definition, make_request("probe", executor=ScriptedExecutor()))
    limit = first.steps[0].prompt_chars + 5  # step 0 fits, step 1 (with history) does not
    definition = make_definition(replies("RUN: a", "RUN: b"))
    request = make_request("r", executor=ScriptedExecutor(), budget=Budget(10, 10, 3, limit))
    result = await run(definition, request)
    assert StopReason.CONTEXT_OVERFLOW == result.stop_reason
    assert 1 == len(result.steps)
    assert 1 == len(definition.model_client.calls)  # type: ignore[attr-defined]


async def test_env_error_when_executor_raises() -> None:
    """An executor that raises yields an ENV_ERROR step with the synthetic env text."""

    def broken(code: str) -> str:
        raise RuntimeError("sandbox gone")

    definition = make_definition(replies("RUN: x"))
    result = await run(definition, make_request("r", executor=ScriptedExecutor(broken)))
    assert StopReason.ENV_ERROR == result.stop_reason
    (step,) = result.steps
    assert ActionStatus.ENV_ERROR == step.action_status
    assert SYNTHETIC.env_failed == step.observation
    assert step.observation_is_synthetic is True
    log = await definition.store.read_log("r")
    assert log.steps[0].action_outcome is not None
    assert "action-0" == log.steps[0].result_id


async def test_env_error_when_executor_returns_env_error() -> None:
    """An executor may return ENV_ERROR itself: same stop, its own observation kept."""
    executor = ScriptedExecutor(
        lambda code: ActionOutcome(ActionStatus.ENV_ERROR, "container died", False, False, 0)
    )
    result = await run(make_definition(replies("RUN: x")), make_request("r", executor=executor))
    assert StopReason.ENV_ERROR == result.stop_reason
    assert "container died" == result.steps[0].observation


async def test_llm_error_records_a_synthetic_step() -> None:
    """A model call that raises records the failure and an `llm_error` step with zero sizes."""
    definition = make_definition([ConnectionError("gateway unreachable")])
    result = await run(definition, make_request("r"))
    assert StopReason.LLM_ERROR == result.stop_reason
    (step,) = result.steps
    assert ("", False, None, None) == (
        step.raw_output,
        step.parse_ok,
        step.parse_error,
        step.call_id,
    )
    assert (0, 0) == (step.content_chars, step.thinking_chars)
    assert SYNTHETIC.model_call_failed == step.observation
    assert step.observation_is_synthetic is True
    log = await definition.store.read_log("r")
    (result_record,) = log.model_results
    assert result_record.reply is None
    assert "ConnectionError: gateway unreachable" == result_record.failure


class _BlockingExecutor:
    def __init__(self) -> None:
        self.started = asyncio.Event()

    async def execute(self, action: Action) -> ActionOutcome:
        self.started.set()
        await asyncio.Event().wait()
        raise AssertionError("unreachable")

    def parameters(self) -> Mapping[str, str]:
        return {"kind": "blocking"}


async def test_cancelled_records_finish_and_propagates() -> None:
    """Cancelling a run mid-action writes RunFinished(cancelled) and re-raises CancelledError."""
    executor = _BlockingExecutor()
    definition = make_definition(replies("RUN: forever"))
    task = asyncio.create_task(run(definition, make_request("r", executor=executor)))
    await executor.started.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    log = await definition.store.read_log("r")
    assert log.finished is not None
    assert StopReason.CANCELLED == log.finished.result.stop_reason


async def test_resume_state_unknown_for_interrupted_never_action() -> None:
    """A `never` action announced but not settled stops `resume_state_unknown` on resume."""
    effects = Effects()
    tools = scenario_tools(effects)
    memory = MemoryRunStore()
    request = make_request("r", tools=tools)
    # writes: RunStarted, model intent, model result, action intent -> crash before executing
    crashing = make_definition(replies('CALL write {"path": "x"}'), CrashingStore(memory, 4))
    with pytest.raises(Crash):
        await run(crashing, request)
    result = await resume(make_definition(replies('CALL write {"path": "x"}'), memory), request)
    assert StopReason.RESUME_STATE_UNKNOWN == result.stop_reason
    assert () == result.steps
    assert 0 == effects.counts["write"]


async def test_model_replay_policy_never_stops_on_unsettled_model_call() -> None:
    """An unsettled model call with model_replay_policy=never is not made again."""
    memory = MemoryRunStore()
    request = make_request("r", model_replay_policy=ReplayPolicy.NEVER)
    with pytest.raises(Crash):
        await run(make_definition(replies("FINAL: x"), CrashingStore(memory, 2)), request)
    fresh = make_definition(replies("FINAL: x"), memory)
    result = await resume(fresh, request)
    assert StopReason.RESUME_STATE_UNKNOWN == result.stop_reason
    assert [] == fresh.model_client.calls  # type: ignore[attr-defined]


def test_all_ten_stop_reasons_are_covered_here() -> None:
    """This module has a test for each value of StopReason (guards against a silent gap)."""
    import inspect
    import sys

    source = inspect.getsource(sys.modules[__name__])
    missing = [r.name for r in StopReason if f"StopReason.{r.name} ==" not in source]
    assert [] == missing


def test_reply_helper_rejects_empty_call_id() -> None:
    """The scripted reply helper keeps the ModelReply rule: call_id is never the empty string."""
    with pytest.raises(ValueError, match="call_id"):
        reply("x", call_id="")


async def test_tool_handler_raising_environment_failure_stops_env_error() -> None:
    """A registry tool whose handler raises EnvironmentFailure ends the run `env_error`; any
    other handler exception is an executed action with the error as observation."""
    from polyloop.errors import EnvironmentFailure
    from polyloop.tools import Tool, ToolRegistry, ToolSpec

    def gone(args: object) -> str:
        raise EnvironmentFailure("the document service is down")

    def buggy(args: object) -> str:
        raise KeyError("title")

    tools = ToolRegistry(
        [
            Tool(ToolSpec("fetch", "fetch", {"type": "object"}), gone),
            Tool(ToolSpec("parse", "parse", {"type": "object"}), buggy),
        ]
    )
    definition = make_definition(replies("CALL parse {}", "CALL fetch {}"))
    result = await run(definition, make_request("r", tools=tools))
    assert StopReason.ENV_ERROR == result.stop_reason
    assert ActionStatus.EXECUTED == result.steps[0].action_status
    assert "KeyError" in result.steps[0].observation
    assert ActionStatus.ENV_ERROR == result.steps[1].action_status
    assert SYNTHETIC.env_failed == result.steps[1].observation
