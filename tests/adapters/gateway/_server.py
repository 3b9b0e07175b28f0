"""Real HTTP servers on loopback for the gateway client's tests.

``FakeGateway`` is a small Starlette app served by uvicorn in a background thread; the URL
path selects a behaviour (``http://127.0.0.1:PORT/<scenario>/v1``). Every request it receives
is recorded. ``answer/<key>`` serves the :class:`Answer` a test put under ``answers[key]``,
as one JSON completion or, when the request asks to stream, as server-sent events. ``RawServer`` is a bare asyncio socket server for the misbehaviours an ASGI app
cannot produce (a response cut off mid-body).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import socket
import threading
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from typing import Any

import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response, StreamingResponse
from starlette.routing import Route

#: A marker placed at position 600 of the long error body: beyond the 500 characters kept.
LONG_BODY = "E" * 450 + "-head-end-" + "F" * 140 + "PAST-THE-LIMIT" + "G" * 400


@dataclass(frozen=True)
class Answer:
    """One completion, servable whole or streamed (each text in pieces of ``chunk_chars``)."""

    content: str | list[Any] | None = ""
    reasoning_content: str | None = None
    #: (name, arguments text) per native tool call.
    tool_calls: tuple[tuple[str, str], ...] = ()
    finish_reason: str | None = "stop"
    usage: dict[str, Any] | None = None
    id: str | None = "cmpl-answer"
    chunk_chars: int = 3
    #: False: the stream ends without ``data: [DONE]``.
    done_marker: bool = True
    #: Seconds to wait before each streamed chunk.
    delay: float = 0.0
    refusal: str | None = None
    #: The response's ``model``: the model that answered (left out when ``None``).
    model: str | None = None

    def message(self) -> dict[str, Any]:
        message: dict[str, Any] = {"role": "assistant", "content": self.content}
        if self.reasoning_content is not None:
            message["reasoning_content"] = self.reasoning_content
        if self.refusal is not None:
            message["refusal"] = self.refusal
        if self.tool_calls:
            message["tool_calls"] = [
                {"id": f"call_{i}", "type": "function", "function": {"name": n, "arguments": a}}
                for i, (n, a) in enumerate(self.tool_calls)
            ]
        return message

    def completion(self) -> dict[str, Any]:
        payload: dict[str, Any] = {
            "object": "chat.completion",
            "choices": [
                {"index": 0, "message": self.message(), "finish_reason": self.finish_reason}
            ],
        }
        if self.id is not None:
            payload["id"] = self.id
        if self.usage is not None:
            payload["usage"] = self.usage
        if self.model is not None:
            payload["model"] = self.model
        return payload

    def _pieces(self, text: str) -> list[str]:
        size = max(1, self.chunk_chars)
        return [text[i : i + size] for i in range(0, len(text), size)] or [""]

    def chunks(self, include_usage: bool) -> list[dict[str, Any]]:
        deltas: list[dict[str, Any]] = [{"role": "assistant"}]
        if isinstance(self.content, str):
            deltas += [{"content": piece} for piece in self._pieces(self.content)]
        elif isinstance(self.content, list):
            deltas.append({"content": self.content})
        if self.reasoning_content is not None:
            deltas += [{"reasoning_content": p} for p in self._pieces(self.reasoning_content)]
        if self.refusal is not None:
            deltas.append({"refusal": self.refusal})
        for index, (name, arguments) in enumerate(self.tool_calls):
            head = {"index": index, "id": f"call_{index}", "type": "function"}
            deltas.append({"tool_calls": [{**head, "function": {"name": name, "arguments": ""}}]})
            deltas += [
                {"tool_calls": [{"index": index, "function": {"arguments": piece}}]}
                for piece in self._pieces(arguments)
            ]
        chunks = [
            {"object": "chat.completion.chunk", "choices": [{"index": 0, "delta": delta}]}
            for delta in deltas
        ]
        chunks[-1]["choices"][0]["finish_reason"] = self.finish_reason
        if include_usage and self.usage is not None:
            chunks.append({"object": "chat.completion.chunk", "choices": [], "usage": self.usage})
        for chunk in chunks:
            if self.id is not None:
                chunk["id"] = self.id
            if self.model is not None:
                chunk["model"] = self.model
        return chunks


@dataclass(frozen=True)
class Received:
    scenario: str
    headers: dict[str, str]
    body: dict[str, Any]


def _last_text(body: dict[str, Any]) -> str:
    messages = body.get("messages") or [{"content": ""}]
    return str(messages[-1].get("content", ""))


class FakeGateway:
    def __init__(self) -> None:
        self.received: list[Received] = []
        #: Replies of the ``scripted/<key>`` scenarios, consumed in order per key.
        self.scripts: dict[str, list[str]] = {}
        #: Completions of the ``answer/<key>`` scenarios (a list is consumed in order).
        self.answers: dict[str, Answer | list[Answer]] = {}
        #: Keys of streams whose client went away before the last chunk was sent.
        self.abandoned_streams: list[str] = []
        #: The ``model`` every other scenario's response names (left out when ``None``).
        self.served_model: str | None = None
        self._lock = threading.Lock()
        self.app = Starlette(
            routes=[Route("/{scenario:path}/v1/chat/completions", self._handle, methods=["POST"])]
        )

    def requests_for(self, scenario: str) -> list[Received]:
        with self._lock:
            return [r for r in self.received if r.scenario == scenario]

    async def _handle(self, request: Request) -> Response:
        scenario = request.path_params["scenario"]
        raw = await request.body()
        try:
            body = json.loads(raw)
        except ValueError:
            body = {}
        with self._lock:
            self.received.append(Received(scenario, dict(request.headers), body))
        kind, _, arg = scenario.partition("/")
        result_id = request.headers.get("x-polyloop-result-id", "")
        message: dict[str, Any] = {"role": "assistant", "content": "echo:" + _last_text(body)}
        payload: dict[str, Any] = {"id": "cmpl-" + result_id, "object": "chat.completion"}
        if kind == "ok":
            pass
        elif kind == "reasoning_content":
            message["reasoning_content"] = "thought via reasoning_content"
        elif kind == "reasoning":
            message["reasoning"] = "thought via reasoning"
        elif kind == "empty":
            message["content"] = ""
            payload["id"] = ""
        elif kind == "null":
            message["content"] = None
            del payload["id"]
        elif kind == "status":
            return PlainTextResponse(LONG_BODY, status_code=int(arg.split("/")[0]))
        elif kind == "echo":
            # A careless gateway: it puts the request's headers and URL into its error body.
            echoed = {"headers": dict(request.headers), "url": str(request.url)}
            return JSONResponse({"error": echoed}, status_code=500)
        elif kind == "ratelimited":
            headers = {
                "Retry-After": "7",
                "x-ratelimit-remaining-requests": "0",
                "x-ratelimit-reset-tokens": "6m0s",
                "X-Unrelated": "not kept",
            }
            return PlainTextResponse("slow down", status_code=429, headers=headers)
        elif kind == "answer":
            with self._lock:
                entry = self.answers[arg]
                answer = entry.pop(0) if isinstance(entry, list) else entry
            if body.get("stream"):
                include = bool((body.get("stream_options") or {}).get("include_usage"))
                return StreamingResponse(
                    self._stream(arg, answer, include), media_type="text/event-stream"
                )
            return JSONResponse(answer.completion())
        elif kind == "notjson":
            return PlainTextResponse("<html>bad gateway page</html>", status_code=200)
        elif kind == "nomessage":
            return JSONResponse({"id": "x", "choices": [{"text": "legacy completion"}]})
        elif kind == "nochoices":
            return JSONResponse({"id": "x", "object": "chat.completion"})
        elif kind == "emptychoices":
            return JSONResponse({"id": "x", "choices": []})
        elif kind == "slow":
            await asyncio.sleep(float(arg.split("/")[0]))
        elif kind == "scripted":
            # Replies in order from the script the test put under ``scripts[arg]``.
            with self._lock:
                message["content"] = self.scripts[arg].pop(0)
            message["reasoning_content"] = "hmm"
        else:
            return PlainTextResponse(f"unknown scenario {scenario}", status_code=404)
        payload["choices"] = [{"index": 0, "message": message, "finish_reason": "stop"}]
        if self.served_model is not None:
            payload["model"] = self.served_model
        return JSONResponse(payload)

    async def _stream(self, key: str, answer: Answer, include_usage: bool) -> AsyncIterator[str]:
        finished = False
        try:
            for chunk in answer.chunks(include_usage):
                if answer.delay:
                    await asyncio.sleep(answer.delay)
                yield f"data: {json.dumps(chunk)}\n\n"
            if answer.done_marker:
                yield "data: [DONE]\n\n"
            finished = True
        finally:
            if not finished:
                with self._lock:
                    self.abandoned_streams.append(key)


@contextlib.contextmanager
def serve_in_thread(gateway: FakeGateway) -> Iterator[str]:
    """Serve ``gateway.app`` with uvicorn on 127.0.0.1 (free port); yield ``http://host:port``."""
    config = uvicorn.Config(
        gateway.app,
        host="127.0.0.1",
        port=0,
        log_level="warning",
        lifespan="off",
        ws="none",
        access_log=False,
        timeout_graceful_shutdown=1,
    )
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, name="fake-gateway", daemon=True)
    thread.start()
    try:
        for _ in range(500):
            if server.started:
                break
            if not thread.is_alive():
                raise RuntimeError("uvicorn exited before it started")
            threading.Event().wait(0.01)
        else:
            raise RuntimeError("uvicorn did not start within 5 s")
        port = server.servers[0].sockets[0].getsockname()[1]
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=10)


class RawServer:
    """An asyncio TCP server on 127.0.0.1 that answers every request with fixed bytes, then
    closes the connection (for a body shorter than its Content-Length: a cut-off response)."""

    def __init__(self, reply: bytes) -> None:
        self._reply = reply
        self._server: asyncio.Server | None = None

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            head = await reader.readuntil(b"\r\n\r\n")
            length = 0
            for line in head.split(b"\r\n"):
                name, _, value = line.partition(b":")
                if name.strip().lower() == b"content-length":
                    length = int(value)
            await reader.readexactly(length)
            writer.write(self._reply)
            await writer.drain()
        finally:
            writer.close()
            with contextlib.suppress(ConnectionError):
                await writer.wait_closed()

    @contextlib.asynccontextmanager
    async def running(self) -> AsyncIterator[str]:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        port = self._server.sockets[0].getsockname()[1]
        try:
            yield f"http://127.0.0.1:{port}"
        finally:
            self._server.close()
            await self._server.wait_closed()


def closed_port() -> int:
    """A loopback port with nothing listening (bound, then released)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
    return port


@contextlib.contextmanager
def unaccepting_listener() -> Iterator[int]:
    """A listener with a backlog of 0 whose queue is already full and never accepted:
    further connection attempts get no SYN-ACK, so they hang until the connect timeout."""
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    fillers: list[socket.socket] = []
    try:
        listener.bind(("127.0.0.1", 0))
        listener.listen(0)
        port: int = listener.getsockname()[1]
        for _ in range(4):
            filler = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            filler.setblocking(False)
            fillers.append(filler)
            with contextlib.suppress(BlockingIOError, OSError):
                filler.connect(("127.0.0.1", port))
        yield port
    finally:
        for filler in fillers:
            filler.close()
        listener.close()
