"""Crash at any write, then resume under a changed configuration, on real stores (issue 15,
item 5): a change the snapshot records is refused naming its key, with nothing written; any
other change (other replies, a failing environment) resumes to a log the library accepts.

The crash is :class:`~tests.loop_kit.Crash`, raised by a store wrapper right after the k-th
write became durable in a real jsonl or sqlite store; the next driver opens a fresh store on the
same files, as a new process would.
"""

from __future__ import annotations

import asyncio
import tempfile
from collections.abc import Callable
from dataclasses import dataclass

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from polyloop.errors import SnapshotMismatchError
from polyloop.ports import Action
from polyloop.recovery import validate_log
from polyloop.session import RunRequest, resume, run
from polyloop.tools import Tool, ToolRegistry, ToolSpec
from polyloop.types import ActionOutcome, Budget, ReplayPolicy, RunResult
from tests.loop_kit import (
    OBJECT_SCHEMA,
    SCENARIO,
    Crash,
    CrashingStore,
    Effects,
    MixedExecutor,
    make_definition,
    make_request,
    replies,
    scenario_tools,
)
from tests.stores._helpers import FILE_KINDS, close_store, open_store

pytestmark = [pytest.mark.slow, pytest.mark.crash]

RUN_ID = "changed"
BUDGET = Budget(
    max_steps=20, max_actions=20, max_consecutive_parse_failures=3, max_prompt_chars=10**6
)


def _tools(
    effects: Effects,
    *,
    schema: bool = False,
    description: bool = False,
    read_policy: ReplayPolicy = ReplayPolicy.SAFE,
    noop_completes: bool = False,
) -> ToolRegistry:
    """The scenario's tools, with one of them changed as asked."""
    base = scenario_tools(effects)
    changed = []
    for name in base.names():
        spec = base.spec_for(name)
        assert spec is not None
        parameters, text = spec.parameters, spec.description
        policy, completes = spec.replay_policy, spec.completes_run
        if name == "write" and schema:
            parameters = {**parameters, "properties": {"path": {"type": "string"}, "mode": {}}}
        if name == "read":
            text = "Read a file, faster." if description else text
            policy = read_policy
        if name == "noop":
            completes = noop_completes
        handler = (lambda args, n=name: effects.hit(n)) if name != "noop" else (lambda args: "ok")
        changed.append(
            Tool(
                ToolSpec(
                    name,
                    text,
                    parameters or OBJECT_SCHEMA,
                    replay_policy=policy,
                    completes_run=completes,
                ),
                handler,
            )
        )
    return ToolRegistry(changed)


class FailingExecutor(MixedExecutor):
    """The environment of a resumed run that fails every action: not part of the snapshot."""

    async def execute(self, action: Action) -> ActionOutcome:
        raise RuntimeError("the sandbox is gone")


@dataclass(frozen=True)
class Change:
    name: str
    #: The snapshot key a resume must name when it refuses (``None``: it must go on).
    refused_key: str | None
    tools: Callable[[Effects], ToolRegistry]
    budget: Budget = BUDGET
    model_replay_policy: ReplayPolicy = ReplayPolicy.SAFE
    #: The model's replies to the resumed driver (as many as the scenario's: the scripted
    #: client's snapshot records their number).
    script: tuple[str, ...] = SCENARIO
    failing_environment: bool = False

    def request(self, effects: Effects) -> RunRequest:
        tools = self.tools(effects)
        executor = (FailingExecutor if self.failing_environment else MixedExecutor)(tools, effects)
        return make_request(
            RUN_ID,
            tools=tools,
            executor=executor,
            budget=self.budget,
            model_replay_policy=self.model_replay_policy,
        )


SAME = Change("same", None, _tools)
CHANGES = (
    SAME,
    Change("schema", "request.tools.write.schema_sha256", lambda e: _tools(e, schema=True)),
    Change(
        "description",
        "request.tools.read.description_sha256",
        lambda e: _tools(e, description=True),
    ),
    Change(
        "policy",
        "request.tools.read.replay_policy",
        lambda e: _tools(e, read_policy=ReplayPolicy.NEVER),
    ),
    Change(
        "completes_run",
        "request.tools.noop.completes_run",
        lambda e: _tools(e, noop_completes=True),
    ),
    Change("budget", "request.budget.max_steps", _tools, budget=Budget(4, 20, 3, 10**6)),
    Change(
        "model policy",
        "request.model_replay_policy",
        _tools,
        model_replay_policy=ReplayPolicy.NEVER,
    ),
    Change("replies", None, _tools, script=("CALL read {}",) * 3 + ("FINAL: other",) * 3),
    Change("environment", None, _tools, failing_environment=True),
)


async def _drive(
    kind: str, where: str, change: Change, crash_at: int, second_crash_at: int | None
) -> tuple[str, RunResult | None]:
    effects = Effects()
    store = open_store(kind, where)
    try:
        await run(
            make_definition(replies(*SCENARIO), CrashingStore(store, crash_at)),
            SAME.request(effects),
        )
    except Crash:
        pass
    finally:
        await close_store(store)
    outcome, result, refusal = "resumed", None, ""
    for attempt in (second_crash_at, None):
        store = open_store(kind, where)
        before = await store.read_log(RUN_ID)
        wrapped = store if attempt is None else CrashingStore(store, attempt)
        try:
            result = await resume(
                make_definition(replies(*change.script), wrapped), change.request(effects)
            )
        except Crash:
            continue
        except SnapshotMismatchError as error:
            outcome, refusal = "refused", str(error)
        finally:
            log = await store.read_log(RUN_ID)
            validate_log(log, RUN_ID)
            await close_store(store)
        if outcome == "refused":
            assert change.refused_key is not None, f"{change.name}: refused: {refusal}"
            assert f"  {change.refused_key}: recorded" in refusal
            assert before == log, "a refused resume wrote"
        break
    return outcome, result


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    kind=st.sampled_from(FILE_KINDS),
    change=st.sampled_from(CHANGES),
    crash_at=st.integers(1, 26),
    second_crash_at=st.none() | st.integers(1, 6),
)
def test_any_crash_point_then_any_configuration_change_never_leaves_a_refused_log(
    kind: str, change: Change, crash_at: int, second_crash_at: int | None
) -> None:
    """Whatever write the first driver dies after (and the resume too), a resume under a
    changed configuration either refuses naming the recorded key, writing nothing, or goes
    on, and every log it leaves is one the library accepts; a finished run resumes to its
    recorded result."""
    with tempfile.TemporaryDirectory(prefix="polyloop-changed-") as where:
        outcome, result = asyncio.run(_drive(kind, where, change, crash_at, second_crash_at))
        event(f"{change.name}: {outcome}, {'finished' if result else 'unfinished'}")
        if change.refused_key is None:
            assert "resumed" == outcome, change.name
        if result is not None:
            assert result == asyncio.run(_resume_again(kind, where, change))


async def _resume_again(kind: str, where: str, change: Change) -> RunResult:
    """The result of resuming the finished run once more: its recorded one, no seam called."""
    store = open_store(kind, where)
    try:
        log = await store.read_log(RUN_ID)
        assert log.finished is not None
        again = await resume(
            make_definition(replies(*change.script), store), change.request(Effects())
        )
        assert log.finished.result == again
        return again
    finally:
        await close_store(store)
