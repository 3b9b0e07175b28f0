"""The console's live run pages (issue 39, design 0069): how soon a record reaches a page,
and what 200 open pages cost the runs they watch.

    uv run python bench/console_live_bench.py [--stores sqlite,postgres] [--writes 40]
        [--clients 200] [--runs 40] [--steps 10] [--rounds 4] [--model-ms 0]

PostgreSQL is the server of ``POLYLOOP_TEST_POSTGRES_URL`` (``scripts/postgres-test-cluster.sh
start``). For each store a real ``polyloop serve`` runs on a loopback port:

- **latency**: one signed-in event stream (httpx) watches a run; this process writes the run's
  records one at a time (a random pause of 0.25–0.5 s between them: isolated writes, as a model's steps are, not
  in step with the SQLite poll) and times each from the start of its write to its ``changed`` event;
- **200 pages**: a batch of ``--runs`` runs of ``--steps`` tool steps (a constant model that
  answers at once, the worst case: the store and the loop are all there is; ``--model-ms``
  gives each call a model's latency) is driven in this process, 10 at a time,
  with no page open, then with ``--clients`` event streams (another process) watching the
  batch's runs, after one unmeasured batch; rounds alternate which goes first, the slowdown
  compares the medians, and the server's and the clients' CPU time during each batch is shown.

Timings on a shared 2-core machine are noisy: the server, the clients and the runs share it.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
import os
import random
import secrets
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any
from urllib.parse import quote

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from tests.console._kit import Served, serve

from loop_bench import setup  # type: ignore[import-not-found]
from polyloop import testing
from polyloop.ports import RunStore
from polyloop.session import run
from polyloop.stores.postgres import PostgresRunStore
from polyloop.stores.sqlite import SqliteRunStore
from polyloop.watching import ChangeMarking

PG_VARIABLE = "POLYLOOP_TEST_POSTGRES_URL"
#: CPU seconds this process spent on each batch (the runs' own cost).
BATCH_CPU: list[float] = []


def _open(kind: str, where: Path, schema: str) -> RunStore:
    if kind == "sqlite":
        return SqliteRunStore(where / "runs.sqlite")
    return PostgresRunStore(os.environ[PG_VARIABLE], schema=schema)


def _url(kind: str, where: Path, schema: str) -> str:
    if kind == "sqlite":
        return f"sqlite:{where / 'runs.sqlite'}"
    base = os.environ[PG_VARIABLE]
    return f"{base}{'&' if '?' in base else '?'}schema={schema}"


async def _signed_in(served: Served, limit: int) -> httpx.AsyncClient:
    client = httpx.AsyncClient(
        base_url=served.base,
        headers={"Origin": served.base},
        timeout=httpx.Timeout(60, read=None),
        limits=httpx.Limits(max_connections=limit + 5, max_keepalive_connections=limit + 5),
    )
    answer = await client.post("/login", data={"token": served.token or ""})
    assert 303 == answer.status_code, answer.text
    return client


async def _events(
    client: httpx.AsyncClient, run_id: str, since: str, seen: asyncio.Queue[float]
) -> None:
    path = f"/live/{quote(run_id, safe='')}?since={quote(since)}"
    async with client.stream("GET", path) as stream:
        assert 200 == stream.status_code
        async for line in stream.aiter_lines():
            if line.startswith("event: changed"):
                seen.put_nowait(time.perf_counter())


async def latency(kind: str, where: Path, schema: str, served: Served, writes: int) -> None:
    store = _open(kind, where, schema)
    client = await _signed_in(served, 1)
    run_id = "latency"
    try:
        await store.write_run_started(testing.run_started(run_id))
        assert isinstance(store, ChangeMarking)
        since = await store.change_marker(run_id)
        seen: asyncio.Queue[float] = asyncio.Queue()
        listener = asyncio.create_task(_events(client, run_id, since, seen))
        await asyncio.sleep(1.0)  # the stream is open and watched
        records = [r for k in range(writes) for r in testing.tool_step(run_id, k).records]
        delays, write_times = [], []
        for record in records[:writes]:
            await asyncio.sleep(random.uniform(0.25, 0.5))
            began = time.perf_counter()
            await testing.write_records(store, [record])
            write_times.append(time.perf_counter() - began)
            arrived = await asyncio.wait_for(seen.get(), 30)
            delays.append(arrived - began)
            while not seen.empty():
                seen.get_nowait()
        listener.cancel()
        delays.sort()
        p95 = delays[max(0, int(len(delays) * 0.95) - 1)]
        print(
            f"{kind:8s} write -> event: median {statistics.median(delays) * 1000:6.1f} ms, "
            f"p95 {p95 * 1000:6.1f} ms, max {delays[-1] * 1000:6.1f} ms "
            f"(the write itself: median {statistics.median(write_times) * 1000:5.1f} ms; "
            f"{len(delays)} writes)"
        )
    finally:
        await client.aclose()
        await store.aclose()  # type: ignore[attr-defined]


class _SlowModel:
    """The bench's constant model, answering after ``seconds`` (a model's latency)."""

    def __init__(self, model: Any, seconds: float) -> None:
        self._model, self._seconds = model, seconds

    async def call(self, call: Any) -> Any:
        await asyncio.sleep(self._seconds)
        return await self._model.call(call)

    def parameters(self) -> Any:
        return self._model.parameters()


async def batch(
    kind: str, where: Path, schema: str, prefix: str, runs: int, steps: int, model_ms: float = 0.0
) -> float:
    """Drive ``runs`` runs of ``steps`` tool steps, 10 at a time; steps per second (and its
    CPU time in ``BATCH_CPU``)."""
    store = _open(kind, where, schema)
    try:
        await store.open()  # type: ignore[attr-defined]
        began, cpu = time.perf_counter(), time.process_time()
        gate = asyncio.Semaphore(10)

        async def one(index: int) -> None:
            async with gate:
                definition, request = setup(
                    steps, store, with_tool=True, run_id=f"{prefix}-{index:04d}"
                )
                if model_ms:
                    slow = _SlowModel(definition.model_client, model_ms / 1000)
                    definition = dataclasses.replace(definition, model_client=slow)
                result = await run(definition, request)
                assert len(result.steps) == steps

        await asyncio.gather(*(one(index) for index in range(runs)))
        elapsed = time.perf_counter() - began
        BATCH_CPU.append(time.process_time() - cpu)
        return runs * steps / elapsed
    finally:
        await store.aclose()  # type: ignore[attr-defined]


def _clients(served: Served, run_ids: list[str], count: int) -> subprocess.Popen[str]:
    spec = json.dumps(
        {"base": served.base, "token": served.token, "run_ids": run_ids, "count": count}
    )
    process = subprocess.Popen(
        [sys.executable, __file__, "--be-clients", spec],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert process.stdout is not None
    line = process.stdout.readline()
    assert line.startswith("ready"), line
    return process


async def be_clients(spec: dict[str, object]) -> None:
    """The other process: ``count`` event streams on the given runs, until stdin... killed."""
    served = Served(None, str(spec["base"]), str(spec["token"]), Path(), Path())  # type: ignore[arg-type]
    count = int(spec["count"])  # type: ignore[call-overload]
    run_ids = list(spec["run_ids"])  # type: ignore[call-overload]
    client = await _signed_in(served, count)
    seen: asyncio.Queue[float] = asyncio.Queue()
    tasks = [
        asyncio.create_task(_events(client, run_ids[i % len(run_ids)], "", seen))
        for i in range(count)
    ]
    # Each stream answers at once (its "since" is empty): all open when as many events came.
    for _ in range(count):
        await asyncio.wait_for(seen.get(), 120)
    print("ready", flush=True)
    await asyncio.gather(*tasks)


def _cpu_seconds(pid: int) -> float:
    """User and system CPU time of process ``pid`` so far (Linux ``/proc``)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def slowdown(
    kind: str, where: Path, schema: str, served: Served, options: argparse.Namespace
) -> None:
    alone, watched, costs = [], [], []
    # A batch first, unmeasured: the first one pays for warming caches and connections.
    asyncio.run(batch(kind, where, schema, "warm", options.runs, options.steps, options.model_ms))
    for round_index in range(options.rounds):
        for clients in (0, options.clients) if round_index % 2 == 0 else (options.clients, 0):
            prefix = f"r{round_index}-c{clients}"
            run_ids = [f"{prefix}-{index:04d}" for index in range(options.runs)]
            process = _clients(served, run_ids, clients) if clients else None
            server_before = _cpu_seconds(served.process.pid)
            clients_before = 0.0 if process is None else _cpu_seconds(process.pid)
            try:
                rate = asyncio.run(
                    batch(
                        kind, where, schema, prefix, options.runs, options.steps, options.model_ms
                    )
                )
                server_cpu = _cpu_seconds(served.process.pid) - server_before
                clients_cpu = 0.0 if process is None else _cpu_seconds(process.pid) - clients_before
            finally:
                if process is not None:
                    process.kill()
                    process.wait()
            (watched if clients else alone).append(rate)
            if clients:
                costs.append((server_cpu + clients_cpu) / BATCH_CPU[-1])
            print(
                f"{kind:8s} round {round_index}, {clients:3d} pages open: {rate:7.0f} steps/s "
                f"(CPU during the batch: runs {BATCH_CPU[-1]:5.2f} s, server {server_cpu:5.2f} s,"
                f" clients {clients_cpu:5.2f} s)"
            )
    a, w = statistics.median(alone), statistics.median(watched)
    print(
        f"{kind:8s} {options.clients} pages open: {w:.0f} steps/s against {a:.0f} with none "
        f"({(a - w) / a * 100:+.1f}% slower); the console and the pages used "
        f"{statistics.median(costs) * 100:.1f}% of the runs' CPU time (median)"
    )


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--stores", default="sqlite,postgres")
    parser.add_argument("--writes", type=int, default=40)
    parser.add_argument("--clients", type=int, default=200)
    parser.add_argument("--runs", type=int, default=40)
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument(
        "--model-ms", type=float, default=0.0, help="each model call answers after this long"
    )
    parser.add_argument("--be-clients", default=None, help=argparse.SUPPRESS)
    options = parser.parse_args()
    if options.be_clients is not None:
        asyncio.run(be_clients(json.loads(options.be_clients)))
        return
    for kind in options.stores.split(","):
        with tempfile.TemporaryDirectory() as scratch:
            where = Path(scratch)
            schema = f"bench_live_{secrets.token_hex(4)}"
            # The store exists before the console opens it.
            asyncio.run(_create(kind, where, schema))
            served = serve(where / "home", _url(kind, where, schema))
            try:
                asyncio.run(latency(kind, where, schema, served, options.writes))
                slowdown(kind, where, schema, served, options)
            finally:
                served.stop()
                if kind == "postgres":
                    _drop(schema)


async def _create(kind: str, where: Path, schema: str) -> None:
    store = _open(kind, where, schema)
    try:
        await store.write_run_started(testing.run_started("first"))
    finally:
        await store.aclose()  # type: ignore[attr-defined]


def _drop(schema: str) -> None:
    import psycopg
    from psycopg import sql

    with psycopg.connect(os.environ[PG_VARIABLE], autocommit=True) as connection:
        connection.execute(
            sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema))
        )


if __name__ == "__main__":
    main()
