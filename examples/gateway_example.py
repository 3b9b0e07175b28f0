"""A governed run whose model sits behind an OpenAI-compatible gateway.

    POLYLOOP_GATEWAY_URL=http://127.0.0.1:8000/v1 POLYLOOP_MODEL=my-model \
        uv run python examples/gateway_example.py

(``POLYLOOP_API_KEY`` is sent as the bearer token when set.) Without ``POLYLOOP_GATEWAY_URL``
the example starts a tiny stand-in gateway on 127.0.0.1 that always answers ``FINAL: 4``, so
it runs anywhere. When the model call fails, it prints why and exits with status 1.
"""

import asyncio
import json
import os
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from polyloop.adapters.gateway import GATEWAY_URL_VARIABLE, MODEL_VARIABLE, GatewayModelClient
from polyloop.session import AgentDefinition, RunRequest, run
from polyloop.stores.memory import MemoryRunStore
from polyloop.testing import LineDecisionParser, NullEventSink
from polyloop.tools import ToolRegistry
from polyloop.types import (
    Budget,
    Context,
    Message,
    ReplayPolicy,
    Role,
    StopReason,
    SyntheticObservations,
)
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


async def main(environ: dict[str, str]) -> int:
    texts = SyntheticObservations("Call rejected.", "Environment failed.", "Model call failed.")
    tools = ToolRegistry()
    store = MemoryRunStore()
    # Reads POLYLOOP_GATEWAY_URL, POLYLOOP_MODEL and (when set) POLYLOOP_API_KEY.
    async with GatewayModelClient.from_environment(environ, temperature=0.0) as model:
        definition = AgentDefinition(model, LineDecisionParser(), store, NullEventSink(), texts)
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
    if result.stop_reason is StopReason.LLM_ERROR:
        # The step holds only the synthetic observation; the log keeps what really failed.
        failure = (await store.read_log(request.run_id)).model_results[-1].failure
        print(f"The model call failed: {failure}", file=sys.stderr)
        return 1
    print(result.stop_reason.value, result.final_answer, result.steps[0].call_id)
    return 0


if __name__ == "__main__":
    environ = dict(os.environ)
    server = None
    if GATEWAY_URL_VARIABLE not in environ:
        server = ThreadingHTTPServer(("127.0.0.1", 0), StandIn)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        environ[GATEWAY_URL_VARIABLE] = f"http://127.0.0.1:{server.server_address[1]}/v1"
        environ.setdefault(MODEL_VARIABLE, "demo-model")
    try:
        sys.exit(asyncio.run(main(environ)))
    finally:
        if server is not None:
            server.shutdown()
            server.server_close()
