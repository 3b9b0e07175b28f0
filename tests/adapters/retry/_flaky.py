"""An OpenAI-compatible loopback server scripted to fail: ``/<key>/v1/chat/completions`` serves
the failures a test put under ``failures[key]`` first, in order, then a completion. Every
request's arrival (monotonic clock) is recorded per key."""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response
from starlette.routing import Route

USAGE = {"prompt_tokens": 20, "completion_tokens": 5, "total_tokens": 25}


@dataclass(frozen=True)
class Fail:
    """One failed answer: an HTTP status and, optionally, a ``Retry-After`` in seconds."""

    status: int
    retry_after: float | None = None


@dataclass
class FlakyServer:
    failures: dict[str, list[Fail]] = field(default_factory=dict)
    #: Keys whose every request fails with this (after the scripted ones).
    always: dict[str, Fail] = field(default_factory=dict)
    #: Replies after the failures, per key (default "FINAL: done").
    replies: dict[str, list[str]] = field(default_factory=dict)
    arrivals: dict[str, list[float]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self._lock = threading.Lock()
        self.app = Starlette(
            routes=[Route("/{key:path}/v1/chat/completions", self._handle, methods=["POST"])]
        )

    def count(self, key: str) -> int:
        with self._lock:
            return len(self.arrivals.get(key, []))

    async def _handle(self, request: Request) -> Response:
        key = request.path_params["key"]
        await request.body()
        with self._lock:
            self.arrivals.setdefault(key, []).append(time.monotonic())
            queue = self.failures.get(key, [])
            fail = queue.pop(0) if queue else self.always.get(key)
            script = self.replies.get(key)
            content = script.pop(0) if script else "FINAL: done"
        if fail is not None:
            headers = {} if fail.retry_after is None else {"Retry-After": f"{fail.retry_after:g}"}
            return PlainTextResponse(
                f"scripted failure {fail.status}", status_code=fail.status, headers=headers
            )
        return JSONResponse(
            {
                "id": f"cmpl-{key}",
                "object": "chat.completion",
                "choices": [
                    {
                        "index": 0,
                        "message": {"role": "assistant", "content": content},
                        "finish_reason": "stop",
                    }
                ],
                "usage": USAGE,
            }
        )
