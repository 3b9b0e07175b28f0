"""Capture what a real chat-completions server answers to a request that invites parallel tool
calls, whole and streamed, as a fixture for ``tests/adapters/gateway/test_captured_replies.py``.

    uv run python scripts/capture_gateway_replies.py --base-url http://127.0.0.1:4000/v1 \\
        --model my-model --name litellm-parallel --source "LiteLLM proxy 1.x"

The request offers two tools (``get_current_time``, ``write_file``) and asks for both; it sets
``tool_choice`` to ``"auto"`` (llama.cpp's server ignores ``tools`` without it) and does not
send ``parallel_tool_calls``, so the server's default behaviour is what is captured. The API
key, when needed, is read from ``$POLYLOOP_API_KEY`` and never written to the fixture: the
file holds the request body, the response body (whole) and the decoded stream chunks, nothing
of the headers. Review the file before committing it (a server may echo the prompt).
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import pathlib
import sys
from typing import Any

import httpx

FIXTURES = pathlib.Path(__file__).resolve().parent.parent / "tests/adapters/gateway/captured"

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_current_time",
            "description": "The current time, ISO 8601.",
            "parameters": {"type": "object", "properties": {}},
        },
    },
    {
        "type": "function",
        "function": {
            "name": "write_file",
            "description": "Write text to a file.",
            "parameters": {
                "type": "object",
                "properties": {"path": {"type": "string"}, "text": {"type": "string"}},
                "required": ["path", "text"],
            },
        },
    },
]
PROMPT = (
    "Call get_current_time and, in the same reply, call write_file to save the text "
    "'time noted' to time.txt. Call both tools now."
)


def request_body(model: str, stream: bool) -> dict[str, Any]:
    body: dict[str, Any] = {
        "model": model,
        "messages": [{"role": "user", "content": PROMPT}],
        "tools": TOOLS,
        "tool_choice": "auto",
        "stream": stream,
        "temperature": 0,
    }
    if stream:
        body["stream_options"] = {"include_usage": True}
    return body


def stream_chunks(response: httpx.Response) -> list[Any]:
    chunks: list[Any] = []
    for line in response.iter_lines():
        if not line.startswith("data:"):
            continue
        data = line[len("data:") :].strip()
        if data == "[DONE]":
            return chunks
        chunks.append(json.loads(data))
    raise SystemExit("the stream ended without 'data: [DONE]'; nothing written")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--base-url", required=True, help="the API root, e.g. http://127.0.0.1:4000/v1"
    )
    parser.add_argument("--model", required=True)
    parser.add_argument("--name", required=True, help="fixture name: captured/<name>.json")
    parser.add_argument("--source", required=True, help="which server and version answered")
    parser.add_argument("--out-dir", type=pathlib.Path, default=FIXTURES)
    parser.add_argument("--timeout", type=float, default=300.0)
    args = parser.parse_args(argv)
    key = os.environ.get("POLYLOOP_API_KEY")
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    url = args.base_url.rstrip("/") + "/chat/completions"
    with httpx.Client(timeout=args.timeout, headers=headers, trust_env=False) as client:
        whole = client.post(url, json=request_body(args.model, stream=False))
        if whole.status_code != 200:
            print(
                f"whole request failed: HTTP {whole.status_code}: {whole.text[:500]}",
                file=sys.stderr,
            )
            return 1
        with client.stream("POST", url, json=request_body(args.model, stream=True)) as streamed:
            if streamed.status_code != 200:
                streamed.read()
                print(
                    f"stream failed: HTTP {streamed.status_code}: {streamed.text[:500]}",
                    file=sys.stderr,
                )
                return 1
            chunks = stream_chunks(streamed)
    fixture = {
        "source": args.source,
        "how": f"captured by scripts/capture_gateway_replies.py on {datetime.date.today()}",
        "request": request_body("<model>", stream=False),
        "whole": whole.json(),
        "stream": chunks,
    }
    args.out_dir.mkdir(parents=True, exist_ok=True)
    target = args.out_dir / f"{args.name}.json"
    target.write_text(json.dumps(fixture, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    print(f"wrote {target}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
