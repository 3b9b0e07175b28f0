"""The batch runner (issue 14): its cost next to a hand-written gather, its memory, Ray's scaling.

    uv run python bench/batch_bench.py [--quick] [--url URL] [--sections ABC] [--skip-postgres]

PostgreSQL is ``--url``, else ``POLYLOOP_TEST_POSTGRES_URL``, else a throwaway cluster started
(and removed) with ``scripts/postgres-test-cluster.sh``.

- **A. Zero-latency seams**, 2,000 episodes x 10 steps (the stores benchmark's agent: a scripted
  model calling ``noop``), concurrency 50, on SQLite and on PostgreSQL: episodes/s of
  ``run_batch`` in one process, against a hand-written ``asyncio.gather`` over ``run`` (a
  semaphore of 50) in the same process, the two alternating, each on a fresh store. Also the
  runner's overhead per episode: the difference in wall time and in this process's CPU time.
- **B. Memory**: ``run_batch`` over 1,000 and over 10,000 one-step episodes streamed from a file
  (SQLite), each in a fresh process: peak RSS.
- **C. Ray**, 2,000 episodes x 10 steps with a fixed 20 ms model latency, 50 episodes at once
  per worker, on PostgreSQL: one worker process against two, on the tests' local two-node
  cluster (one CPU each; both on this machine).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import resource
import secrets
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import psycopg
from psycopg import sql

from polyloop.batch import Episode, check_episodes_file, run_batch
from polyloop.ports import RunStore
from polyloop.session import run
from polyloop.stores.postgres import PostgresRunStore
from polyloop.stores.sqlite import SqliteRunStore

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from batch_agent import PostgresOpener, agent, factory  # the stores benchmark's agent
from postgres_bench import (  # the postgres benchmark's throwaway cluster and CPU accounting
    Bench,
    _ticks,
    postmaster_pid,
    server,
    server_cpu_seconds,
)

BENCH = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(BENCH)

CONCURRENCY = 50


# ---------------------------------------------------------------------------------------
# A. the runner against a hand-written gather
# ---------------------------------------------------------------------------------------


async def gather_over_run(store: RunStore, episodes: int, steps: int, prefix: str) -> None:
    """What a user writes without the runner: a semaphore and ``asyncio.gather``."""
    bound = asyncio.Semaphore(CONCURRENCY)

    async def one(index: int) -> None:
        async with bound:
            made = agent(store, f"{prefix}-{index}", steps, 0.0)
            await run(made.definition, made.request)

    await asyncio.gather(*(one(index) for index in range(episodes)))


async def through_runner(store: RunStore, episodes: int, steps: int, prefix: str) -> None:
    source = (
        Episode(f"{prefix}-{index}", {"run_id": f"{prefix}-{index}", "steps": steps})
        for index in range(episodes)
    )
    summary = await run_batch(source, factory, store, concurrency=CONCURRENCY, total=episodes)
    assert summary.complete, summary


async def timed(work: Callable[[], Awaitable[None]]) -> tuple[float, float]:
    """(wall seconds, this process's CPU seconds) of ``work``."""
    wall, cpu = time.perf_counter(), time.process_time()
    await work()
    return time.perf_counter() - wall, time.process_time() - cpu


class Stores:
    """Fresh stores of one kind, closed and removed after use."""

    def __init__(self, kind: str, url: str | None, base: str) -> None:
        self.kind, self.url, self.base = kind, url, base
        self.prefix = f"bbench_{secrets.token_hex(3)}"
        self.count = 0

    def fresh(self) -> RunStore:
        self.count += 1
        if self.kind == "sqlite":
            return SqliteRunStore(os.path.join(self.base, f"runs-{self.count}.sqlite"))
        assert self.url is not None
        return PostgresRunStore(self.url, schema=f"{self.prefix}_{self.count}")

    def schema(self) -> str:
        self.count += 1
        return f"{self.prefix}_{self.count}"

    def drop_all(self) -> None:
        if self.url is None:
            return
        with psycopg.connect(self.url, autocommit=True) as connection:
            names = connection.execute(
                "SELECT nspname FROM pg_namespace WHERE nspname LIKE %s", (self.prefix + "%",)
            ).fetchall()
            for (name,) in names:
                connection.execute(sql.SQL("DROP SCHEMA {} CASCADE").format(sql.Identifier(name)))


async def sample(store: RunStore, name: str, episodes: int, steps: int) -> tuple[float, float]:
    work = gather_over_run if name == "gather" else through_runner
    async with store:  # type: ignore[attr-defined]
        return await timed(lambda: work(store, episodes, steps, name))


async def compare(stores: Stores, episodes: int, steps: int, rounds: int) -> dict[str, Any]:
    samples: dict[str, list[tuple[float, float]]] = {"gather": [], "runner": []}
    for round_index in range(rounds):
        order = ("gather", "runner") if round_index % 2 == 0 else ("runner", "gather")
        for name in order:
            samples[name].append(await sample(stores.fresh(), name, episodes, steps))
    gather_wall = statistics.median(wall for wall, _ in samples["gather"])
    runner_wall = statistics.median(wall for wall, _ in samples["runner"])
    gather_cpu = statistics.median(cpu for _, cpu in samples["gather"])
    runner_cpu = statistics.median(cpu for _, cpu in samples["runner"])
    pairs = [g[0] / r[0] for g, r in zip(samples["gather"], samples["runner"], strict=True)]
    return {
        "gather_episodes_per_s": episodes / gather_wall,
        "runner_episodes_per_s": episodes / runner_wall,
        "ratio_of_medians": gather_wall / runner_wall,
        "paired_ratios": [round(p, 3) for p in pairs],
        "overhead_wall_us_per_episode": (runner_wall - gather_wall) / episodes * 1e6,
        "overhead_cpu_us_per_episode": (runner_cpu - gather_cpu) / episodes * 1e6,
        "cpu_us_per_episode_gather": gather_cpu / episodes * 1e6,
        "samples": {
            name: [(round(w, 3), round(c, 3)) for w, c in s] for name, s in samples.items()
        },
    }


# ---------------------------------------------------------------------------------------
# B. memory over many episodes
# ---------------------------------------------------------------------------------------


def memory_child(episodes: int, where: str) -> None:
    path = Path(where) / f"eps-{episodes}.jsonl"
    with open(path, "w", encoding="utf-8") as handle:
        for index in range(episodes):
            handle.write(json.dumps({"run_id": f"m-{index:06d}", "steps": 1}) + "\n")
    checked = check_episodes_file(path)

    async def go() -> None:
        async with SqliteRunStore(Path(where) / f"mem-{episodes}.sqlite") as store:
            summary = await run_batch(
                checked.episodes(), factory, store, concurrency=CONCURRENCY, total=checked.count
            )
            assert summary.complete, summary

    began = time.perf_counter()
    asyncio.run(go())
    print(
        json.dumps(
            {
                "episodes": episodes,
                "max_rss_kib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss,
                "seconds": time.perf_counter() - began,
            }
        )
    )


def memory(where: str, sizes: tuple[int, ...]) -> list[dict[str, Any]]:
    rows = []
    for size in sizes:
        completed = subprocess.run(
            [sys.executable, __file__, "--memory-child", str(size), where],
            check=True,
            capture_output=True,
            text=True,
        )
        rows.append(json.loads(completed.stdout.strip().splitlines()[-1]))
    return rows


# ---------------------------------------------------------------------------------------
# C. Ray: one worker against two
# ---------------------------------------------------------------------------------------


async def ray_scaling(url: str, stores: Stores, episodes: int, rounds: int) -> dict[str, Any]:
    from tests.batch._ray_cluster import (  # the tests' local two-node cluster
        cluster_pids,
        start_cluster,
    )

    from polyloop.batch.ray import run_batch_on_ray

    cluster = start_cluster(BENCH)
    postmaster = postmaster_pid(Bench(url))
    cpu: dict[int, list[dict[str, float]]] = {1: [], 2: []}

    def cpu_now() -> dict[str, float]:
        ray_ticks = 0
        for pid in cluster_pids(cluster.sessions):
            try:
                ray_ticks += _ticks(pid, False)
            except OSError:
                continue
        with open("/proc/stat", encoding="ascii") as handle:
            # cpu user nice system idle iowait irq softirq steal ...: busy = all but idle, iowait
            values = [int(v) for v in handle.readline().split()[1:]]
        busy = sum(values) - values[3] - values[4]
        return {
            "machine": busy / os.sysconf("SC_CLK_TCK"),
            "ray_processes": ray_ticks / os.sysconf("SC_CLK_TCK"),
            "server": (server_cpu_seconds(postmaster) or 0.0) if postmaster else 0.0,
            "driver": time.process_time(),
        }

    try:
        samples: dict[int, list[float]] = {1: [], 2: []}
        for round_index in range(rounds):
            for workers in (1, 2) if round_index % 2 == 0 else (2, 1):
                schema = stores.schema()
                source = (
                    Episode(
                        f"r{workers}-{index}",
                        {"run_id": f"r{workers}-{index}", "steps": 10, "latency": 0.02},
                    )
                    for index in range(episodes)
                )
                before = cpu_now()
                began = time.perf_counter()
                summary = await run_batch_on_ray(
                    source,
                    factory="batch_agent:factory",
                    store=PostgresOpener(url, schema),
                    address=cluster.address,
                    concurrency=CONCURRENCY,
                    workers=workers,
                    total=episodes,
                )
                elapsed = time.perf_counter() - began
                after = cpu_now()
                assert summary.complete, summary
                samples[workers].append(episodes / elapsed)
                cpu[workers].append(
                    {key: round((after[key] - before[key]) / elapsed, 2) for key in after}
                )
        one, two = statistics.median(samples[1]), statistics.median(samples[2])
        return {
            "one_worker_episodes_per_s": one,
            "two_workers_episodes_per_s": two,
            "ratio": two / one,
            "samples": {w: [round(s, 1) for s in v] for w, v in samples.items()},
            "cores_busy_per_sample": cpu,
            "latency_bound_episodes_per_s_per_worker": CONCURRENCY / (10 * 0.02),
        }
    finally:
        cluster.stop()


# ---------------------------------------------------------------------------------------


async def main(arguments: argparse.Namespace, url: str | None, base: str) -> None:
    episodes = 400 if arguments.quick else 2000
    rounds = arguments.rounds or (1 if arguments.quick else 3)
    report: dict[str, Any] = {"episodes": episodes, "steps": 10, "concurrency": CONCURRENCY}
    kinds = ["sqlite"] + ([] if url is None else ["postgres"])
    for kind in kinds if "A" in arguments.sections else ():
        stores = Stores(kind, url, base)
        try:
            report[f"A_{kind}"] = await compare(stores, episodes, 10, rounds)
        finally:
            stores.drop_all()
        print(json.dumps({f"A_{kind}": report[f"A_{kind}"]}, indent=1), flush=True)
    if "B" in arguments.sections:
        report["B_memory"] = memory(base, (1000, 2000) if arguments.quick else (1000, 10000))
        print(json.dumps({"B_memory": report["B_memory"]}, indent=1), flush=True)
    if url is not None and "C" in arguments.sections:
        stores = Stores("postgres", url, base)
        try:
            report["C_ray"] = await ray_scaling(url, stores, episodes, rounds)
        finally:
            stores.drop_all()
        print(json.dumps({"C_ray": report["C_ray"]}, indent=1), flush=True)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer episodes and rounds")
    parser.add_argument("--url", default=os.environ.get("POLYLOOP_TEST_POSTGRES_URL"))
    parser.add_argument("--sections", default="ABC", help="which of A, B, C to run")
    parser.add_argument("--rounds", type=int, default=0, help="samples of each (default 3)")
    parser.add_argument("--skip-postgres", action="store_true")
    parser.add_argument("--memory-child", nargs=2, metavar=("EPISODES", "DIR"))
    arguments = parser.parse_args()
    if arguments.memory_child:
        memory_child(int(arguments.memory_child[0]), arguments.memory_child[1])
        sys.exit(0)
    with tempfile.TemporaryDirectory(prefix="batch-bench-") as base:
        if arguments.skip_postgres:
            asyncio.run(main(arguments, None, base))
        else:
            with server(arguments.url) as url:
                asyncio.run(main(arguments, url, base))
