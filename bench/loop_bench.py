"""Library overhead of the governed loop (issue 3): memory store, zero-latency seams.

    uv run python bench/loop_bench.py [--quick]

Prints per-step overhead for 100, 1,000 and 10,000-step runs (median of repeats), the growth
factor 1,000 → 10,000, peak traced memory of a 10,000-step run, and the time `resume` takes on a
10,000-step run that died just before its RunFinished record.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import statistics
import time
import tracemalloc
from collections.abc import Mapping

from polyloop.ports import Action, Event, FinalAnswer, ModelCall, ParsedReply, RunLog
from polyloop.session import AgentDefinition, RunRequest, resume, run
from polyloop.stores.memory import MemoryRunStore
from polyloop.tools import Tool, ToolRegistry, ToolSpec
from polyloop.types import (
    ActionOutcome,
    ActionStatus,
    Budget,
    Context,
    Message,
    ModelReply,
    ReplayPolicy,
    Role,
    RunFinished,
    SyntheticObservations,
    TextBlock,
)

REPLY = ModelReply(call_id=None, content="RUN: noop", thinking="")
FINAL = ModelReply(call_id=None, content="FINAL", thinking="")
TOOL_REPLY = ModelReply(call_id=None, content="CALL noop {}", thinking="")
OUTCOME = ActionOutcome(ActionStatus.EXECUTED, "ok", False, False, 0)


class ConstantModel:
    def __init__(self, steps: int, content: ModelReply) -> None:
        self._last = steps - 1
        self._content = content

    async def call(self, call: ModelCall) -> ModelReply:
        return FINAL if call.call_index >= self._last else self._content

    def parameters(self) -> Mapping[str, str]:
        return {"kind": "constant"}


class ReadingModel(ConstantModel):
    """Reads ``call.messages`` on every call, as a client that sends the history would."""

    async def call(self, call: ModelCall) -> ModelReply:
        if not call.messages:
            raise AssertionError("no messages")
        return FINAL if call.call_index >= self._last else self._content


class ConstantParser:
    def __init__(self) -> None:
        from polyloop.ports import ToolCall

        self._code = ParsedReply("RUN: noop", Action("noop", None))
        self._tool = ParsedReply("CALL noop {}", Action("CALL noop {}", ToolCall("noop", {})))
        self._final = ParsedReply("FINAL", FinalAnswer("done"))

    def parse(self, reply: ModelReply) -> ParsedReply:
        if reply is FINAL:
            return self._final
        return self._tool if reply is TOOL_REPLY else self._code

    def parameters(self) -> Mapping[str, str]:
        return {"kind": "constant"}


class ConstantExecutor:
    async def execute(self, action: Action) -> ActionOutcome:
        return OUTCOME

    def parameters(self) -> Mapping[str, str]:
        return {"kind": "constant"}


class NullSink:
    async def emit(self, event: Event) -> None:
        return None

    def parameters(self) -> Mapping[str, str]:
        return {"kind": "null"}


SYNTHETIC = SyntheticObservations("rejected", "env failed", "model failed")
CONTEXT = Context(
    (Message(Role.SYSTEM, (TextBlock("system"),)),), (Message(Role.USER, (TextBlock("goal"),)),)
)
NOOP = ToolRegistry([Tool(ToolSpec("noop", "does nothing", {"type": "object"}), lambda a: "ok")])


def setup(
    steps: int,
    store: object,
    *,
    with_tool: bool = False,
    run_id: str = "bench",
    reading: bool = False,
) -> tuple[AgentDefinition, RunRequest]:
    model = ReadingModel if reading else ConstantModel
    definition = AgentDefinition(
        model(steps, TOOL_REPLY if with_tool else REPLY),
        ConstantParser(),
        store,  # type: ignore[arg-type]
        NullSink(),
        SYNTHETIC,
    )
    tools = NOOP if with_tool else ToolRegistry()
    request = RunRequest(
        run_id=run_id,
        budget=Budget(steps + 1, steps + 1, 3, 10**12),
        action_executor=tools.executor() if with_tool else ConstantExecutor(),
        tools=tools,
        context=CONTEXT,
        injections={},
        model_binding={},
        model_replay_policy=ReplayPolicy.SAFE,
        observation_template="{observation}",
        tool_section_template="{tools}",
        cancel_grace_seconds=1.0,
    )
    return definition, request


async def timed_run(steps: int, *, with_tool: bool = False, reading: bool = False) -> float:
    definition, request = setup(steps, MemoryRunStore(), with_tool=with_tool, reading=reading)
    gc.collect()
    began = time.perf_counter()
    result = await run(definition, request)
    elapsed = time.perf_counter() - began
    assert len(result.steps) == steps, len(result.steps)
    return elapsed


class DropFinish(MemoryRunStore):
    """Loses the RunFinished write, as a process killed right before it would."""

    async def write_run_finished(self, record: RunFinished) -> None:
        return None


async def resume_after_crash(steps: int) -> tuple[float, float]:
    crashed = DropFinish()
    definition, request = setup(steps, crashed)
    await run(definition, request)
    store = MemoryRunStore()
    log: RunLog = await crashed.read_log("bench")
    # copy the log into a plain memory store, then resume with fresh seams
    assert log.started is not None
    await store.write_run_started(log.started)
    for intent in log.intents:
        await store.write_intent(intent)
    for result in log.model_results:
        await store.write_model_call_result(result)
    for completed in log.steps:
        await store.write_step_completed(completed)
    definition, request = setup(steps, store)
    gc.collect()
    began = time.perf_counter()
    result = await resume(definition, request)
    elapsed = time.perf_counter() - began
    assert result.stop_reason.value == "agent_finished"
    assert len(result.steps) == steps
    began = time.perf_counter()
    await resume(definition, request)  # now finished: returns the recorded result
    return elapsed, time.perf_counter() - began


async def peak_memory(steps: int) -> int:
    definition, request = setup(steps, MemoryRunStore())
    gc.collect()
    tracemalloc.start()
    await run(definition, request)
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    return peak


async def main(quick: bool) -> None:
    repeats = {100: 31, 1_000: 11, 10_000: 3} if not quick else {100: 5, 1_000: 3, 10_000: 1}
    print("PolyLoop loop overhead — memory store, zero-latency seams (tool-less actions)")
    print(f"{'steps':>8} {'runs':>5} {'median µs/step':>15} {'min µs/step':>12}")
    per_step: dict[int, float] = {}
    for steps, runs in repeats.items():
        await timed_run(steps)  # warm-up
        samples = [await timed_run(steps) / steps * 1e6 for _ in range(runs)]
        per_step[steps] = statistics.median(samples)
        print(f"{steps:>8} {runs:>5} {per_step[steps]:>15.1f} {min(samples):>12.1f}")
    print(f"growth 1,000 → 10,000 steps: {per_step[10_000] / per_step[1_000]:.2f}x (target ≤ 1.5x)")

    reading: dict[int, float] = {}
    for steps in (1_000, 10_000):
        runs = repeats[steps]
        reading[steps] = statistics.median(
            [await timed_run(steps, reading=True) / steps * 1e6 for _ in range(runs)]
        )
    print(
        "a client that reads call.messages on every call (the tuple is copied then, "
        f"O(history)): {reading[1_000]:.1f} / {reading[10_000]:.1f} µs/step at "
        f"1,000 / 10,000 steps ({reading[10_000] / reading[1_000]:.2f}x)"
    )

    tool_samples = [await timed_run(1_000, with_tool=True) / 1_000 * 1e6 for _ in range(5)]
    print(
        f"with a registry `noop` tool (JSON Schema validation + dispatch): "
        f"{statistics.median(tool_samples):.1f} µs/step at 1,000 steps"
    )

    peak = await peak_memory(10_000)
    print(f"peak traced memory, 10,000-step run: {peak / 2**20:.1f} MiB")

    resumed, finished = await resume_after_crash(10_000)
    print(
        f"resume of a 10,000-step run that died before RunFinished: {resumed * 1e3:.1f} ms "
        f"(target < 150 ms); resume of the now-finished run: {finished * 1e3:.2f} ms"
    )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer repeats (smoke run)")
    asyncio.run(main(parser.parse_args().quick))
