"""A loopback server that replays replies captured from real chat-completions servers.

Each fixture in ``captured/<name>.json`` (written by ``scripts/capture_gateway_replies.py``, or
reconstructed by hand where a server could not run here: its ``how`` says which) holds one
``whole`` completion and the ``stream`` chunks of the same answer. ``replay/<name>/v1`` answers
the first call of a run (``X-PolyLoop-Call-Index: 0``) with that reply, as JSON or as
server-sent events when the request streams, and every later call with a plain final text, so
a governed run ends after the captured step. Every request body is recorded.
"""

from __future__ import annotations

import json
import pathlib
import threading
from collections.abc import AsyncIterator
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

CAPTURED = pathlib.Path(__file__).with_name("captured")
FINAL_TEXT = "All done."


def fixture(name: str) -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads((CAPTURED / f"{name}.json").read_text(encoding="utf-8"))
    return loaded


def fixture_names() -> list[str]:
    return sorted(path.stem for path in CAPTURED.glob("*.json"))


def _final(stream: bool) -> dict[str, Any] | list[dict[str, Any]]:
    message = {"role": "assistant", "content": FINAL_TEXT}
    if not stream:
        return {
            "id": "final",
            "choices": [{"index": 0, "message": message, "finish_reason": "stop"}],
        }
    return [
        {"id": "final", "choices": [{"index": 0, "delta": message, "finish_reason": None}]},
        {"id": "final", "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]},
    ]


class ReplayGateway:
    def __init__(self) -> None:
        self.received: list[tuple[str, dict[str, Any]]] = []
        self._lock = threading.Lock()
        self.app = Starlette(
            routes=[Route("/replay/{name}/v1/chat/completions", self._handle, methods=["POST"])]
        )

    def bodies(self, name: str) -> list[dict[str, Any]]:
        with self._lock:
            return [body for seen, body in self.received if seen == name]

    async def _handle(self, request: Request) -> Response:
        name = request.path_params["name"]
        body = json.loads(await request.body())
        with self._lock:
            self.received.append((name, body))
        stream = bool(body.get("stream"))
        first = request.headers.get("x-polyloop-call-index", "0") == "0"
        captured = fixture(name)
        answer = (captured["stream"] if stream else captured["whole"]) if first else _final(stream)
        if not stream:
            return JSONResponse(answer)
        return StreamingResponse(self._events(answer), media_type="text/event-stream")

    async def _events(self, chunks: list[dict[str, Any]]) -> AsyncIterator[str]:
        for chunk in chunks:
            yield f"data: {json.dumps(chunk)}\n\n"
        yield "data: [DONE]\n\n"
