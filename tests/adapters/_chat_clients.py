"""The three chat-completions clients, built the same way against a loopback server.

``open_client(kind, base_url, ...)`` yields a :class:`GatewayModelClient`, an
:class:`OpenAIModelClient` over an ``openai.AsyncOpenAI`` or a :class:`LiteLLMModelClient`
(``openai/<model>`` against the same server), and closes what it opened. LiteLLM is told to use
its bundled price map (this machine has no network) and not to print its help banner.
"""

from __future__ import annotations

import contextlib
import os
import warnings
from collections.abc import AsyncIterator
from typing import Any

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

import openai

from polyloop.adapters.gateway import GatewayModelClient
from polyloop.adapters.litellm_client import LiteLLMModelClient
from polyloop.adapters.openai_client import OpenAIModelClient
from polyloop.ports import ModelCall, ModelClient
from polyloop.types import Message, Role, TextBlock

#: A distinctive fake key: any text that holds it is a leak.
API_KEY = "sk-polyloop-test-7d3e9a51-NEVER-IN-ANY-TEXT"

KINDS = ("gateway", "openai", "litellm")
SDK_KINDS = ("openai", "litellm")


def quiet_litellm() -> None:
    """No help banner; and pydantic's warning about one of LiteLLM's own TypedDicts (raised
    while it reads a stream) stays a warning here, where the suite turns warnings into errors."""
    import litellm

    litellm.suppress_debug_info = True
    warnings.filterwarnings("ignore", message=r".*is using the `ReadOnly` qualifier")
    warnings.filterwarnings(
        "ignore", message=r"Accessing the 'model_\w+' attribute on the instance"
    )


def make_call(text: str = "hi", *, index: int = 0, tools: tuple[Any, ...] = ()) -> ModelCall:
    return ModelCall(
        messages=(
            Message(Role.SYSTEM, (TextBlock("You are terse."),)),
            Message(Role.USER, (TextBlock(text),)),
        ),
        call_index=index,
        run_id="run-1",
        result_id=f"run-1/model/{index}",
        binding={"episode": "7"},
        tools=tools,
    )


@contextlib.asynccontextmanager
async def open_client(
    kind: str, base_url: str, *, api_key: str | None = API_KEY, **options: Any
) -> AsyncIterator[ModelClient]:
    """One client of ``kind`` for the API root ``base_url`` (``http://host:port/.../v1``)."""
    if kind == "gateway":
        async with GatewayModelClient(base_url, "test-model", api_key=api_key, **options) as gw:
            yield gw
    elif kind == "openai":
        sdk_options = {k: options.pop(k) for k in ("timeout", "max_retries") if k in options}
        sdk = openai.AsyncOpenAI(base_url=base_url, api_key=api_key, **sdk_options)
        try:
            yield OpenAIModelClient(sdk, "test-model", **options)
        finally:
            await sdk.close()
    elif kind == "litellm":
        quiet_litellm()
        yield LiteLLMModelClient("openai/test-model", api_base=base_url, api_key=api_key, **options)
    else:
        raise ValueError(kind)
