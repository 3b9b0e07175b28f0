"""The demo's agent: a support ticket that needs one refund, with a side-effect ledger.

Three tools, one per replay policy question:

- ``lookup_order`` (``safe``): reads the order; repeating it is harmless.
- ``issue_refund`` (``never``): moves money; it must not happen twice.
- ``close_ticket`` (``never``, ``completes_run``): closes the ticket and so ends the run.

Every tool execution appends one line to a ledger file (JSON, one object per line, with the
run_id, the tool and the process id), *before* it returns: the ledger is the outside world, and
counting its lines says how often each side effect really happened, whatever the run log says.

Both the worker process and the resuming parent build the agent with :func:`build_agent`, so the
parameter snapshot is the same in both (resume refuses a changed configuration).
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from polyloop.ports import Event, EventKind, ModelClient, RunStore
from polyloop.session import AgentDefinition, RunRequest
from polyloop.testing import LineDecisionParser, ScriptedModelClient, reply
from polyloop.tools import Tool, ToolRegistry, ToolSpec
from polyloop.types import (
    Budget,
    Context,
    Message,
    ReplayPolicy,
    Role,
    SyntheticObservations,
    TextBlock,
)

__all__ = [
    "DEMO_BINDING",
    "GOAL",
    "ORDER",
    "SCRIPT",
    "TOOL_POLICIES",
    "ModelConfig",
    "PauseHook",
    "build_agent",
    "read_ledger",
]

ORDER: Mapping[str, Any] = {
    "order_id": "A-1042",
    "customer": "R. Okafor",
    "items": [
        {"sku": "LAMP-3", "name": "desk lamp", "price_cents": 3490, "delivered": True},
        {"sku": "BULB-7", "name": "spare bulb", "price_cents": 1990, "delivered": False},
    ],
    "currency": "EUR",
}

GOAL = (
    "Ticket #5531: the customer of order A-1042 says one item never arrived. Look the order "
    "up, refund exactly the undelivered item, then close the ticket with a short note."
)

#: What the built-in scripted model answers, by call index (the line protocol of
#: :class:`~polyloop.testing.LineDecisionParser`).
SCRIPT: tuple[str, ...] = (
    'CALL lookup_order {"order_id": "A-1042"}',
    'CALL issue_refund {"amount_cents": 1990, "order_id": "A-1042", "sku": "BULB-7"}',
    'CALL close_ticket {"note": "Refunded 19.90 EUR for the undelivered spare bulb.", '
    '"order_id": "A-1042"}',
)

TOOL_POLICIES: Mapping[str, ReplayPolicy] = {
    "lookup_order": ReplayPolicy.SAFE,
    "issue_refund": ReplayPolicy.NEVER,
    "close_ticket": ReplayPolicy.NEVER,
}

#: The demo's model binding (``request.model_binding.demo`` in its snapshot): how the CLI
#: tells the demo's runs from others.
DEMO_BINDING = "refund-ticket"

SYSTEM_PROMPT = (
    "You are a support agent. You act only through tools. Reply with exactly one line: either "
    "CALL <tool> <json object of arguments>, or FINAL: <answer> when you cannot go on."
)
TOOL_SECTION = "Tools (JSON Schema of each tool's arguments): {tools}"
OBSERVATION = "Tool result: {observation}"


@dataclass(frozen=True, slots=True)
class ModelConfig:
    """``None`` fields mean the built-in scripted model. The API key is read from the
    environment (``POLYLOOP_API_KEY``) where the client is built, never passed around."""

    base_url: str | None = None
    model: str | None = None

    @property
    def scripted(self) -> bool:
        return self.base_url is None or self.model is None

    def to_json(self) -> dict[str, str | None]:
        return {"base_url": self.base_url, "model": self.model}


#: Called inside a tool, after its side effect, with the tool name; may never return (the
#: worker uses it to wait for its SIGKILL).
PauseHook = Callable[[str], Any]


def _append(ledger: Path, entry: Mapping[str, object]) -> None:
    line = json.dumps(dict(entry), sort_keys=True) + "\n"
    with open(ledger, "a", encoding="utf-8") as handle:
        handle.write(line)
        handle.flush()
        os.fsync(handle.fileno())


def read_ledger(ledger: Path, run_id: str) -> list[dict[str, Any]]:
    """The ledger entries of ``run_id``, in order."""
    if not ledger.exists():
        return []
    entries = []
    for line in ledger.read_text(encoding="utf-8").splitlines():
        if line.strip():
            entry = json.loads(line)
            if entry.get("run_id") == run_id:
                entries.append(entry)
    return entries


def _tools(
    run_id: str, ledger: Path, pause: PauseHook | None, approval: bool = False
) -> ToolRegistry:
    async def effect(tool: str, detail: Mapping[str, object], result: str) -> str:
        _append(ledger, {"run_id": run_id, "tool": tool, "pid": os.getpid(), **detail})
        if pause is not None:
            outcome = pause(tool)
            if asyncio.iscoroutine(outcome):
                await outcome
        return result

    async def lookup_order(arguments: Mapping[str, object]) -> str:
        if arguments["order_id"] != ORDER["order_id"]:
            return f"No order {arguments['order_id']!r}."
        return await effect("lookup_order", {}, json.dumps(ORDER, sort_keys=True))

    async def issue_refund(arguments: Mapping[str, object]) -> str:
        amount = arguments["amount_cents"]
        detail = {"amount_cents": amount, "sku": arguments.get("sku")}
        return await effect(
            "issue_refund",
            detail,
            f"Refund R-{arguments['order_id']}-1 of {amount} cents issued to the customer.",
        )

    async def close_ticket(arguments: Mapping[str, object]) -> str:
        return await effect("close_ticket", {}, "Ticket #5531 closed.")

    order_id = {"order_id": {"type": "string"}}
    return ToolRegistry(
        [
            Tool(
                ToolSpec(
                    "lookup_order",
                    "Read an order: items, prices, delivery state.",
                    {
                        "type": "object",
                        "properties": order_id,
                        "required": ["order_id"],
                        "additionalProperties": False,
                    },
                    replay_policy=TOOL_POLICIES["lookup_order"],
                ),
                lookup_order,
            ),
            Tool(
                ToolSpec(
                    "issue_refund",
                    "Refund an amount to the customer's card. Moves money: never repeat it.",
                    {
                        "type": "object",
                        "properties": {
                            **order_id,
                            "amount_cents": {"type": "integer", "minimum": 1},
                            "sku": {"type": "string"},
                        },
                        "required": ["order_id", "amount_cents"],
                        "additionalProperties": False,
                    },
                    replay_policy=TOOL_POLICIES["issue_refund"],
                    requires_approval=approval,
                ),
                issue_refund,
            ),
            Tool(
                ToolSpec(
                    "close_ticket",
                    "Close the ticket with a note to the customer. Ends the task.",
                    {
                        "type": "object",
                        "properties": {**order_id, "note": {"type": "string"}},
                        "required": ["order_id", "note"],
                        "additionalProperties": False,
                    },
                    replay_policy=TOOL_POLICIES["close_ticket"],
                    completes_run=True,
                ),
                close_ticket,
            ),
        ]
    )


def model_client(config: ModelConfig) -> ModelClient:
    """The scripted model, or the gateway client for an OpenAI-compatible endpoint."""
    if config.scripted:
        return ScriptedModelClient(
            [reply(text) for text in SCRIPT], by_call_index=True, name="polyloop-demo"
        )
    from polyloop.adapters.gateway import API_KEY_VARIABLE, GatewayModelClient

    assert config.base_url is not None
    assert config.model is not None
    return GatewayModelClient(
        config.base_url,
        config.model,
        api_key=os.environ.get(API_KEY_VARIABLE) or None,
        temperature=0.0,
        timeout=120.0,
    )


class PrintingSink:
    """Hands every event to ``on_event``; the demo prints steps as they complete."""

    def __init__(self, on_event: Callable[[Event], None]) -> None:
        self._on_event = on_event

    async def emit(self, event: Event) -> None:
        self._on_event(event)

    def parameters(self) -> Mapping[str, str]:
        return {"kind": "demo_printer"}


def build_agent(
    *,
    run_id: str,
    store: RunStore,
    ledger: Path,
    model: ModelClient,
    on_event: Callable[[Event], None] = lambda event: None,
    pause: PauseHook | None = None,
    approval: bool = False,
) -> tuple[AgentDefinition, RunRequest]:
    """The demo's definition and request. ``pause`` and ``on_event`` change nothing that the
    parameter snapshot sees, so a run started with them resumes without them. ``approval``:
    ``issue_refund`` waits for a person's approval (``polyloop demo --approval``)."""
    definition = AgentDefinition(
        model_client=model,
        decision_parser=LineDecisionParser(),
        store=store,
        event_sink=PrintingSink(on_event),
        synthetic_observations=SyntheticObservations(
            action_rejected="That tool call was rejected (unknown tool or invalid arguments).",
            env_failed="The environment failed; the run stops.",
            model_call_failed="The model call failed.",
        ),
    )
    tools = _tools(run_id, ledger, pause, approval)
    request = RunRequest(
        run_id=run_id,
        budget=Budget(
            max_steps=8, max_actions=6, max_consecutive_parse_failures=2, max_prompt_chars=60_000
        ),
        action_executor=tools.executor(),
        tools=tools,
        context=Context(
            run_level=(Message(Role.SYSTEM, (TextBlock(SYSTEM_PROMPT),)),),
            goal_level=(Message(Role.USER, (TextBlock(GOAL),)),),
        ),
        injections={},
        model_binding={"demo": DEMO_BINDING},
        model_replay_policy=ReplayPolicy.SAFE,
        observation_template=OBSERVATION,
        tool_section_template=TOOL_SECTION,
        cancel_grace_seconds=2.0,
    )
    return definition, request


def event_json(event: Event) -> dict[str, Any]:
    """A compact JSON form of an event for the worker's progress lines."""
    data: dict[str, Any] = {
        "event": event.kind.value,
        "run_id": event.run_id,
        "step": event.step_idx,
    }
    if event.kind is EventKind.STEP_COMPLETED and event.step is not None:
        step = event.step
        data.update(
            tool=step.tool_name,
            action=step.action,
            status=None if step.action_status is None else step.action_status.value,
            observation=step.observation,
        )
    if event.kind is EventKind.RUN_FINISHED and event.result is not None:
        data["stop_reason"] = event.result.stop_reason.value
    return data


def emit_line(data: Mapping[str, Any]) -> None:
    """One protocol line on the worker's stdout."""
    sys.stdout.write(json.dumps(dict(data), sort_keys=True) + "\n")
    sys.stdout.flush()
