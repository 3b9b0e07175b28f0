"""Building blocks of the tests of runs that wait for a person (issue 24, design 0037).

Real seams: the scripted model and line parser of :mod:`polyloop.testing`, a registry whose
``refund`` tool requires approval and whose ``ask_user`` tool asks the user, and an effects
counter that tells what really ran.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from polyloop.ports import Action
from polyloop.session import AgentDefinition, RunRequest
from polyloop.tools import Tool, ToolRegistry, ToolSpec
from polyloop.types import Budget, ReplayPolicy
from tests.loop_kit import Effects, MixedExecutor, make_definition, make_request

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
