"""A full governed run through ``polyloop.session`` on a real sandbox, and resume's refusal to
continue a run on a different session."""

from __future__ import annotations

import pytest

from polyloop.adapters.container import ContainerExecutor, FirstCodeBlockParser
from polyloop.errors import SnapshotMismatchError
from polyloop.ports import Action, FinalAnswer, InvalidDecision, ModelCall
from polyloop.session import AgentDefinition, RunRequest, resume, run
from polyloop.stores.memory import MemoryRunStore
from polyloop.testing import RecordingEventSink, ScriptedModelClient, reply
from polyloop.tools import ToolRegistry
from polyloop.types import (
    ActionStatus,
    Budget,
    Context,
    Message,
    ModelReply,
    ReplayPolicy,
    Role,
    StopReason,
    SyntheticObservations,
    TextBlock,
)
from tests.adapters.container.conftest import ExecutorFactory

SYNTHETIC = SyntheticObservations(
    action_rejected="rejected",
    env_failed="The sandbox failed.",
    model_call_failed="The model call failed.",
)
TASK = Context(
    run_level=(Message(Role.SYSTEM, (TextBlock("You write one Python block per reply."),)),),
    goal_level=(
        Message(Role.USER, (TextBlock("What is the sum of the squares of the primes < 50?"),)),
    ),
)


def request(run_id: str, executor: ContainerExecutor) -> RunRequest:
    return RunRequest(
        run_id=run_id,
        budget=Budget(
            max_steps=6, max_actions=5, max_consecutive_parse_failures=2, max_prompt_chars=50_000
        ),
        action_executor=executor,
        tools=ToolRegistry(),
        context=TASK,
        injections={},
        model_binding={"model": "scripted"},
        model_replay_policy=ReplayPolicy.SAFE,
        observation_template="Output:\n{observation}",
        tool_section_template="",
        cancel_grace_seconds=2.0,
    )


def last_observation(call: ModelCall) -> str:
    text = call.messages[-1].content[0].text
    assert text.startswith("Output:\n"), text
    return text[len("Output:\n") :]


def answer_from_observation(call: ModelCall) -> ModelReply:
    return reply(f"The sandbox printed it. FINAL ANSWER: {last_observation(call).strip()}")


STEP_0 = (
    "First the primes.\n```python\n"
    "primes = [n for n in range(2, 50) if all(n % d for d in range(2, n))]\n"
    "print(len(primes))\n```\n"
    "Output: 999 (I am guessing here)\n```python\nprint('second block is ignored')\n```"
)
STEP_1 = "Now a mistake.\n```python\nprint(undefined_name)\n```"
STEP_2 = "Fix it using the state.\n```python\nsum(p * p for p in primes)\n```"


def test_parser_keeps_only_the_first_block() -> None:
    """FirstCodeBlockParser takes the first code block as the action and drops what follows it from
    history; a final answer and replies without usable code are read as such."""
    parsed = FirstCodeBlockParser().parse(reply(STEP_0))
    assert isinstance(parsed.decision, Action)
    assert parsed.decision.tool_call is None
    assert parsed.decision.text.startswith("primes = [")
    assert parsed.decision.text.endswith("print(len(primes))")
    assert parsed.history_text.endswith("print(len(primes))\n```")
    assert "999" not in parsed.history_text
    final = FirstCodeBlockParser().parse(reply("Done. FINAL ANSWER: 42"))
    assert final.decision == FinalAnswer("42")
    assert isinstance(FirstCodeBlockParser().parse(reply("hmm")).decision, InvalidDecision)
    assert isinstance(
        FirstCodeBlockParser().parse(reply("```python\n\n```")).decision, InvalidDecision
    )


@pytest.mark.slow
async def test_code_agent_solves_a_task_in_the_sandbox(make_executor: ExecutorFactory) -> None:
    """A code agent solves a task in the sandbox: real output as observations, a NameError as an
    executed observation it corrects, and never the output the model invented."""
    executor = await make_executor()
    model = ScriptedModelClient(
        [reply(STEP_0), reply(STEP_1), reply(STEP_2), answer_from_observation]
    )
    store = MemoryRunStore()
    definition = AgentDefinition(
        model_client=model,
        decision_parser=FirstCodeBlockParser(),
        store=store,
        event_sink=RecordingEventSink(),
        synthetic_observations=SYNTHETIC,
    )
    result = await run(definition, request("primes", executor))

    assert result.stop_reason is StopReason.AGENT_FINISHED
    expected = sum(p * p for p in range(2, 50) if all(p % d for d in range(2, p)))
    assert result.final_answer == str(expected)
    first, mistake, fixed, final = result.steps
    assert first.observation == "15\n"
    assert first.action_status is ActionStatus.EXECUTED
    assert "999" not in first.raw_output
    assert mistake.action_status is ActionStatus.EXECUTED
    assert "NameError: name 'undefined_name' is not defined" in mistake.observation
    assert fixed.observation == f"{expected}\n"
    assert final.action_status is None
    # The model saw the real output, never its own invented one.
    assert all("999" not in block.text for m in model.calls[1].messages for block in m.content)
    log = await store.read_log("primes")
    assert log.started is not None
    snapshot = log.started.parameter_snapshot
    assert snapshot["action_executor.stateful"] == "true"
    assert snapshot["action_executor.session_id"] == executor.session_id
    assert snapshot["decision_parser.kind"] == "first_code_block"


class Crash(BaseException):
    """The process dying between two steps."""


@pytest.mark.slow
async def test_resume_refuses_another_session_and_continues_on_the_same_one(
    make_executor: ExecutorFactory,
) -> None:
    """Resuming a crashed run on another sandbox session is refused by the snapshot (session_id); on
    the same session it continues."""
    executor = await make_executor()
    store = MemoryRunStore()

    def definition(model: ScriptedModelClient) -> AgentDefinition:
        return AgentDefinition(
            model_client=model,
            decision_parser=FirstCodeBlockParser(),
            store=store,
            event_sink=RecordingEventSink(),
            synthetic_observations=SYNTHETIC,
        )

    crashing = ScriptedModelClient(
        [reply(STEP_0), Crash(), answer_from_observation], by_call_index=True
    )
    with pytest.raises(Crash):
        await run(definition(crashing), request("resumable", executor))

    script = [reply(STEP_0), reply(STEP_2), answer_from_observation]
    other = await make_executor()
    with pytest.raises(SnapshotMismatchError, match=r"action_executor\.session_id"):
        await resume(
            definition(ScriptedModelClient(script, by_call_index=True)),
            request("resumable", other),
        )
    # A session replaced by restart() is another session too.
    await other.restart()
    with pytest.raises(SnapshotMismatchError, match=r"action_executor\.session_id"):
        await resume(
            definition(ScriptedModelClient(script, by_call_index=True)),
            request("resumable", other),
        )

    # On the session the run started on, the state of step 0 is still there.
    result = await resume(
        definition(ScriptedModelClient(script, by_call_index=True)),
        request("resumable", executor),
    )
    assert result.stop_reason is StopReason.AGENT_FINISHED
    expected = sum(p * p for p in range(2, 50) if all(p % d for d in range(2, p)))
    assert result.final_answer == str(expected)
    assert [s.observation for s in result.steps[:2]] == ["15\n", f"{expected}\n"]


@pytest.mark.slow
async def test_a_dead_session_stops_the_run_with_env_error(make_executor: ExecutorFactory) -> None:
    """Code that ignores the interrupt gets the sandbox killed, and the run stops with env_error."""
    executor = await make_executor(time_limit_seconds=1.0, interrupt_grace_seconds=0.5)
    stubborn = (
        "```python\nimport signal\nsignal.signal(signal.SIGINT, signal.SIG_IGN)\n"
        "while True:\n    pass\n```"
    )
    model = ScriptedModelClient([reply("```python\nx = 1\n```"), reply(stubborn)])
    result = await run(
        AgentDefinition(
            model_client=model,
            decision_parser=FirstCodeBlockParser(),
            store=MemoryRunStore(),
            event_sink=RecordingEventSink(),
            synthetic_observations=SYNTHETIC,
        ),
        request("stubborn", executor),
    )
    assert result.stop_reason is StopReason.ENV_ERROR
    assert result.steps[-1].action_status is ActionStatus.ENV_ERROR
    assert "killed" in result.steps[-1].observation
    assert not executor.alive
