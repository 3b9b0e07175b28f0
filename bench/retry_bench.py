"""Retries and pacing against a failing provider (issue 37, design 0065).

    uv run python bench/retry_bench.py [--episodes 2000] [--steps 10] [--rpm 12000]

A loopback OpenAI-compatible server in its own process answers after a fixed latency (20 ms);
30% of requests get 429 with ``Retry-After`` (``retry-after-ms: 200``) and 5% get 503. A batch
of episodes x steps (the stores benchmark's agent: ``noop`` until the last step) runs through
``RetryingModelClient(GatewayModelClient)`` with one ``RateLimiter`` shared by every episode,
on SQLite, 200 episodes at once. It prints the stop reasons (the goal: no ``llm_error``), the
requests the server saw by answer, the most requests it saw in any one second against the
configured rate, and the batch's own count of requests and retries. Requests go only to
127.0.0.1 and the run is bounded by the number of episodes.
"""

from __future__ import annotations

import argparse
import asyncio
import bisect
import json
import multiprocessing
import os
import random
import sys
import tempfile
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from polyloop.adapters.gateway import GatewayModelClient
from polyloop.adapters.retry import RateLimiter, RetryingModelClient, RetryPolicy
from polyloop.batch import Episode, EpisodeAgent, run_batch
from polyloop.ports import RunStore
from polyloop.session import AgentDefinition
from polyloop.stores.sqlite import SqliteRunStore
from stores_bench import setup  # the stores benchmark's agent (noop until the last step)

LATENCY = 0.020
P_429, P_503 = 0.30, 0.05


def _completion(content: str) -> bytes:
    return json.dumps(
        {
            "id": "cmpl-bench",
            "object": "chat.completion",
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": content},
                    "finish_reason": "stop",
                }
            ],
            "usage": {"prompt_tokens": 40, "completion_tokens": 4, "total_tokens": 44},
        }
    ).encode()


def serve(port_out: multiprocessing.connection.Connection, log: str, last_call: int) -> None:
    """The failing provider: a small HTTP/1.1 keep-alive server; each request's arrival time and
    answer are appended to ``log`` when the process is told to stop (SIGTERM)."""
    arrivals: list[tuple[float, int]] = []
    rng = random.Random(37)

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length, call_index = 0, 0
                for line in head.split(b"\r\n")[1:]:
                    name, _, value = line.partition(b":")
                    name = name.strip().lower()
                    if name == b"content-length":
                        length = int(value)
                    elif name == b"x-polyloop-call-index":
                        call_index = int(value)
                await reader.readexactly(length)
                arrived = time.monotonic()
                await asyncio.sleep(LATENCY)
                draw = rng.random()
                if draw < P_429:
                    status, body, extra = (
                        429,
                        b"slow down",
                        b"Retry-After: 1\r\nretry-after-ms: 200\r\n",
                    )
                elif draw < P_429 + P_503:
                    status, body, extra = 503, b"unavailable", b""
                else:
                    content = "FINAL: done" if call_index >= last_call else "CALL noop {}"
                    status, body, extra = 200, _completion(content), b""
                arrivals.append((arrived, status))
                reason = {200: b"OK", 429: b"Too Many Requests", 503: b"Service Unavailable"}[
                    status
                ]
                writer.write(
                    b"HTTP/1.1 %d %s\r\ncontent-type: application/json\r\ncontent-length: %d\r\n%s\r\n"
                    % (status, reason, len(body), extra)
                    + body
                )
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()

    async def main() -> None:
        server = await asyncio.start_server(handle, "127.0.0.1", 0, backlog=1024)
        port_out.send(server.sockets[0].getsockname()[1])
        stop = asyncio.Event()
        import signal

        asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
        await stop.wait()
        server.close()
        Path(log).write_text(json.dumps(arrivals))  # noqa: ASYNC240 - the server is stopping

    asyncio.run(main())


def most_within(times: list[float], seconds: float) -> int:
    """The most arrivals in any window of ``seconds``."""
    times = sorted(times)
    return max((bisect.bisect_left(times, t + seconds) - i for i, t in enumerate(times)), default=0)


async def bench(episodes: int, steps: int, rpm: float, concurrency: int) -> None:
    work = tempfile.mkdtemp(prefix="polyloop-retry-bench-")
    log = os.path.join(work, "arrivals.json")
    parent, child = multiprocessing.Pipe()
    server = multiprocessing.Process(target=serve, args=(child, log, steps - 1), daemon=True)
    server.start()
    port = parent.recv()
    # This server's 429s are drawn at random, not caused by the load: pausing every episode on
    # each would only slow the batch down.
    limiter = RateLimiter(max_in_flight=concurrency, requests_per_minute=rpm, pause_on_429=False)
    policy = RetryPolicy(max_attempts=12, initial_delay=0.05, max_delay=2.0, max_total_seconds=120)
    client = GatewayModelClient(f"http://127.0.0.1:{port}/v1", "bench", max_connections=concurrency)

    @asynccontextmanager
    async def factory(episode: Episode, store: RunStore) -> AsyncIterator[EpisodeAgent]:
        definition, request = setup(store, steps, episode.run_id)
        model = RetryingModelClient(client, policy, limiter=limiter)
        yield EpisodeAgent(
            AgentDefinition(
                model,
                definition.decision_parser,
                store,
                definition.event_sink,
                definition.synthetic_observations,
            ),
            request,
        )

    import logging

    logging.getLogger("polyloop.adapters.retry").setLevel(logging.ERROR)  # thousands of lines
    started = time.monotonic()
    async with SqliteRunStore(Path(work) / "runs.sqlite") as store:
        summary = await run_batch(
            (Episode(f"ep-{i}", {}) for i in range(episodes)),
            factory,
            store,
            concurrency=concurrency,
            total=episodes,
        )
    wall = time.monotonic() - started
    await client.aclose()
    server.terminate()
    server.join(timeout=30)
    arrivals = json.loads(Path(log).read_text())  # noqa: ASYNC240 - the batch is over
    by_status: dict[int, int] = {}
    for _, status in arrivals:
        by_status[status] = by_status.get(status, 0) + 1
    times = [t for t, _ in arrivals]
    peaks = {window: most_within(times, window) for window in (1.0, 10.0, 60.0)}
    usage = summary.model_usage
    print(f"episodes {episodes} x {steps} steps, concurrency {concurrency}, limit {rpm:g}/min")
    print(
        f"  stop reasons: {dict(summary.by_stop_reason)}  errors: {summary.by_status.get('error', 0)}"
    )
    print(f"  server saw {len(arrivals)} requests: {by_status}")
    for window, peak in peaks.items():
        print(
            f"  most requests in any {window:g} s: {peak} "
            f"(the limit allows {rpm / 60 * window:.0f})"
        )
    print(
        f"  batch counted: {usage.calls} calls, {usage.requests} requests, {usage.retries} retries"
    )
    print(f"  wall {wall:.1f} s, {summary.steps / wall:.0f} steps/s")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--episodes", type=int, default=2000)
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--rpm", type=float, default=12_000.0)
    parser.add_argument("--concurrency", type=int, default=200)
    args = parser.parse_args()
    asyncio.run(bench(args.episodes, args.steps, args.rpm, args.concurrency))


if __name__ == "__main__":
    main()
