"""The driver killed during a model call: ``python -m tests.adapters.gateway._real_model_child
MODEL_URL DATABASE RUN_ID``.

Runs :func:`definition`'s agent on a SQLite store. Its model call asks the real model for a
long answer (end of turn suppressed: ``max_tokens`` tokens, seconds of work); just before the
request goes out the driver prints ``in-call <call_index>``, and the parent kills it with SIGKILL.
"""

from __future__ import annotations

import asyncio
import sys

from polyloop.adapters.gateway import GatewayModelClient
from polyloop.adapters.tool_calls import ToolCallReplyParser
from polyloop.ports import ModelCall
from polyloop.session import AgentDefinition, RunRequest, run
from polyloop.stores.sqlite import SqliteRunStore
from polyloop.testing import NullEventSink
from polyloop.tools import ToolRegistry
from polyloop.types import ModelReply
from tests.adapters.gateway._real_model import ENDLESS, TEXTS, model_client, native_request

#: Long enough that the kill lands inside the call, short enough for a test (a few seconds).
LONG_ANSWER_TOKENS = 64


class Announcing:
    """The gateway client, printing ``in-call N`` before each request."""

    def __init__(self, client: GatewayModelClient) -> None:
        self.client = client

    async def call(self, call: ModelCall) -> ModelReply:
        print(f"in-call {call.call_index}", flush=True)
        return await self.client.call(call)

    def parameters(self) -> dict[str, str]:
        return dict(self.client.parameters())


def definition(url: str, store: SqliteRunStore) -> tuple[AgentDefinition, GatewayModelClient]:
    client = model_client(url, max_tokens=LONG_ANSWER_TOKENS, extra_body=ENDLESS)
    agent = AgentDefinition(
        Announcing(client), ToolCallReplyParser(), store, NullEventSink(), TEXTS
    )
    return agent, client


def request(run_id: str) -> RunRequest:
    return native_request(run_id, ToolRegistry(), "Tell me a long story about a lighthouse.")


async def main(url: str, database: str, run_id: str) -> None:
    store = SqliteRunStore(database)
    agent, client = definition(url, store)
    async with client:
        await run(agent, request(run_id))
    print("finished", flush=True)


if __name__ == "__main__":
    asyncio.run(main(*sys.argv[1:4]))
