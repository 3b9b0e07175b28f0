"""A run that crashes and is resumed, seen as one trace in an OpenTelemetry receiver.

    OTEL_EXPORTER_OTLP_ENDPOINT=http://127.0.0.1:4318 .venv/bin/python examples/otel_example.py

(any OTLP/HTTP receiver: Jaeger, a collector, ``http://127.0.0.1:6006`` for Phoenix; needs
``polyloop-adapters[otel]``). A child process runs a small agent on a SQLite store; its second
action (``fetch``, replay policy ``safe``) kills the process with SIGKILL in the middle. This
process then resumes the run, which makes the action again and finishes. Both invocations land
in one trace, whose id is printed: the resumed ``invoke_agent`` span says
``polyloop.resume.move = execute_action_again`` and its ``execute_tool fetch`` span is marked
``polyloop.replayed``.
"""

import asyncio
import os
import signal
import subprocess
import sys
import tempfile
from collections.abc import Mapping

from polyloop.adapters.otel import OtlpTelemetry, run_trace_id
from polyloop.session import AgentDefinition, RunRequest, resume, run
from polyloop.stores.sqlite import SqliteRunStore
from polyloop.testing import LineDecisionParser, ScriptedModelClient, reply
from polyloop.tools import Tool, ToolRegistry, ToolSpec
from polyloop.types import (
    Budget,
    Context,
    Message,
    ReplayPolicy,
    Role,
    RunResult,
    SyntheticObservations,
    TextBlock,
)

SCRIPT = ['CALL look {"q": "weather"}', 'CALL fetch {"url": "forecast"}', "FINAL: sunny"]


def tools(telemetry: OtlpTelemetry, crash: bool) -> ToolRegistry:
    def look(arguments: Mapping[str, object]) -> str:
        return f"looked up {arguments['q']}"

    def fetch(arguments: Mapping[str, object]) -> str:
        if crash:
            telemetry.force_flush()  # so that step 0 is in the receiver before the crash
            os.kill(os.getpid(), signal.SIGKILL)
        return f"fetched {arguments['url']}"

    return ToolRegistry(
        [
            Tool(
                ToolSpec("look", "Look something up.", {"type": "object"}, ReplayPolicy.SAFE), look
            ),
            Tool(ToolSpec("fetch", "Fetch a page.", {"type": "object"}, ReplayPolicy.SAFE), fetch),
        ]
    )


def agent(
    database: str, run_id: str, telemetry: OtlpTelemetry, crash: bool
) -> tuple[AgentDefinition, RunRequest]:
    definition = AgentDefinition(
        model_client=ScriptedModelClient([reply(t) for t in SCRIPT], by_call_index=True),
        decision_parser=LineDecisionParser(),
        store=SqliteRunStore(database),
        event_sink=telemetry.event_sink(),
        synthetic_observations=SyntheticObservations("Rejected.", "Env failed.", "Model failed."),
    )
    registry = tools(telemetry, crash)
    request = RunRequest(
        run_id=run_id,
        budget=Budget(
            max_steps=10, max_actions=10, max_consecutive_parse_failures=2, max_prompt_chars=100_000
        ),
        action_executor=registry.executor(),
        tools=registry,
        context=Context(
            run_level=(Message(Role.SYSTEM, (TextBlock("Use the tools, then answer."),)),),
            goal_level=(Message(Role.USER, (TextBlock("What is the weather?"),)),),
        ),
        injections={},
        model_binding={},
        model_replay_policy=ReplayPolicy.SAFE,
        observation_template="Observation: {observation}",
        tool_section_template="Tools: {tools}",
        cancel_grace_seconds=1.0,
    )
    return definition, request


async def crash(database: str, run_id: str) -> None:
    telemetry = OtlpTelemetry(service_name="polyloop-otel-example", metrics=False)
    await run(*agent(database, run_id, telemetry, crash=True))


async def resume_here(database: str, run_id: str, telemetry: OtlpTelemetry) -> RunResult:
    definition, request = agent(database, run_id, telemetry, crash=False)
    try:
        return await resume(definition, request)
    finally:
        definition.store.close()  # type: ignore[attr-defined]


def main() -> int:
    run_id = f"otel-example-{os.getpid()}"
    with tempfile.TemporaryDirectory() as where:
        database = os.path.join(where, "runs.sqlite")
        child = subprocess.run([sys.executable, __file__, "--crash", database, run_id], check=False)
        if child.returncode != -signal.SIGKILL:
            print(f"the crashing run ended with status {child.returncode}", file=sys.stderr)
            return 1
        telemetry = OtlpTelemetry(service_name="polyloop-otel-example", metrics=False)
        result = asyncio.run(resume_here(database, run_id, telemetry))
        telemetry.shutdown()
    print(f"run {run_id}: {result.stop_reason.value} after {len(result.steps)} steps")
    print(f"trace {run_trace_id(run_id):032x}")
    if telemetry.export_failures:
        print(f"{telemetry.export_failures} export(s) failed: is the receiver up?", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    if sys.argv[1:2] == ["--crash"]:
        asyncio.run(crash(sys.argv[2], sys.argv[3]))
    else:
        sys.exit(main())
