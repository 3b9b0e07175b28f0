"""Governed runs (polyloop.session) whose tools live in a real MCP server process.

The model is scripted (no model can run here); the tools, the MCP protocol and the server
process are real. A crash is simulated by a store that raises a BaseException right after a
write, as a killed process would stop right there: nothing after that point is written.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from polyloop.adapters.mcp import McpToolBinder, McpToolSet
from polyloop.ports import RunLog
from polyloop.session import AgentDefinition, RunRequest, resume, run
from polyloop.stores.memory import MemoryRunStore
from polyloop.testing import LineDecisionParser, RecordingEventSink, ScriptedModelClient, reply
from polyloop.types import (
    ActionStatus,
    Budget,
    Context,
    Intent,
    IntentKind,
    Message,
    ModelCallResult,
    ReplayPolicy,
    Role,
    RunFinished,
    RunStarted,
    StepCompleted,
    StopReason,
    SyntheticObservations,
    TextBlock,
)
from tests.adapters.mcp.conftest import ledger_lines, server_spec

TEXTS = SyntheticObservations(
    action_rejected="That tool call was rejected.",
    env_failed="The environment failed.",
    model_call_failed="The model call failed.",
)


class SimulatedCrash(BaseException):
    """Stands for the process dying: not an Exception, so nothing in the loop handles it."""


class CrashingStore:
    """A MemoryRunStore that 'dies' once, at a chosen point, after the write it follows."""

    def __init__(self, inner: MemoryRunStore, *, after_action_intent: bool) -> None:
        self.inner = inner
        self._after_action_intent = after_action_intent
        self.armed = True

    async def write_run_started(self, record: RunStarted) -> None:
        await self.inner.write_run_started(record)

    async def write_intent(self, record: Intent) -> None:
        await self.inner.write_intent(record)
        if self.armed and self._after_action_intent and record.kind is IntentKind.ACTION:
            self.armed = False
            raise SimulatedCrash("killed after the action intent, before the tool ran")

    async def write_model_call_result(self, record: ModelCallResult) -> None:
        await self.inner.write_model_call_result(record)

    async def write_step_completed(self, record: StepCompleted) -> None:
        if self.armed and not self._after_action_intent and record.result_id is not None:
            self.armed = False
            raise SimulatedCrash("killed after the tool ran, before its result was written")
        await self.inner.write_step_completed(record)

    async def read_log(self, run_id: str) -> RunLog:
        return await self.inner.read_log(run_id)

    async def write_run_finished(self, record: RunFinished) -> None:
        await self.inner.write_run_finished(record)

    def parameters(self) -> dict[str, str]:
        return dict(self.inner.parameters())


def definition(script: list[str], store: object) -> AgentDefinition:
    return AgentDefinition(
        model_client=ScriptedModelClient([reply(s) for s in script], by_call_index=True),
        decision_parser=LineDecisionParser(),
        store=store,  # type: ignore[arg-type]
        event_sink=RecordingEventSink(),
        synthetic_observations=TEXTS,
    )


def request(run_id: str, toolset: McpToolSet) -> RunRequest:
    return RunRequest(
        run_id=run_id,
        budget=Budget(
            max_steps=8, max_actions=8, max_consecutive_parse_failures=2, max_prompt_chars=50_000
        ),
        action_executor=toolset.executor(),
        tools=toolset.registry,
        context=Context(
            run_level=(Message(Role.SYSTEM, (TextBlock("You use tools."),)),),
            goal_level=(Message(Role.USER, (TextBlock("Record two lines, then finish."),)),),
        ),
        injections={},
        model_binding={"suite": "mcp"},
        model_replay_policy=ReplayPolicy.SAFE,
        observation_template="Observation: {observation}",
        tool_section_template="Tools: {tools}",
        cancel_grace_seconds=1.0,
    )


def call(tool: str, /, **arguments: object) -> str:
    return f"CALL {tool} {json.dumps(arguments)}"


async def test_a_governed_run_calls_the_servers_tools_until_a_completing_tool(
    ledger: Path,
) -> None:
    """A run calls the MCP server's bound tools (a tool error is an executed observation) until the
    completing tool, and the snapshot names the executor."""
    script = [
        call("echo", text="hello"),
        call("fail", reason="wrong path"),
        call("append", line="first"),
        call("finish", summary="done"),
    ]
    store = MemoryRunStore()
    async with McpToolBinder([server_spec(ledger)]) as binder:
        toolset = await binder.bind(
            "testsrv", allow=["echo", "fail", "append", "finish"], completes_run=["finish"]
        )
        result = await run(definition(script, store), request("mcp-ok", toolset))

    assert result.stop_reason is StopReason.TASK_COMPLETED
    observations = [step.observation for step in result.steps]
    assert observations[0] == "echo:hello"
    assert "refused: wrong path" in observations[1]
    assert observations[2:] == ["appended #1", "finished: done"]
    assert [s.action_status for s in result.steps] == [ActionStatus.EXECUTED] * 4
    assert [s.tool_name for s in result.steps] == ["echo", "fail", "append", "finish"]
    assert ledger_lines(ledger) == ["append first"]
    log = await store.read_log("mcp-ok")
    assert log.started is not None
    snapshot = log.started.parameter_snapshot
    assert snapshot["action_executor.kind"] == "mcp"
    assert snapshot["action_executor.tool.append.server"] == "testsrv"
    assert snapshot["request.tools.append.replay_policy"] == "never"


async def test_a_server_dying_mid_run_stops_the_run_with_env_error(ledger: Path) -> None:
    """A server dying mid-run stops the run with env_error naming the server; nothing after it runs."""
    script = [call("append", line="before"), call("die"), call("append", line="never")]
    store = MemoryRunStore()
    async with McpToolBinder([server_spec(ledger)]) as binder:
        toolset = await binder.bind("testsrv", allow=["append", "die"])
        result = await run(definition(script, store), request("mcp-dies", toolset))
    assert result.stop_reason is StopReason.ENV_ERROR
    assert [s.action_status for s in result.steps] == [
        ActionStatus.EXECUTED,
        ActionStatus.ENV_ERROR,
    ]
    assert "'testsrv'" in result.steps[1].observation
    assert ledger_lines(ledger) == ["append before"]


async def test_an_unbound_tool_is_rejected_by_the_loop_without_touching_the_server(
    ledger: Path,
) -> None:
    """A tool not bound is rejected by the loop as not_executed and never reaches the server."""
    script = [call("append", line="not allowed"), "FINAL: gave up"]
    async with McpToolBinder([server_spec(ledger)]) as binder:
        toolset = await binder.bind("testsrv", allow=["echo"])
        result = await run(definition(script, MemoryRunStore()), request("mcp-deny", toolset))
    assert result.stop_reason is StopReason.AGENT_FINISHED
    assert result.steps[0].action_status is ActionStatus.NOT_EXECUTED
    assert result.steps[0].observation == TEXTS.action_rejected
    assert ledger_lines(ledger) == []


@pytest.mark.parametrize("after_action_intent", [True, False], ids=["before-tool", "after-tool"])
async def test_crash_between_intent_and_result_never_tool_is_not_repeated(
    ledger: Path, after_action_intent: bool
) -> None:
    """``append`` is NEVER (the default): resume stops with resume_state_unknown and the
    server is not asked again, whether or not the tool had run before the crash."""
    script = [call("append", line="once"), call("finish", summary="x")]
    memory = MemoryRunStore()
    crashing = CrashingStore(memory, after_action_intent=after_action_intent)
    async with McpToolBinder([server_spec(ledger)]) as binder:
        toolset = await binder.bind("testsrv", allow=["append", "finish"], completes_run=["finish"])
        with pytest.raises(SimulatedCrash):
            await run(definition(script, crashing), request("mcp-crash-never", toolset))
    lines_at_crash = ledger_lines(ledger)
    assert lines_at_crash == ([] if after_action_intent else ["append once"])
    log = await memory.read_log("mcp-crash-never")
    assert [i.kind for i in log.intents] == [IntentKind.MODEL_CALL, IntentKind.ACTION]
    assert log.steps == ()

    # A new process: a new binder starts the server again; the same log is resumed.
    async with McpToolBinder([server_spec(ledger)]) as binder:
        toolset = await binder.bind("testsrv", allow=["append", "finish"], completes_run=["finish"])
        result = await resume(definition(script, memory), request("mcp-crash-never", toolset))
    assert result.stop_reason is StopReason.RESUME_STATE_UNKNOWN
    assert ledger_lines(ledger) == lines_at_crash


@pytest.mark.parametrize("after_action_intent", [True, False], ids=["before-tool", "after-tool"])
async def test_crash_between_intent_and_result_declared_safe_tool_is_executed_again(
    ledger: Path, after_action_intent: bool
) -> None:
    """``set_flag`` declared safe: resume executes it again and the run goes on to finish."""
    script = [call("set_flag", name="ready"), call("finish", summary="flag set")]
    memory = MemoryRunStore()
    crashing = CrashingStore(memory, after_action_intent=after_action_intent)

    async def bound(binder: McpToolBinder) -> McpToolSet:
        return await binder.bind(
            "testsrv",
            allow=["set_flag", "finish"],
            safe=["set_flag"],
            completes_run=["finish"],
        )

    async with McpToolBinder([server_spec(ledger)]) as binder:
        with pytest.raises(SimulatedCrash):
            await run(definition(script, crashing), request("mcp-crash-safe", await bound(binder)))
    calls_before = 0 if after_action_intent else 1
    assert len(ledger_lines(ledger)) == calls_before

    async with McpToolBinder([server_spec(ledger)]) as binder:
        result = await resume(
            definition(script, memory), request("mcp-crash-safe", await bound(binder))
        )
    assert result.stop_reason is StopReason.TASK_COMPLETED
    assert [s.observation for s in result.steps] == ["flag ready set", "finished: flag set"]
    assert ledger_lines(ledger) == ["set_flag ready"] * (calls_before + 1)
    log = await memory.read_log("mcp-crash-safe")
    action_intents = [i for i in log.intents if i.kind is IntentKind.ACTION]
    # The replayed call reused its intent: it was not written a second time.
    assert [(i.call_index, i.replay_policy) for i in action_intents] == [
        (0, ReplayPolicy.SAFE),
        (1, ReplayPolicy.NEVER),
    ]
