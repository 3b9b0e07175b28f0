"""CPU per durable step above the memory store (issue 27 item 4).

    uv run python bench/durable_cpu.py [--steps 1000] [--profile KIND]

One run of ``--steps`` steps (scripted model calling a ``noop`` tool, as in
``bench/stores_bench.py``) per store; the process's CPU time per step (all threads, from
``getrusage``), user and system apart (system: the kernel's work, most of it for the
``fdatasync`` of each write), the least of three runs, and the difference to the memory store,
whose figure is the loop's own cost. ``--profile jsonl`` (or ``sqlite``) prints the cProfile
table of one such run, every thread's merged, sorted by own CPU time (each thread's profiler
counts that thread's CPU time, so waiting on a lock or the disk costs nothing there and what
the table shows is where the CPU goes).
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import os
import pstats
import resource
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(__file__))

from polyloop.session import run
from stores_bench import close, make_store, setup

KINDS = ("memory", "jsonl", "sqlite")


def _cpu() -> tuple[float, float]:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime, usage.ru_stime


async def _one(kind: str, where: str, steps: int, run_id: str) -> tuple[float, float]:
    """User and system CPU µs per step of one run (all threads of the process)."""
    store = make_store(kind, where)
    definition, request = setup(store, steps, run_id)
    user, system = _cpu()
    await run(definition, request)
    user_after, system_after = _cpu()
    await close(store)
    return (user_after - user) / steps * 1e6, (system_after - system) / steps * 1e6


async def main(steps: int, base: str) -> None:
    figures: dict[str, tuple[float, float]] = {}
    for kind in KINDS:
        runs = [
            await _one(kind, os.path.join(base, f"{kind}-{n}"), steps, f"cpu-{n}") for n in range(3)
        ]
        figures[kind] = min(runs, key=sum)  # the least disturbed of three (a shared machine)
    print(f"CPU per step, {steps}-step runs (least of 3), µs: user + system (kernel) = total")
    memory = sum(figures["memory"])
    for kind, (user, system) in figures.items():
        total = user + system
        extra = "" if kind == "memory" else f"  (+{total - memory:.0f} above memory)"
        print(f"{kind:<8}{user:>8.0f} +{system:>6.0f} ={total:>6.0f}{extra}")


def profile(kind: str, steps: int, base: str) -> None:
    """cProfile of every thread (the store's worker threads too), merged."""
    profilers: list[cProfile.Profile] = []
    original = threading.Thread.run

    def profiled(thread: threading.Thread) -> None:
        profiler = cProfile.Profile(time.thread_time)
        profilers.append(profiler)
        profiler.enable()
        try:
            original(thread)
        finally:
            profiler.disable()

    threading.Thread.run = profiled  # type: ignore[method-assign]
    main_thread = cProfile.Profile(time.thread_time)
    main_thread.enable()
    asyncio.run(_one(kind, os.path.join(base, "profiled"), steps, "profiled"))
    main_thread.disable()
    threading.Thread.run = original  # type: ignore[method-assign]
    pstats.Stats(main_thread, *profilers).sort_stats("tottime").print_stats(30)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=1000)
    parser.add_argument("--profile", choices=KINDS[1:], default=None)
    arguments = parser.parse_args()
    with tempfile.TemporaryDirectory() as base:
        if arguments.profile:
            profile(arguments.profile, arguments.steps, base)
        else:
            asyncio.run(main(arguments.steps, base))
