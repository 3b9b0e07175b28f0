"""Session start and per-action round trip of the container executor, per backend.

Usage: ``uv run python bench/container_bench.py [--repeat 20] [--backend bubblewrap|docker]``

Session start = ``ContainerExecutor.start()`` until the interpreter in the sandbox has said it
is ready (sandbox creation, interpreter start-up, protocol handshake). Round trip = one
``execute`` of a trivial statement on a warm session (frame out, exec, output capture, frame
back). Close = killing the sandbox and waiting until everything in it is gone. Medians (and
min/max) over ``--repeat`` runs, in milliseconds. Needs the backend to work on this machine
(for docker: a running engine; the local image is built on first use).
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time

from polyloop.adapters.container import (
    BubblewrapBackend,
    ContainerExecutor,
    DockerBackend,
    SandboxBackend,
    ensure_docker_image,
)
from polyloop.ports import Action


def _backend(name: str) -> SandboxBackend:
    return BubblewrapBackend() if name == "bubblewrap" else DockerBackend()


async def bench(name: str, repeat: int) -> dict[str, list[float]]:
    if name == "docker":
        await ensure_docker_image()
    starts: list[float] = []
    closes: list[float] = []
    trips: list[float] = []
    action = Action(text="counter = globals().get('counter', 0) + 1", tool_call=None)
    for i in range(repeat):
        executor = ContainerExecutor(_backend(name))
        began = time.perf_counter()
        await executor.start()
        starts.append(time.perf_counter() - began)
        if i == 0:
            await executor.execute(action)  # warm-up
            for _ in range(repeat):
                began = time.perf_counter()
                await executor.execute(action)
                trips.append(time.perf_counter() - began)
        began = time.perf_counter()
        await executor.close()
        closes.append(time.perf_counter() - began)
    return {"session start": starts, "round trip": trips, "close": closes}


def _fmt(values: list[float]) -> str:
    ms = [v * 1000 for v in values]
    return (
        f"median {statistics.median(ms):8.2f} ms  (min {min(ms):7.2f}, max {max(ms):7.2f}, "
        f"n={len(ms)})"
    )


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=20)
    parser.add_argument("--backend", choices=["bubblewrap", "docker"], action="append")
    args = parser.parse_args()
    for name in args.backend or ["bubblewrap", "docker"]:
        results = await bench(name, args.repeat)
        for label, values in results.items():
            print(f"{name:10s} {label:13s} {_fmt(values)}")


if __name__ == "__main__":
    asyncio.run(main())
