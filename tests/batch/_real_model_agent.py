"""The episode factory of the real-model batch: ``tests.batch._real_model_agent:factory``.

Each episode (data: ``model_url``, the server's API root; ``city``, one of :data:`CITIES`)
asks the real model (design 0066) for a city's weather with a ``weather`` tool: its first call
is forced to call ``weather`` natively, the tool runs, and its second call answers freely. The
tool's argument is an enum, so the server's grammar bounds the call (a free integer let the
model write digits past ``max_tokens``).
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Mapping

from polyloop.adapters.tool_calls import ToolCallReplyParser
from polyloop.batch import Episode, EpisodeAgent
from polyloop.ports import RunStore
from polyloop.session import AgentDefinition
from polyloop.testing import NullEventSink
from polyloop.tools import Tool, ToolRegistry, ToolSpec
from polyloop.types import ReplayPolicy
from tests.adapters.gateway._real_model import TEXTS, FirstCallForced, native_request

CITIES = ("Paris", "Lima", "Oslo", "Cairo", "Tokyo")


def weather(arguments: Mapping[str, object]) -> str:
    return f"Sunny and 21 degrees in {arguments.get('city')}."


WEATHER = Tool(
    ToolSpec(
        "weather",
        "The weather in a city today.",
        {
            "type": "object",
            "properties": {"city": {"type": "string", "enum": list(CITIES)}},
            "required": ["city"],
        },
        replay_policy=ReplayPolicy.SAFE,
    ),
    weather,
)


@contextlib.asynccontextmanager
async def factory(episode: Episode, store: RunStore) -> AsyncIterator[EpisodeAgent]:
    data = episode.data
    client = FirstCallForced(str(data["model_url"]), "weather", max_tokens=12)
    try:
        definition = AgentDefinition(client, ToolCallReplyParser(), store, NullEventSink(), TEXTS)
        question = f"What is the weather in {data['city']} today?"
        yield EpisodeAgent(
            definition, native_request(episode.run_id, ToolRegistry([WEATHER]), question)
        )
    finally:
        await client.aclose()
