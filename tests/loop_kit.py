"""Shared building blocks for the loop's tests: seams, store wrappers and a scenario.

Every fake here is a real implementation of its seam (in-process, no I/O), not a mock.
"""

from __future__ import annotations

import itertools
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace

from polyloop.ports import Action, RunLog
from polyloop.session import AgentDefinition, RunRequest
from polyloop.stores.memory import MemoryRunStore
from polyloop.testing import LineDecisionParser, RecordingEventSink, ScriptedModelClient, reply
from polyloop.tools import Tool, ToolRegistry, ToolSpec
from polyloop.types import (
    ActionOutcome,
    ActionStatus,
    Budget,
    Context,
    Intent,
    Message,
    ModelCallResult,
    ReplayPolicy,
    Role,
    RunFinished,
    RunStarted,
    StepCompleted,
    StepRecord,
    SyntheticObservations,
    TextBlock,
)

SYNTHETIC = SyntheticObservations(
    action_rejected="That tool call was rejected.",
    env_failed="The environment failed.",
    model_call_failed="The model call failed; this step produced nothing.",
)
OBJECT_SCHEMA: Mapping[str, object] = {"type": "object"}
GOAL = Context(
    run_level=(Message(Role.SYSTEM, (TextBlock("You are a careful agent."),)),),
    goal_level=(Message(Role.USER, (TextBlock("Do the task."),)),),
)


class Crash(BaseException):
    """Stands in for the process dying: not an Exception, so nothing in the loop catches it."""


@dataclass
class Effects:
    """Counts the side effects that really happened, across crashes and resumes."""

    counts: Counter[str] = field(default_factory=Counter)

    def hit(self, name: str) -> str:
        self.counts[name] += 1
        return f"{name} done"


def scenario_tools(effects: Effects) -> ToolRegistry:
    """``write`` (never), ``read`` (safe), ``submit`` (never, completes the run), ``noop`` (safe)."""
    return ToolRegistry(
        [
            Tool(
                ToolSpec(
                    "write",
                    "Write a file.",
                    {
                        "type": "object",
                        "properties": {"path": {"type": "string"}},
                        "required": ["path"],
                    },
                ),
                lambda args: effects.hit("write"),
            ),
            Tool(
                ToolSpec("read", "Read a file.", OBJECT_SCHEMA, replay_policy=ReplayPolicy.SAFE),
                lambda args: effects.hit("read"),
            ),
            Tool(
                ToolSpec("submit", "Submit the work.", OBJECT_SCHEMA, completes_run=True),
                lambda args: effects.hit("submit"),
            ),
            Tool(
                ToolSpec("noop", "Do nothing.", OBJECT_SCHEMA, replay_policy=ReplayPolicy.SAFE),
                lambda args: "ok",
            ),
        ]
    )


class MixedExecutor:
    """Dispatches tool calls to a registry and runs tool-less actions as "code" (counted)."""

    def __init__(self, tools: ToolRegistry, effects: Effects) -> None:
        self._registry_executor = tools.executor()
        self._effects = effects

    async def execute(self, action: Action) -> ActionOutcome:
        if action.tool_call is not None:
            return await self._registry_executor.execute(action)
        return ActionOutcome(
            status=ActionStatus.EXECUTED,
            observation=self._effects.hit("code"),
            observation_is_synthetic=False,
            env_reported_completion=False,
            observation_truncated_chars=0,
        )

    def parameters(self) -> Mapping[str, str]:
        return {"kind": "mixed", "stateful": "false"}


def make_request(
    run_id: str,
    *,
    tools: ToolRegistry | None = None,
    executor: object | None = None,
    budget: Budget | None = None,
    model_replay_policy: ReplayPolicy = ReplayPolicy.SAFE,
    observation_template: str = "Observation: {observation}",
    tool_section_template: str = "Tools: {tools}",
    cancel_grace_seconds: float = 1.0,
    model_binding: Mapping[str, str] | None = None,
    injections: Mapping[str, tuple[object, ...]] | None = None,
    context: Context = GOAL,
) -> RunRequest:
    registry = tools if tools is not None else ToolRegistry()
    return RunRequest(
        run_id=run_id,
        budget=budget
        or Budget(
            max_steps=20,
            max_actions=20,
            max_consecutive_parse_failures=3,
            max_prompt_chars=1_000_000,
        ),
        action_executor=executor if executor is not None else registry.executor(),  # type: ignore[arg-type]
        tools=registry,
        context=context,
        injections=injections or {},  # type: ignore[arg-type]
        model_binding=model_binding or {"project": "tests"},
        model_replay_policy=model_replay_policy,
        observation_template=observation_template,
        tool_section_template=tool_section_template,
        cancel_grace_seconds=cancel_grace_seconds,
    )


def make_definition(
    script: Iterable[object],
    store: object | None = None,
    *,
    sink: object | None = None,
    parser: object | None = None,
) -> AgentDefinition:
    return AgentDefinition(
        model_client=ScriptedModelClient(script, by_call_index=True),  # type: ignore[arg-type]
        decision_parser=parser or LineDecisionParser(),  # type: ignore[arg-type]
        store=store if store is not None else MemoryRunStore(),  # type: ignore[arg-type]
        event_sink=sink or RecordingEventSink(),  # type: ignore[arg-type]
        synthetic_observations=SYNTHETIC,
    )


def replies(*contents: str) -> list[object]:
    """Model replies with distinct call ids (``c0``, ``c1``...)."""
    return [reply(text, call_id=f"c{i}", thinking="t" * i) for i, text in enumerate(contents)]


#: The crash-matrix scenario: never tool, safe tool, tool-less action, rejected call, parse
#: failure, then a completing tool.
SCENARIO = (
    'CALL write {"path": "a.txt"}',
    "CALL read {}",
    "RUN: print(6 * 7)",
    "CALL delete_everything {}",
    "I am not sure what to do.",
    "CALL submit {}",
)


class RecordingStore:
    """Wraps a store and records every write (method name, record) in order."""

    def __init__(self, inner: object) -> None:
        self.inner = inner
        self.writes: list[tuple[str, object]] = []

    async def _write(self, name: str, record: object) -> None:
        await getattr(self.inner, name)(record)
        self.writes.append((name, record))

    async def write_run_started(self, record: RunStarted) -> None:
        await self._write("write_run_started", record)

    async def write_intent(self, record: Intent) -> None:
        await self._write("write_intent", record)

    async def write_model_call_result(self, record: ModelCallResult) -> None:
        await self._write("write_model_call_result", record)

    async def write_step_completed(self, record: StepCompleted) -> None:
        await self._write("write_step_completed", record)

    async def write_run_finished(self, record: RunFinished) -> None:
        await self._write("write_run_finished", record)

    async def read_log(self, run_id: str) -> RunLog:
        return await self.inner.read_log(run_id)  # type: ignore[attr-defined, no-any-return]

    def parameters(self) -> Mapping[str, str]:
        return self.inner.parameters()  # type: ignore[attr-defined, no-any-return]


class CrashingStore(RecordingStore):
    """Lets ``crash_after`` writes through (each durable), then raises :class:`Crash`."""

    def __init__(self, inner: object, crash_after: int) -> None:
        super().__init__(inner)
        self.crash_after = crash_after

    async def _write(self, name: str, record: object) -> None:
        await super()._write(name, record)
        if len(self.writes) >= self.crash_after:
            raise Crash(f"crash after write #{len(self.writes)} ({name})")


def without_wall_time(steps: Sequence[StepRecord]) -> list[StepRecord]:
    return [replace(step, step_wall_ms=0) for step in steps]


class DatedClock:
    """A monotonic clock (a millisecond per reading) that also tells a fixed UTC time, as the
    contract kit's ``TickingClock`` does: the run it drives records ``utc`` as ``started_at``."""

    def __init__(self, utc: str = "2001-02-03T04:05:06+00:00") -> None:
        self.utc, self.calls = utc, 0

    def utc_iso(self) -> str:
        return self.utc

    def __call__(self) -> float:
        self.calls += 1
        return self.calls / 1000


class _TickingClock:
    """A monotonic clock advancing ``step`` seconds per reading that also tells a fixed UTC
    time, so the runs it drives record one ``started_at`` whatever second they ran in."""

    def __init__(self, step: float) -> None:
        self.step, self.counter = step, itertools.count()

    def utc_iso(self) -> str:
        return "2000-01-01T00:00:00+00:00"

    def __call__(self) -> float:
        return next(self.counter) * self.step


def ticking_clock(step: float = 0.001) -> Callable[[], float]:
    """A deterministic clock: ``step`` seconds per reading, and a fixed ``started_at``
    (design 0061), so two runs it drives write equal records."""
    return _TickingClock(step)
