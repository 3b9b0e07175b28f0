"""A real model client's throughput (issue 37): PolyLoop against a hand-written loop, and Ray.

    uv run python bench/model_throughput_bench.py [--sections AB] [--episodes N] [--rounds R]
        [--py-spy DIR] [--check]

- **A. One process, SQLite, a model over HTTP.** A loopback OpenAI-compatible server in its own
  process answers every request after a fixed 20 ms (no failures). 200 episodes in flight x 10
  steps (the stores benchmark's agent: ``noop`` until the last step), through
  ``GatewayModelClient`` (httpx), ``run_batch`` on ``SqliteRunStore`` (WAL, ``synchronous=FULL``).
  The baseline in the same run: plain asyncio, the same ``httpx.AsyncClient`` settings, the same
  requests (the conversation grows by a turn each step), and one synced SQLite write per step
  (one row, committed on its own, WAL, ``synchronous=FULL``, on one writer thread), no PolyLoop.
  The two alternate, each on a fresh file; the figure is PolyLoop's episodes/s over the
  baseline's (target: at least 0.60), with this process's CPU time per episode of each.
- **B. One Ray worker at issue 14's setting.** 50 episodes at once in one worker process, 10
  steps, a fixed 20 ms model latency, PostgreSQL (``--url``, else ``POLYLOOP_TEST_POSTGRES_URL``,
  else a throwaway cluster), on the batch tests' local Ray cluster: episodes/s against the latency
  bound (50 / (10 x 20 ms) = 250; target: at least 150), with the worker's CPU seconds per
  second. Beside it, the same episodes in this process (``run_batch``, no Ray): what the loop
  and the store client cost without Ray's transport.

``--py-spy DIR`` samples (with ``py-spy``, on PATH or in ``~/.local/bin``) the PolyLoop rounds of
A and the Ray worker of B, and prints where the CPU went by part (loop, store, HTTP, JSON, ...).
``--check`` exits 1 when a target is missed. Timings on a shared machine are noisy: the ratio of
A is measured in the same run and the CPU figures matter more than the wall ones.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import concurrent.futures
import contextlib
import json
import multiprocessing
import multiprocessing.connection
import os
import re
import shutil
import signal
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from polyloop.adapters.gateway import GatewayModelClient
from polyloop.batch import Episode, EpisodeAgent, run_batch
from polyloop.ports import RunStore
from polyloop.session import AgentDefinition
from polyloop.stores.sqlite import SqliteRunStore
from stores_bench import CONTEXT, setup  # the stores benchmark's agent (noop until the last step)

BENCH = os.path.dirname(os.path.abspath(__file__))
LATENCY = 0.020
A_TARGET = 0.60
B_TARGET = 150.0
B_CONCURRENCY = 50


# ---------------------------------------------------------------------------------------
# the loopback model server
# ---------------------------------------------------------------------------------------


def _completion(content: str) -> bytes:
    return json.dumps(
        {
            "id": "cmpl-bench",
            "object": "chat.completion",
            "model": "bench",
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


def serve(port_out: multiprocessing.connection.Connection, last_call: int) -> None:
    """Answers every chat completion after ``LATENCY``: ``CALL noop {}`` until call
    ``last_call`` (the ``x-polyloop-call-index`` header, else the number of assistant turns in
    the request), then ``FINAL: done``. HTTP/1.1 keep-alive; stops on SIGTERM."""
    bodies = {False: _completion("CALL noop {}"), True: _completion("FINAL: done")}

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length, call_index = 0, -1
                for line in head.split(b"\r\n")[1:]:
                    name, _, value = line.partition(b":")
                    name = name.strip().lower()
                    if name == b"content-length":
                        length = int(value)
                    elif name == b"x-polyloop-call-index":
                        call_index = int(value)
                body = await reader.readexactly(length)
                if call_index < 0:  # the baseline sends no header: count its turns
                    call_index = body.count(b'"role":"assistant"') + body.count(
                        b'"role": "assistant"'
                    )
                await asyncio.sleep(LATENCY)
                answer = bodies[call_index >= last_call]
                writer.write(
                    b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n"
                    b"content-length: %d\r\n\r\n" % len(answer) + answer
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
        asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
        await stop.wait()
        server.close()

    asyncio.run(main())


@contextlib.contextmanager
def model_server(steps: int) -> Iterator[str]:
    parent, child = multiprocessing.Pipe()
    process = multiprocessing.Process(target=serve, args=(child, steps - 1), daemon=True)
    process.start()
    try:
        yield f"http://127.0.0.1:{parent.recv()}/v1"
    finally:
        process.terminate()
        process.join(timeout=30)


# ---------------------------------------------------------------------------------------
# A. PolyLoop against the hand-written loop
# ---------------------------------------------------------------------------------------

SYSTEM = CONTEXT.run_level[0].content[0].text  # type: ignore[attr-defined]
USER = CONTEXT.goal_level[0].content[0].text  # type: ignore[attr-defined]


async def baseline(url: str, path: str, episodes: int, steps: int, concurrency: int) -> None:
    """The hand-written loop: the same requests over the same HTTP client, JSON parsed, one
    row per step committed on its own (WAL, ``synchronous=FULL``) on one writer thread."""
    connection = sqlite3.connect(path, check_same_thread=False, isolation_level=None)
    connection.execute("PRAGMA journal_mode = WAL")
    connection.execute("PRAGMA synchronous = FULL")
    connection.execute("CREATE TABLE steps (run_id TEXT, step INTEGER, body TEXT)")
    writer = concurrent.futures.ThreadPoolExecutor(1)
    loop = asyncio.get_running_loop()

    def write(run_id: str, step: int, body: str) -> None:
        connection.execute("BEGIN")
        connection.execute("INSERT INTO steps VALUES (?, ?, ?)", (run_id, step, body))
        connection.execute("COMMIT")

    client = httpx.AsyncClient(
        timeout=httpx.Timeout(60.0, connect=10.0),
        limits=httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency),
        follow_redirects=False,
        trust_env=False,
    )
    bound = asyncio.Semaphore(concurrency)

    async def episode(index: int) -> None:
        run_id = f"base-{index}"
        messages: list[dict[str, Any]] = [
            {"role": "system", "content": SYSTEM},
            {"role": "user", "content": USER},
        ]
        async with bound:
            for step in range(steps):
                response = await client.post(
                    url + "/chat/completions",
                    json={"model": "bench", "messages": messages, "stream": False},
                )
                response.raise_for_status()
                content = response.json()["choices"][0]["message"]["content"]
                observation = "ok" if content.startswith("CALL") else ""
                await loop.run_in_executor(
                    writer,
                    write,
                    run_id,
                    step,
                    json.dumps({"reply": content, "observation": observation}),
                )
                if not observation:
                    return
                messages.append({"role": "assistant", "content": content})
                messages.append({"role": "user", "content": observation})
            raise AssertionError(f"{run_id}: no final answer in {steps} steps")

    try:
        await asyncio.gather(*(episode(index) for index in range(episodes)))
    finally:
        await client.aclose()
        writer.shutdown()
        rows = connection.execute("SELECT count(*) FROM steps").fetchone()[0]
        connection.close()
    assert rows == episodes * steps, (rows, episodes * steps)


async def polyloop_batch(url: str, path: str, episodes: int, steps: int, concurrency: int) -> None:
    client = GatewayModelClient(url, "bench", max_connections=concurrency)

    @asynccontextmanager
    async def factory(episode: Episode, store: RunStore) -> AsyncIterator[EpisodeAgent]:
        definition, request = setup(store, steps, episode.run_id)
        yield EpisodeAgent(
            AgentDefinition(
                client,
                definition.decision_parser,
                store,
                definition.event_sink,
                definition.synthetic_observations,
            ),
            request,
        )

    try:
        async with SqliteRunStore(path) as store:
            summary = await run_batch(
                (Episode(f"ep-{i}", {}) for i in range(episodes)),
                factory,
                store,
                concurrency=concurrency,
                total=episodes,
            )
    finally:
        await client.aclose()
    assert summary.complete, summary
    assert summary.steps == episodes * steps, summary


def section_a(arguments: argparse.Namespace, base: str) -> dict[str, Any]:
    episodes, steps, concurrency = arguments.episodes, arguments.steps, arguments.concurrency
    samples: dict[str, list[tuple[float, float]]] = {"baseline": [], "polyloop": []}
    runners = {"baseline": baseline, "polyloop": polyloop_batch}
    with model_server(steps) as url:
        # A warm-up of each (imports, the server's first connections) is not counted.
        for name, runner in runners.items():
            asyncio.run(runner(url, os.path.join(base, f"warm-{name}.sqlite"), 50, steps, 50))
        for round_index in range(arguments.rounds):
            order = ("baseline", "polyloop") if round_index % 2 == 0 else ("polyloop", "baseline")
            for name in order:
                path = os.path.join(base, f"a-{name}-{round_index}.sqlite")
                spy = (
                    _spy_self(arguments, f"a-{name}-{round_index}") if name == "polyloop" else None
                )
                wall, cpu = time.perf_counter(), time.process_time()
                asyncio.run(runners[name](url, path, episodes, steps, concurrency))
                wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
                if spy is not None:
                    _stop_spy(spy)
                samples[name].append((wall, cpu))
                print(
                    f"  A round {round_index} {name:9s}: {episodes / wall:7.1f} episodes/s, "
                    f"CPU {cpu / episodes * 1e3:.2f} ms/episode",
                    flush=True,
                )
    base_wall = statistics.median(w for w, _ in samples["baseline"])
    poly_wall = statistics.median(w for w, _ in samples["polyloop"])
    paired = [b[0] / p[0] for b, p in zip(samples["baseline"], samples["polyloop"], strict=True)]
    return {
        "episodes": episodes,
        "steps": steps,
        "concurrency": concurrency,
        "baseline_episodes_per_s": round(episodes / base_wall, 1),
        "polyloop_episodes_per_s": round(episodes / poly_wall, 1),
        "ratio": round(base_wall / poly_wall, 3),
        "paired_ratios": [round(p, 3) for p in paired],
        "cpu_ms_per_episode": {
            name: round(statistics.median(c for _, c in s) / episodes * 1e3, 2)
            for name, s in samples.items()
        },
        "latency_bound_episodes_per_s": round(concurrency / (steps * LATENCY), 1),
    }


# ---------------------------------------------------------------------------------------
# B. one Ray worker on PostgreSQL
# ---------------------------------------------------------------------------------------


def _episodes(prefix: str, count: int) -> Iterator[Episode]:
    for index in range(count):
        run_id = f"{prefix}-{index}"
        yield Episode(run_id, {"run_id": run_id, "steps": 10, "latency": LATENCY})


async def _in_process(url: str, schema: str, episodes: int) -> float:
    from batch_agent import factory
    from polyloop.stores.postgres import PostgresRunStore

    async with PostgresRunStore(url, schema=schema) as store:
        began = time.perf_counter()
        summary = await run_batch(
            _episodes("local", episodes), factory, store, concurrency=B_CONCURRENCY
        )
        elapsed = time.perf_counter() - began
    assert summary.complete, summary
    return elapsed


def _worker_pid(sessions: list[int], earlier: set[int]) -> int | None:
    """The batch's worker process (not one of an earlier batch, which may still be ending)."""
    from tests.batch._ray_cluster import cluster_pids

    for pid in cluster_pids(sessions) - earlier:
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as handle:
                if b"EpisodeWorker" in handle.read():
                    return pid
        except OSError:
            continue
    return None


@dataclass
class RayRound:
    """What one batch on the Ray worker measured."""

    began: float = 0.0
    ended: float = 0.0
    reports: list[float] = field(default_factory=list)
    pid: int | None = None
    ticks_at_pid: int = 0
    seen_at: float = 0.0
    cpu_seconds: float = 0.0
    spy: tuple[subprocess.Popen[bytes], Path] | None = None


async def ray_round(
    arguments: argparse.Namespace,
    cluster: Any,
    url: str,
    schema: str,
    name: str,
    count: int,
    profile: bool,
    earlier: set[int],
) -> RayRound:
    import ray

    from batch_agent import PostgresOpener
    from polyloop.batch.ray import run_batch_on_ray
    from postgres_bench import _ticks

    measured = RayRound()
    ray.init(address=cluster.address, logging_level="ERROR", log_to_driver=False)
    try:
        measured.began = time.perf_counter()
        task = asyncio.ensure_future(
            run_batch_on_ray(
                _episodes(name, count),
                factory="batch_agent:factory",
                store=PostgresOpener(url, schema),
                address=None,
                concurrency=B_CONCURRENCY,
                workers=1,
                total=count,
                observers=[lambda report, tally: measured.reports.append(time.perf_counter())],
            )
        )
        while measured.pid is None and not task.done():
            await asyncio.sleep(0.2)
            measured.pid = _worker_pid(cluster.sessions, earlier)
            if measured.pid is not None:
                measured.ticks_at_pid = _ticks(measured.pid, False)
                measured.seen_at = time.perf_counter()
                if profile:
                    measured.spy = _spy_pid(arguments, measured.pid, "b-ray-worker")
        summary = await task
        measured.ended = time.perf_counter()
        assert summary.complete, summary
        if measured.pid is not None:
            earlier.add(measured.pid)
            try:
                ticks = _ticks(measured.pid, False) - measured.ticks_at_pid
            except OSError:  # gone already: no CPU figure for this round
                measured.pid = None
            else:
                measured.cpu_seconds = ticks / os.sysconf("SC_CLK_TCK")
    finally:
        if measured.spy is not None:
            _stop_spy(measured.spy)
        ray.shutdown()
    return measured


def section_b(arguments: argparse.Namespace, url: str) -> dict[str, Any]:
    import psycopg
    from psycopg import sql
    from tests.batch._ray_cluster import start_cluster

    episodes = arguments.episodes
    prefix = f"mtb_{os.getpid()}"
    schemas: list[str] = []

    def schema() -> str:
        schemas.append(f"{prefix}_{len(schemas)}")
        return schemas[-1]

    report: dict[str, Any] = {"episodes": episodes, "concurrency": B_CONCURRENCY}
    local = []
    for _ in range(arguments.rounds):
        cpu = time.process_time()
        elapsed = asyncio.run(_in_process(url, schema(), episodes))
        local.append((episodes / elapsed, (time.process_time() - cpu) / elapsed))
        print(f"  B in process: {local[-1][0]:.1f} episodes/s, {local[-1][1]:.2f} CPU s/s")
    report["in_process_episodes_per_s"] = round(statistics.median(r for r, _ in local), 1)
    cluster = start_cluster(BENCH)
    rates: list[float] = []
    busy: list[float] = []
    steady: list[float] = []
    started: list[float] = []
    earlier: set[int] = set()
    try:
        for round_index in range(arguments.rounds + 1):  # the first warms the cluster: not counted
            count = 200 if round_index == 0 else episodes
            measured = asyncio.run(
                ray_round(
                    arguments,
                    cluster,
                    url,
                    schema(),
                    f"ray{round_index}",
                    count,
                    round_index == 1,
                    earlier,
                )
            )
            if round_index == 0:
                continue
            rates.append(count / (measured.ended - measured.began))
            # Past the worker's start-up (a process, its imports, its connections): the rate
            # between the tenth of the reports and the last.
            times = measured.reports
            tenth = len(times) // 10
            steady.append((len(times) - tenth - 1) / (times[-1] - times[tenth]))
            started.append(times[0] - measured.began)
            if measured.pid is not None:
                busy.append(measured.cpu_seconds / (measured.ended - measured.seen_at))
            print(
                f"  B Ray round {round_index}: {rates[-1]:.1f} episodes/s ({steady[-1]:.1f} once "
                f"started; first report after {started[-1]:.1f} s), worker "
                f"{busy[-1] if busy else float('nan'):.2f} CPU s/s",
                flush=True,
            )
    finally:
        cluster.stop()
        with psycopg.connect(url, autocommit=True) as connection:
            for name in schemas:
                connection.execute(
                    sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(name))
                )
    report["one_worker_episodes_per_s"] = round(statistics.median(rates), 1)
    report["one_worker_steady_episodes_per_s"] = round(statistics.median(steady), 1)
    report["seconds_to_first_report"] = round(statistics.median(started), 1)
    report["worker_cpu_seconds_per_second"] = round(statistics.median(busy), 2) if busy else None
    report["latency_bound_episodes_per_s"] = B_CONCURRENCY / (10 * LATENCY)
    return report


# ---------------------------------------------------------------------------------------
# profiles
# ---------------------------------------------------------------------------------------

PY_SPY = shutil.which("py-spy") or os.path.expanduser("~/.local/bin/py-spy")

#: Where a sample's CPU is counted: the innermost frame whose file matches, in this order.
PARTS = (
    ("JSON", re.compile(r"\((json|orjson|polyloop/serialization|stores/_stored_form)")),
    ("store", re.compile(r"\((stores|sqlite3|psycopg|polyloop/stores)/")),
    ("HTTP", re.compile(r"\((httpx|httpcore|h11|anyio|sniffio)/|\((ssl|socket)\.py")),
    ("model client", re.compile(r"\((adapters|polyloop/adapters)/")),
    ("batch runner", re.compile(r"\((batch|polyloop/batch)/")),
    ("Ray", re.compile(r"\((ray|grpc|_raylet)")),
    ("loop (polyloop core)", re.compile(r"\(polyloop/")),
    ("asyncio", re.compile(r"\((asyncio/|selectors\.py)")),
    ("threads", re.compile(r"\((threading\.py|queue\.py|concurrent/)")),
)


def _spy_self(
    arguments: argparse.Namespace, name: str
) -> tuple[subprocess.Popen[bytes], Path] | None:
    return _spy_pid(arguments, os.getpid(), name)


def _spy_pid(
    arguments: argparse.Namespace, pid: int, name: str
) -> tuple[subprocess.Popen[bytes], Path] | None:
    if not arguments.py_spy:
        return None
    out = Path(arguments.py_spy) / f"{name}.txt"
    process = subprocess.Popen(
        [
            PY_SPY,
            "record",
            "--pid",
            str(pid),
            "--format",
            "raw",
            "--rate",
            "250",
            "--threads",
            "--nonblocking",
            "-o",
            str(out),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    time.sleep(1.0)  # attached before the work starts
    return process, out


def _stop_spy(spy: tuple[subprocess.Popen[bytes], Path]) -> None:
    process, out = spy
    process.send_signal(signal.SIGINT)
    process.wait(timeout=60)
    print(f"  profile {out}:")
    for line in summarize(out):
        print("    " + line)


def summarize(path: Path, top: int = 12) -> list[str]:
    """Samples by part (see ``PARTS``) and the busiest innermost functions."""
    parts: collections.Counter[str] = collections.Counter()
    leaves: collections.Counter[str] = collections.Counter()
    total = 0
    for line in path.read_text(encoding="utf-8").splitlines():
        stack, _, count_text = line.rpartition(" ")
        if not count_text.isdigit():
            continue
        count = int(count_text)
        frames = stack.split(";")
        total += count
        leaves[frames[-1]] += count
        for frame in reversed(frames):
            part = next((name for name, pattern in PARTS if pattern.search(frame)), None)
            if part is not None:
                parts[part] += count
                break
        else:
            parts["other"] += count
    if not total:
        return ["no samples"]
    lines = [
        "by part: " + ", ".join(f"{k} {v / total:.0%}" for k, v in parts.most_common()),
        f"{total} samples; busiest innermost frames:",
    ]
    lines += [f"  {v / total:5.1%} {k}" for k, v in leaves.most_common(top)]
    return lines


# ---------------------------------------------------------------------------------------


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sections", default="AB")
    parser.add_argument("--episodes", type=int, default=2000)
    parser.add_argument("--steps", type=int, default=10, help="A only (B is issue 14's 10)")
    parser.add_argument("--concurrency", type=int, default=200, help="A only (B is 50)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--url", default=os.environ.get("POLYLOOP_TEST_POSTGRES_URL"))
    parser.add_argument("--py-spy", metavar="DIR", help="sample with py-spy, raw files in DIR")
    parser.add_argument("--check", action="store_true", help="exit 1 when a target is missed")
    arguments = parser.parse_args()
    if arguments.py_spy:
        os.makedirs(arguments.py_spy, exist_ok=True)
    report: dict[str, Any] = {}
    missed: list[str] = []
    if "A" in arguments.sections:
        with tempfile.TemporaryDirectory(prefix="model-throughput-") as base:
            report["A"] = section_a(arguments, base)
        ratio = report["A"]["ratio"]
        print(
            f"A: PolyLoop {report['A']['polyloop_episodes_per_s']} episodes/s, baseline "
            f"{report['A']['baseline_episodes_per_s']}: ratio {ratio} (target >= {A_TARGET})"
        )
        if ratio < A_TARGET:
            missed.append(f"A ratio {ratio} < {A_TARGET}")
    if "B" in arguments.sections:
        from postgres_bench import server

        with server(arguments.url) as url:
            report["B"] = section_b(arguments, url)
        rate = report["B"]["one_worker_episodes_per_s"]
        print(f"B: one Ray worker {rate} episodes/s (target >= {B_TARGET}, bound 250)")
        if rate < B_TARGET:
            missed.append(f"B {rate} episodes/s < {B_TARGET}")
    print(json.dumps(report, indent=1))
    if missed:
        print("targets missed: " + "; ".join(missed))
        return 1 if arguments.check else 0
    print("targets met")
    return 0


if __name__ == "__main__":
    sys.exit(main())
