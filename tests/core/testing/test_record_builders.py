"""The record builders of ``polyloop.testing`` build exactly the records the loop writes."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from polyloop.recovery import validate_log
from polyloop.serialization import dumps_log_record, loads_log_record
from polyloop.session import run
from polyloop.stores.memory import MemoryRunStore
from polyloop.testing import (
    ScriptedExecutor,
    StepWrites,
    code_step,
    final_step,
    model_failure_step,
    parse_failure_step,
    reply,
    run_finished,
    run_log_from,
    run_started,
    tool_step,
    write_records,
)
from polyloop.tools import Tool, ToolRegistry, ToolSpec
from polyloop.types import ReplayPolicy, StopReason
from tests.loop_kit import SYNTHETIC, make_definition, make_request


def _frozen_clock() -> float:
    return 12.5


async def test_tool_parse_failure_and_final_steps_are_what_a_run_writes() -> None:
    """A run that calls a tool, gets an unreadable reply, then answers writes exactly the
    records the tool, parse-failure and final-step builders make (prompt sizes taken from it)."""
    store = MemoryRunStore()
    spec = ToolSpec(
        "lookup", "Look an order up.", {"type": "object"}, replay_policy=ReplayPolicy.NEVER
    )
    tools = ToolRegistry([Tool(spec, lambda arguments: "shipped on Monday")])
    script = [
        reply('CALL lookup {"order": "A-17", "all": true}', call_id="c0", thinking="hm"),
        reply("no idea", call_id="c1"),
        reply("FINAL: it shipped", call_id="c2"),
    ]
    await run(make_definition(script, store), make_request("r", tools=tools), clock=_frozen_clock)
    log = await store.read_log("r")
    prompts = [completed.step.prompt_chars for completed in log.steps]
    steps: list[StepWrites] = [
        tool_step(
            "r",
            0,
            tool_name="lookup",
            arguments={"order": "A-17", "all": True},
            observation="shipped on Monday",
            action='CALL lookup {"order": "A-17", "all": true}',
            thinking="hm",
            call_id="c0",
            replay_policy=ReplayPolicy.NEVER,
            prompt_chars=prompts[0],
            step_wall_ms=0,
        ),
        parse_failure_step(
            "r",
            1,
            content="no idea",
            explanation=(
                "Reply with one of: FINAL: <answer> | CALL <tool> <json object> | RUN: <code>."
            ),
            call_id="c1",
            prompt_chars=prompts[1],
            step_wall_ms=0,
        ),
        final_step("r", 2, "it shipped", call_id="c2", prompt_chars=prompts[2], step_wall_ms=0),
    ]
    assert log.started is not None
    built = [
        run_started("r", log.started.parameter_snapshot, log.started.started_at),
        *(record for step in steps for record in step.records),
        run_finished("r", steps, StopReason.AGENT_FINISHED, final_answer="it shipped"),
    ]
    assert run_log_from(built) == log


async def test_code_and_model_failure_steps_are_what_a_run_writes() -> None:
    """A run that executes code and then loses its model writes exactly the records the code
    and model-failure builders make."""
    store = MemoryRunStore()
    script = [reply("RUN: print(6 * 7)", call_id="c0"), TimeoutError("no answer in 30 s")]
    request = make_request("r", executor=ScriptedExecutor(lambda code: "42"))
    await run(make_definition(script, store), request, clock=_frozen_clock)
    log = await store.read_log("r")
    prompts = [completed.step.prompt_chars for completed in log.steps]
    steps = [
        code_step(
            "r",
            0,
            "print(6 * 7)",
            observation="42",
            call_id="c0",
            prompt_chars=prompts[0],
            step_wall_ms=0,
        ),
        model_failure_step(
            "r",
            1,
            failure="TimeoutError: no answer in 30 s",
            observation=SYNTHETIC.model_call_failed,
            prompt_chars=prompts[1],
            step_wall_ms=0,
        ),
    ]
    assert log.started is not None
    built = [
        run_started("r", log.started.parameter_snapshot, log.started.started_at),
        *(record for step in steps for record in step.records),
        run_finished("r", steps, StopReason.LLM_ERROR),
    ]
    assert run_log_from(built) == log


#: Steps a run can take and go on: a tool call, tool-less code, an unreadable reply.
_MIDDLE_STEPS = (
    lambda run_id, k: tool_step(run_id, k, arguments={"k": k}),
    lambda run_id, k: code_step(run_id, k, f"print({k})"),
    lambda run_id, k: parse_failure_step(run_id, k),
)


@settings(max_examples=60, deadline=None)
@given(
    kinds=st.lists(st.integers(0, len(_MIDDLE_STEPS) - 1), max_size=6),
    ending=st.sampled_from(["final", "model_failure", "unfinished"]),
)
async def test_builder_logs_validate_round_trip_and_read_back_as_built(
    kinds: list[int], ending: str
) -> None:
    """Any run put together from the builders as a run could go validates, every record
    survives the library's JSON, and a store reads back exactly ``run_log_from`` of the writes."""
    run_id = "built"
    steps = [_MIDDLE_STEPS[kind](run_id, k) for k, kind in enumerate(kinds)]
    records = [run_started(run_id, {"request.budget.max_consecutive_parse_failures": "99"})]
    if ending == "final":
        steps.append(final_step(run_id, len(steps), "done"))
    elif ending == "model_failure":
        steps.append(model_failure_step(run_id, len(steps)))
    records += [record for step in steps for record in step.records]
    if ending != "unfinished":
        reason = StopReason.AGENT_FINISHED if ending == "final" else StopReason.LLM_ERROR
        answer = "done" if ending == "final" else None
        records.append(run_finished(run_id, steps, reason, final_answer=answer))
    assert records == [loads_log_record(dumps_log_record(record)) for record in records]
    store = MemoryRunStore()
    await write_records(store, records)
    log = await store.read_log(run_id)
    assert run_log_from(records) == log
    validate_log(log, run_id)
