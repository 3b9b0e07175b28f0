"""Against a real OTLP receiver (Arize Phoenix on loopback): runs that were SIGKILLed inside an
action, resumed in another process and finished, read back from the receiver's REST API — one
trace per run, the tree, the names, the attributes, and the replayed and refused marks."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

from polyloop.adapters.gateway import GatewayModelClient
from polyloop.adapters.otel import OtlpTelemetry, run_trace_id
from polyloop.session import resume, run
from polyloop.stores.memory import MemoryRunStore
from polyloop.stores.sqlite import SqliteRunStore
from polyloop.types import StopReason
from tests.adapters.gateway._server import FakeGateway, serve_in_thread
from tests.adapters.otel._agent import definition as agent_definition
from tests.adapters.otel._agent import request
from tests.adapters.otel._child import definition, telemetry_for
from tests.stores import _agent

pytestmark = [pytest.mark.slow, pytest.mark.crash]

ROOT = Path(__file__).resolve().parents[3]
Span = Mapping[str, Any]


def _spans(url: str, run_id: str, *, roots_only: bool = False) -> list[Span]:
    """Every span Phoenix holds for the run's trace (only its root spans: what the Spans view
    lists)."""
    query = {"trace_id": f"{run_trace_id(run_id):032x}", "limit": 1000}
    if roots_only:
        query["parent_id"] = "null"
    where = f"{url}/v1/projects/default/spans?{urllib.parse.urlencode(query)}"
    with urllib.request.urlopen(where, timeout=10) as answer:
        body = json.loads(answer.read())
    data: list[Span] = body["data"]
    return data


def _wait_for(url: str, run_id: str, done: Any, timeout: float = 60.0) -> list[Span]:
    deadline = time.monotonic() + timeout
    spans = _spans(url, run_id)
    while not done(spans):
        assert time.monotonic() < deadline, f"Phoenix never got the spans; it has {spans!r}"
        time.sleep(0.2)
        spans = _spans(url, run_id)
    return spans


def _named(spans: list[Span], name: str, step: int | None = None) -> Span:
    found = [
        s
        for s in spans
        if s["name"] == name and (step is None or s["attributes"].get("polyloop.step") == step)
    ]
    assert 1 == len(found), (name, step, [s["name"] for s in spans])
    return found[0]


def _parent(span: Span) -> str | None:
    parent: str | None = span["parent_id"]
    return parent


def _id(span: Span) -> str:
    span_id: str = span["context"]["span_id"]
    return span_id


def _start_child(*arguments: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "tests.adapters.otel._child", *arguments],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        text=True,
    )


async def _crash_and_resume(
    url: str, where: Path, policy: str
) -> tuple[str, list[Span], StopReason, list[dict[str, object]]]:
    """SIGKILL a driver inside its step-1 action (once the receiver has step 0), resume here."""
    run_id = f"otel-{policy}-{os.getpid()}-{time.time_ns()}"
    database, ledger = str(where / f"{policy}.db"), str(where / f"{policy}.ledger")
    child = _start_child(url, database, run_id, policy, ledger)
    try:
        assert child.stdout is not None
        line = await asyncio.to_thread(child.stdout.readline)
        assert "in-action" == line.strip()
        # Step 0 has ended in the crashing process; its spans leave within 50 ms.
        await asyncio.to_thread(
            _wait_for,
            url,
            run_id,
            lambda spans: any(s["name"] == "execute_tool pay" for s in spans),
        )
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait(timeout=30)
        assert child.stdout is not None
        child.stdout.close()
    assert -signal.SIGKILL == child.returncode

    telemetry = telemetry_for(url)
    store = SqliteRunStore(database)
    try:
        tools = _agent.ledger_tools(ledger, run_id, "resumer")
        result = await resume(
            definition(store, policy, telemetry), _agent.ledger_request(run_id, tools)
        )
    finally:
        store.close()
        await asyncio.to_thread(telemetry.shutdown)
    assert 0 == telemetry.export_failures
    spans = await asyncio.to_thread(
        _wait_for,
        url,
        run_id,
        lambda spans: any(s["name"] == "invoke_agent polyloop" for s in spans),
    )
    return run_id, spans, result.stop_reason, _agent.ledger_effects(ledger)


def _check_crashed_part(spans: list[Span], run_id: str) -> str:
    """Step 0 of the killed invocation: in the run's trace, under an invocation span that
    never ended (SIGKILL) and so never reached the receiver. Returns that span's id."""
    chat = _named(spans, "chat", 0)
    pay = _named(spans, "execute_tool pay", 0)
    crashed_invocation = _parent(chat)
    assert crashed_invocation is not None
    assert crashed_invocation == _parent(pay)
    assert crashed_invocation not in {_id(s) for s in spans}
    assert {
        "gen_ai.operation.name": "execute_tool",
        "gen_ai.tool.name": "pay",
        "gen_ai.tool.call.id": "action-0",
        "polyloop.replay_policy": "never",
        "polyloop.action.outcome": "executed",
        "polyloop.run_id": run_id,
    }.items() <= pay["attributes"].items()
    return crashed_invocation


async def test_a_killed_and_resumed_run_reads_back_as_one_trace_with_its_replay_marked(
    phoenix_url: str, tmp_path: Path
) -> None:
    """SAFE action in doubt: the resumed invocation (a root of the run's trace) says it made
    the action again; its model call (reused from the log) and action carry the marks; every
    span is in the trace derived from the run id."""
    run_id, spans, stop, effects = await _crash_and_resume(phoenix_url, tmp_path, "safe")
    assert StopReason.AGENT_FINISHED == stop
    assert [("crashed", 0), ("crashed", 1), ("resumer", 1)] == [(e["who"], e["n"]) for e in effects]
    assert {f"{run_trace_id(run_id):032x}"} == {s["context"]["trace_id"] for s in spans}
    crashed_invocation = _check_crashed_part(spans, run_id)

    invocation = _named(spans, "invoke_agent polyloop")
    assert _parent(invocation) is None
    assert [_id(invocation)] == [_id(s) for s in _spans(phoenix_url, run_id, roots_only=True)]
    assert crashed_invocation != _id(invocation)
    assert {
        "gen_ai.operation.name": "invoke_agent",
        "gen_ai.agent.name": "polyloop",
        "polyloop.run_id": run_id,
        "polyloop.resumed": True,
        "polyloop.first_step": 1,
        "polyloop.resume.move": "execute_action_again",
        "polyloop.resume.intent_kind": "action",
        "polyloop.resume.result_id": "action-1",
        "polyloop.resume.replay_policy": "safe",
        "polyloop.stop_reason": "agent_finished",
        "polyloop.steps": 3,
        "polyloop.budget.steps_left": 5,
        "polyloop.budget.actions_left": 6,
    }.items() <= invocation["attributes"].items()
    tool = _named(spans, "execute_tool hang_safe", 1)
    reused, final = _named(spans, "chat", 1), _named(spans, "chat", 2)
    assert _id(invocation) == _parent(tool) == _parent(reused) == _parent(final)
    assert {
        "polyloop.replayed": True,
        "polyloop.replay_policy": "safe",
        "polyloop.action.outcome": "executed",
        "gen_ai.tool.call.id": "action-1",
    }.items() <= tool["attributes"].items()
    assert reused["attributes"]["polyloop.reused"] is True
    assert "polyloop.replayed" not in final["attributes"]
    assert {"UNSET"} == {s["status_code"] for s in spans}
    # Nothing else: 2 spans of the killed step 0, the invocation, 2 chats and 1 tool.
    assert 6 == len(spans)


async def test_a_killed_never_action_reads_back_refused(phoenix_url: str, tmp_path: Path) -> None:
    """NEVER action in doubt: the resumed invocation holds a refused execute_tool span for the
    intent, and both end as resume_state_unknown errors; the action ran only once."""
    run_id, spans, stop, effects = await _crash_and_resume(phoenix_url, tmp_path, "never")
    assert StopReason.RESUME_STATE_UNKNOWN == stop
    assert [("crashed", 0), ("crashed", 1)] == [(e["who"], e["n"]) for e in effects]
    _check_crashed_part(spans, run_id)
    invocation = _named(spans, "invoke_agent polyloop")
    assert {
        "polyloop.resumed": True,
        "polyloop.resume.move": "stop_state_unknown",
        "polyloop.resume.replay_policy": "never",
        "polyloop.stop_reason": "resume_state_unknown",
        "error.type": "resume_state_unknown",
    }.items() <= invocation["attributes"].items()
    assert "ERROR" == invocation["status_code"]
    refused = _named(spans, "execute_tool")
    assert _id(invocation) == _parent(refused)
    assert "ERROR" == refused["status_code"]
    assert {
        "polyloop.refused": True,
        "polyloop.action.outcome": "refused",
        "polyloop.replay_policy": "never",
        "polyloop.result_id": "action-1",
        "polyloop.step": 1,
    }.items() <= refused["attributes"].items()
    assert 4 == len(spans)


def test_the_example_shows_its_crashed_and_resumed_run_as_one_trace(phoenix_url: str) -> None:
    """examples/otel_example.py, pointed at the receiver by the standard variable: the run
    killed with SIGKILL inside its second action and resumed here is one trace, with the
    crashed step and the replayed action."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "POLYLOOP_"))}
    done = subprocess.run(
        [sys.executable, str(ROOT / "examples" / "otel_example.py")],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env={**env, "OTEL_EXPORTER_OTLP_ENDPOINT": phoenix_url},
    )
    assert 0 == done.returncode, done.stderr
    first, second = done.stdout.strip().splitlines()
    run_id = first.split()[1].rstrip(":")
    assert f"run {run_id}: agent_finished after 3 steps" == first
    assert f"trace {run_trace_id(run_id):032x}" == second
    spans = _wait_for(phoenix_url, run_id, lambda spans: len(spans) >= 6)
    assert [
        "chat",
        "chat",
        "chat",
        "execute_tool fetch",
        "execute_tool look",
        "invoke_agent polyloop",
    ] == sorted(s["name"] for s in spans)
    invocation = _named(spans, "invoke_agent polyloop")
    assert "execute_action_again" == invocation["attributes"]["polyloop.resume.move"]
    assert _named(spans, "execute_tool fetch")["attributes"]["polyloop.replayed"] is True
    assert _parent(_named(spans, "execute_tool look")) != _id(invocation)


async def test_a_run_reads_back_as_root_invocation_with_prompts_errors_and_timed_parts(
    phoenix_url: str,
) -> None:
    """A run through the gateway client with content capture on, its second tool raising:
    Phoenix lists the invocation among the trace's root spans (its Spans view), shows the
    messages sent to the model as the call's input messages, the model and provider, the failed
    tool as an error with its exception type, and the model call and the action each at their
    own time."""
    run_id = f"otel-root-{os.getpid()}-{time.time_ns()}"
    served = FakeGateway()
    served.scripts["phoenix"] = ['CALL lookup {"q": "otel"}', "CALL broken {}", "FINAL: done"]
    telemetry = OtlpTelemetry(phoenix_url, export_interval_seconds=0.05, metrics=False)
    try:
        with serve_in_thread(served) as root:
            async with GatewayModelClient(
                f"{root}/scripted/phoenix/v1", "served-model", api_key="sk-phoenix-test-31"
            ) as client:
                sink = telemetry.event_sink(capture_content=True)
                result = await run(
                    agent_definition(client, MemoryRunStore(), sink), request(run_id)
                )
        assert StopReason.AGENT_FINISHED == result.stop_reason
    finally:
        await asyncio.to_thread(telemetry.shutdown)
    assert 0 == telemetry.export_failures
    spans = await asyncio.to_thread(_wait_for, phoenix_url, run_id, lambda s: len(s) >= 6)
    roots = _spans(phoenix_url, run_id, roots_only=True)
    assert ["invoke_agent polyloop"] == [s["name"] for s in roots]
    invocation = _named(spans, "invoke_agent polyloop")
    assert _parent(invocation) is None
    assert "openai" == invocation["attributes"]["gen_ai.provider.name"]

    chat = _named(spans, "chat served-model", 1)
    attributes = chat["attributes"]
    assert {
        "gen_ai.provider.name": "openai",
        "gen_ai.request.model": "served-model",
        "gen_ai.response.model": "served-model",
        "llm.model_name": "served-model",
        "llm.provider": "openai",
        "llm.input_messages.0.message.role": "system",
        "llm.input_messages.0.message.content": "You are a test agent.",
    }.items() <= attributes.items()
    said = [
        (
            attributes[f"llm.input_messages.{k}.message.role"],
            attributes.get(f"llm.input_messages.{k}.message.content"),
        )
        for k in range(5)
    ]
    assert ("assistant", 'CALL lookup {"q": "otel"}') == said[3]
    assert ("user", "Observation: found otel") == said[4]

    broken = _named(spans, "execute_tool broken", 1)
    assert "ERROR" == broken["status_code"]
    assert "RuntimeError" == broken["attributes"]["error.type"]
    lookup = _named(spans, "execute_tool lookup", 0)
    assert "UNSET" == lookup["status_code"]
    first_chat = _named(spans, "chat served-model", 0)
    assert first_chat["end_time"] <= lookup["start_time"]
    assert lookup["end_time"] <= chat["start_time"]
    everything = json.dumps(spans)
    assert "sk-phoenix-test-31" not in everything
