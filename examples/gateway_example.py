"""A governed run whose model sits behind an OpenAI-compatible gateway.

    POLYLOOP_GATEWAY_URL=http://127.0.0.1:8000/v1 POLYLOOP_MODEL=my-model \
        uv run python examples/gateway_example.py

(``POLYLOOP_API_KEY`` is sent as the bearer token when set.) Without ``POLYLOOP_GATEWAY_URL``
the example starts a tiny stand-in gateway on 127.0.0.1 that always answers ``FINAL: 4``, so
it runs anywhere.
"""

import asyncio
import json
import os
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from polyloop.adapters.gateway import GatewayModelClient
from polyloop.session import AgentDefinition, RunRequest, run
from polyloop.stores.memory import MemoryRunStore
from polyloop.testing import LineDecisionParser, NullEventSink
from polyloop.tools import ToolRegistry
from polyloop.types import Budget, Context, Message, ReplayPolicy, Role, SyntheticObservations
from polyloop.types import TextBlock as Text


class StandIn(BaseHTTPRequestHandler):
    def do_POST(self) -> None:
        self.rfile.read(int(self.headers["Content-Length"]))
        body = json.dumps({"id": "demo-1", "choices": [{"message": {"content": "FINAL: 4"}}]})
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body.encode())

    def log_message(self, *args: object) -> None:
        pass


async def main(base_url: str, model_name: str) -> None:
    texts = SyntheticObservations("Call rejected.", "Environment failed.", "Model call failed.")
    tools = ToolRegistry()
    async with GatewayModelClient(
        base_url, model_name, api_key=os.environ.get("POLYLOOP_API_KEY"), temperature=0.0
    ) as model:
        definition = AgentDefinition(
            model, LineDecisionParser(), MemoryRunStore(), NullEventSink(), texts
        )
        request = RunRequest(
            run_id="gateway-example-1",
            budget=Budget(max_steps=3, max_actions=1, max_consecutive_parse_failures=2, max_prompt_chars=20_000),
            action_executor=tools.executor(),
            tools=tools,
            context=Context(
                (Message(Role.SYSTEM, (Text("Answer as: FINAL: <answer>"),)),),
                (Message(Role.USER, (Text("What is 2 + 2?"),)),),
            ),
            injections={},
            model_binding={"episode": "1"},  # sent as the X-PolyLoop-Binding header
            model_replay_policy=ReplayPolicy.SAFE,
            observation_template="Observation: {observation}",
            tool_section_template="",
            cancel_grace_seconds=1.0,
        )  # fmt: skip
        result = await run(definition, request)
    print(result.stop_reason.value, result.final_answer, result.steps[0].call_id)


if __name__ == "__main__":
    url = os.environ.get("POLYLOOP_GATEWAY_URL")
    server = None
    if url is None:
        server = ThreadingHTTPServer(("127.0.0.1", 0), StandIn)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        url = f"http://127.0.0.1:{server.server_address[1]}/v1"
    try:
        asyncio.run(main(url, os.environ.get("POLYLOOP_MODEL", "demo-model")))
    finally:
        if server is not None:
            server.shutdown()
            server.server_close()
