"""The request options the gateway and the SDK-backed clients check alike (one function): each
client refuses the same bad value with the same message, naming itself."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import openai
import pytest

from polyloop.adapters.gateway import GatewayModelClient
from polyloop.adapters.litellm_client import LiteLLMModelClient
from polyloop.adapters.openai_client import OpenAIModelClient
from polyloop.errors import ConfigurationError

URL = "http://127.0.0.1:9/v1"

CLIENTS: dict[str, Callable[..., object]] = {
    "GatewayModelClient": lambda **options: GatewayModelClient(URL, "m", **options),
    "OpenAIModelClient": lambda **options: OpenAIModelClient(
        openai.AsyncOpenAI(base_url=URL, api_key="k"), "m", **options
    ),
    "LiteLLMModelClient": lambda **options: LiteLLMModelClient("openai/m", **options),
}

#: A bad option and what the message says after the client's name.
BAD: list[tuple[dict[str, Any], str]] = [
    ({"deadline": 0}, "deadline must be > 0 seconds, got 0."),
    ({"deadline": math.inf}, "deadline must be a finite number or None, got inf."),
    ({"temperature": True}, "temperature must be a finite number or None, got True."),
    ({"max_tokens": 2.5}, "max_tokens must be an int or None, got 2.5."),
    ({"seed": "1"}, "seed must be an int or None, got '1'."),
    ({"stop": "END"}, "stop must be a sequence of strings (not one string) or None."),
    ({"fail_on_finish_reasons": "length"}, "fail_on_finish_reasons must be a collection"),
    ({"extra_body": {"tools": []}}, "extra_body may not set ['tools']: the client owns"),
    ({"extra_body": {"top_k": {1, 2}}}, "extra_body must be JSON-serializable: "),
    ({"tool_choice": ""}, "tool_choice must be a non-empty string"),
    (
        {"tool_choice": "auto", "extra_body": {"tool_choice": "none"}},
        "got tool_choice both as an argument and in extra_body",
    ),
    ({"tool_choice": {"f": {1}}}, "tool_choice must be JSON-serializable: "),
    ({"parallel_tool_calls": "no"}, "parallel_tool_calls must be False (the default"),
]


@pytest.mark.parametrize("owner", sorted(CLIENTS))
@pytest.mark.parametrize(("options", "says"), BAD, ids=[repr(o) for o, _ in BAD])
def test_each_client_refuses_a_bad_option_naming_itself(
    owner: str, options: dict[str, Any], says: str
) -> None:
    with pytest.raises(ConfigurationError) as caught:
        CLIENTS[owner](**options)
    assert str(caught.value).startswith(f"{owner} {says}")


@pytest.mark.parametrize("owner", sorted(CLIENTS))
def test_good_options_are_kept_as_given(owner: str) -> None:
    client = CLIENTS[owner](
        temperature=0.5,
        stop=("END",),
        extra_body={"top_k": 3},
        tool_choice={"type": "function", "function": {"name": "add"}},
        parallel_tool_calls=None,
        fail_on_finish_reasons=("length",),
    )
    params = client.parameters()  # type: ignore[attr-defined]
    assert params["temperature"] == "0.5"
    assert params["stop"] == '["END"]'
    assert params["extra_body.top_k"] == "3"
    assert params["tool_choice"] == '{"function":{"name":"add"},"type":"function"}'
    assert params["parallel_tool_calls"] == "unset"
    assert params["fail_on_finish_reasons"] == '["length"]'
    assert params["seed"] == "unset"


@pytest.mark.parametrize("owner", sorted(CLIENTS))
def test_an_unknown_option_is_refused_naming_the_client(owner: str) -> None:
    with pytest.raises(TypeError, match=rf"^{owner}\.__init__\(\) got an unexpected keyword "):
        CLIENTS[owner](temprature=0.5)
