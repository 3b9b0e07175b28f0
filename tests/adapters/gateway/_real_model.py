"""The real model of the tests (design 0066): Gemma 3 270M served by llama-cpp-python's
OpenAI-compatible server (``scripts/model-test-server.sh``), reached through the gateway.

A model this small calls a tool reliably only when ``tool_choice`` names it (llama-cpp-python
then constrains the arguments to the tool's JSON schema); left free, it answers in prose. So a
run that needs a call forces it on its first call only (:class:`FirstCallForced`) and lets the
model answer freely once it has the tool's result: forced on every call, it would call forever.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from polyloop.adapters.gateway import GatewayModelClient
from polyloop.ports import ModelCall
from polyloop.session import RunRequest
from polyloop.tools import ToolRegistry
from polyloop.types import (
    Budget,
    Context,
    Message,
    ModelReply,
    ReplayPolicy,
    Role,
    SyntheticObservations,
    TextBlock,
)

#: The name the server serves the model under (``--model_alias`` in the script).
MODEL = "gemma-3-270m"
#: Gemma 3's end-of-sequence and end-of-turn tokens: biased away, the model writes exactly
#: ``max_tokens`` tokens, so a call lasts as long as a test needs it to.
ENDLESS = {"logit_bias": {"1": -100, "106": -100}}
TEXTS = SyntheticObservations("Rejected.", "Environment failed.", "Model call failed.")


def model_client(url: str, **options: Any) -> GatewayModelClient:
    """A gateway client of the real model: greedy (temperature 0, fixed seed), short replies."""
    settings: dict[str, Any] = {"temperature": 0.0, "seed": 7, "max_tokens": 24, "timeout": 300.0}
    settings.update(options)
    return GatewayModelClient(url, MODEL, **settings)


def forced(tool: str) -> dict[str, object]:
    """The ``tool_choice`` that makes the server call ``tool``."""
    return {"type": "function", "function": {"name": tool}}


class FirstCallForced:
    """A model client whose first call must call ``tool`` and whose later calls are free: two
    gateway clients of one server, chosen by ``call_index``. Its parameters are the free
    client's, plus the forced one's ``tool_choice`` as ``first_call.tool_choice``."""

    def __init__(self, url: str, tool: str, **options: Any) -> None:
        self.forced = model_client(url, native_tools=True, tool_choice=forced(tool), **options)
        self.free = model_client(url, native_tools=True, **options)

    async def call(self, call: ModelCall) -> ModelReply:
        chosen = self.forced if call.call_index == 0 else self.free
        return await chosen.call(call)

    def parameters(self) -> Mapping[str, str]:
        return {
            **self.free.parameters(),
            "first_call.tool_choice": self.forced.parameters()["tool_choice"],
        }

    async def aclose(self) -> None:
        await self.forced.aclose()
        await self.free.aclose()


def native_request(
    run_id: str, tools: ToolRegistry, question: str, *, max_steps: int = 4
) -> RunRequest:
    """A native-tools run (design 0046) asking ``question``."""
    return RunRequest(
        run_id=run_id,
        budget=Budget(
            max_steps=max_steps,
            max_actions=max_steps,
            max_consecutive_parse_failures=2,
            max_prompt_chars=20_000,
        ),
        action_executor=tools.executor(),
        tools=tools,
        context=Context((), (Message(Role.USER, (TextBlock(question),)),)),
        injections={},
        model_binding={},
        model_replay_policy=ReplayPolicy.SAFE,
        observation_template="{observation}",
        tool_section_template="",
        cancel_grace_seconds=1.0,
        native_tools=True,
    )
