"""Building blocks of the tests of runs that wait for a person (issue 24, design 0037).

Real seams: the scripted model and line parser of :mod:`polyloop.testing`, a registry whose
``refund`` tool requires approval and whose ``ask_user`` tool asks the user, and an effects
counter that tells what really ran.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from polyloop.asking import RunParked, UserAnswered, UserAsked, Verdict
from polyloop.ports import Action, RunLog
from polyloop.session import (
    AgentDefinition,
    RunRequest,
    answer,
    approve,
    edit,
    reject,
    resume_or_park,
    run_or_park,
)
from polyloop.tools import Tool, ToolRegistry, ToolSpec
from polyloop.types import Budget, ReplayPolicy, RunResult
from tests.loop_kit import (
    Crash,
    CrashingStore,
    Effects,
    MixedExecutor,
    RecordingStore,
    make_definition,
    make_request,
)

REFUND_SCHEMA: Mapping[str, object] = {
    "type": "object",
    "properties": {"amount": {"type": "integer", "minimum": 0}},
    "required": ["amount"],
    "additionalProperties": False,
}
QUESTION_SCHEMA: Mapping[str, object] = {
    "type": "object",
    "properties": {"question": {"type": "string"}},
    "required": ["question"],
}


def gated_tools(
    effects: Effects, *, refund_description: str = "Refund money.", refund_gated: bool = True
) -> ToolRegistry:
    """``refund`` (requires approval, never replayed), ``ask_user`` (asks the user), ``read``
    (safe, ungated), ``submit`` (completes the run)."""
    return ToolRegistry(
        [
            Tool(
                ToolSpec(
                    "refund", refund_description, REFUND_SCHEMA, requires_approval=refund_gated
                ),
                lambda args: effects.hit(f"refund:{args['amount']}"),
            ),
            Tool(
                ToolSpec("ask_user", "Ask the user.", QUESTION_SCHEMA, asks_user=True),
                lambda args: effects.hit("ask_user-executed"),
            ),
            Tool(
                ToolSpec("read", "Read.", {"type": "object"}, replay_policy=ReplayPolicy.SAFE),
                lambda args: effects.hit("read"),
            ),
            Tool(
                ToolSpec("submit", "Submit.", {"type": "object"}, completes_run=True),
                lambda args: effects.hit("submit"),
            ),
        ]
    )


@dataclass(frozen=True)
class AboveLimit:
    """Approval policy: refunds above ``limit`` and every tool-less action wait for a person."""

    limit: int = 50

    @property
    def name(self) -> str:
        return f"refunds-above-{self.limit}-and-code"

    def __call__(self, action: Action) -> bool:
        call = action.tool_call
        if call is None:
            return True
        amount = call.arguments.get("amount")
        return call.name == "refund" and isinstance(amount, int) and amount > self.limit


def gated_request(
    run_id: str,
    effects: Effects,
    *,
    tools: ToolRegistry | None = None,
    max_steps: int = 20,
    max_actions: int = 20,
) -> RunRequest:
    registry = tools if tools is not None else gated_tools(effects)
    return make_request(
        run_id,
        tools=registry,
        executor=MixedExecutor(registry, effects),
        budget=Budget(
            max_steps=max_steps,
            max_actions=max_actions,
            max_consecutive_parse_failures=3,
            max_prompt_chars=1_000_000,
        ),
    )


def definition(script: list[str], store: object) -> AgentDefinition:
    """A definition whose model answers call ``k`` with ``script[k]``."""
    from tests.loop_kit import replies

    return make_definition(replies(*script), store)


# ---------------------------------------------------------------------------
# A gated scenario driven to its end, with decisions, across crashes
# ---------------------------------------------------------------------------

#: approve a refund, answer a question, reject a tool-less action (policy), edit a refund,
#: then a completing tool.
GATED_SCENARIO = [
    'CALL refund {"amount": 80}',
    'CALL ask_user {"question": "Which account?"}',
    "RUN: print(1)",
    'CALL refund {"amount": 90}',
    "CALL submit {}",
]


async def decide(store: object, parked: RunParked, tools: ToolRegistry) -> None:
    """The decision the gated scenario gets at each step (any step not listed is approved)."""
    ask = parked.ask
    digest = ask.arguments_sha256
    if ask.step == 1:
        await answer(store, parked.run_id, "the savings account", step=ask.step)  # type: ignore[arg-type]
    elif ask.step == 2:
        await reject(
            store, parked.run_id, reason="no code today", step=ask.step, arguments_sha256=digest
        )  # type: ignore[arg-type]
    elif ask.step == 3:
        await edit(
            store,
            parked.run_id,
            {"amount": 40},
            tools=tools,
            step=ask.step,
            arguments_sha256=digest,
        )  # type: ignore[arg-type]
    else:
        await approve(
            store, parked.run_id, step=ask.step, arguments_sha256=digest, decided_by="ana"
        )  # type: ignore[arg-type]


async def drive_gated(store: object, run_id: str, effects: Effects, *, started: bool) -> RunResult:
    """Run (or resume) the gated scenario on ``store``, deciding every ask, until it stops."""
    request = gated_request(run_id, effects, max_steps=20)
    outcome: RunResult | RunParked
    if started:
        outcome = await resume_or_park(
            definition(GATED_SCENARIO, store), request, approval_policy=AboveLimit()
        )
    else:
        outcome = await run_or_park(
            definition(GATED_SCENARIO, store), request, approval_policy=AboveLimit()
        )
    while isinstance(outcome, RunParked):
        await decide(store, outcome, request.tools)
        outcome = await resume_or_park(
            definition(GATED_SCENARIO, store), request, approval_policy=AboveLimit()
        )
    return outcome


class AskingCrashingStore(CrashingStore):
    """:class:`CrashingStore` that also takes the two records of asking."""

    async def write_user_asked(self, record: UserAsked) -> None:
        await self._write("write_user_asked", record)

    async def write_user_answered(self, record: UserAnswered) -> None:
        await self._write("write_user_answered", record)


class AskingCrashBeforeStore(AskingCrashingStore):
    """Dies just before its ``crash_after``-th write (the side effect before it happened)."""

    async def _write(self, name: str, record: object) -> None:
        if len(self.writes) + 1 >= self.crash_after:
            raise Crash(f"crash before write #{len(self.writes) + 1} ({name})")
        await RecordingStore._write(self, name, record)


def approved_steps(log: RunLog) -> set[int]:
    """Steps whose ask was approved or edited."""
    return {a.step for a in log.answers if a.verdict in (Verdict.APPROVE, Verdict.EDIT)}


class LedgerEffects(Effects):
    """Effects written to a file, one line each, synced before the tool returns: what ran is
    known across processes, also those killed with SIGKILL. ``hang_on``: after writing the
    effect of that name, print ``in-action`` and hang (until killed)."""

    def __init__(self, path: str, hang_on: str = "") -> None:
        super().__init__()
        self.path = path
        self.hang_on = hang_on

    def hit(self, name: str) -> str:
        import os
        import sys
        import time

        with open(self.path, "a", encoding="utf-8") as ledger:
            ledger.write(name + "\n")
            ledger.flush()
            os.fsync(ledger.fileno())
        self.counts[name] += 1
        if name == self.hang_on:
            os.write(sys.stdout.fileno(), b"in-action\n")
            time.sleep(3600)
        return f"{name} done"

    def ledger(self) -> list[str]:
        try:
            with open(self.path, encoding="utf-8") as ledger:
                return ledger.read().split()
        except FileNotFoundError:
            return []
