"""CPU per durable step above the memory store (issue 27 item 4).

    uv run python bench/durable_cpu.py [--steps 1000] [--profile KIND | --parts]

One run of ``--steps`` steps (scripted model calling a ``noop`` tool, as in
``bench/stores_bench.py``) per store; the process's CPU time per step (all threads, from
``getrusage``), user and system apart (system: the kernel's work, most of it for the
``fdatasync`` of each write), the least of three runs, and the difference to the memory store,
whose figure is the loop's own cost. ``--profile jsonl`` (or ``sqlite``) prints the cProfile
table of one such run, every thread's merged, sorted by own CPU time (each thread's profiler
counts that thread's CPU time, so waiting on a lock or the disk costs nothing there and what
the table shows is where the CPU goes). ``--parts`` splits jsonl's cost above memory into its
parts by taking them away one at a time, for diagnosis only (never a durable configuration):
the ``fdatasync`` of each write (the kernel's work for it, whatever thread pays it), the hand-off
of each write to a worker thread and back (its ``futex`` calls and context switches), and what
is left (encoding the line, the file bookkeeping, ``pwrite``).
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
from typing import Any

sys.path.insert(0, os.path.dirname(__file__))

import polyloop.stores.jsonl as jsonl_store
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
        figures[kind] = await _least(kind, base, steps)
    print(f"CPU per step, {steps}-step runs (least of 3), µs: user + system (kernel) = total")
    memory = sum(figures["memory"])
    for kind, (user, system) in figures.items():
        total = user + system
        extra = "" if kind == "memory" else f"  (+{total - memory:.0f} above memory)"
        print(f"{kind:<8}{user:>8.0f} +{system:>6.0f} ={total:>6.0f}{extra}")


async def parts(steps: int, base: str) -> None:
    """jsonl's CPU per step with its sync and its thread hand-off taken away, one at a time."""
    original_sync = jsonl_store._sync_data
    original_submit = jsonl_store.JsonlRunStore._submit

    async def inline(self: object, function: Any, *args: object) -> Any:
        return function(*args)  # on the event-loop thread: no hand-off

    def no_sync(fd: int) -> None:
        return None

    variants = {
        "jsonl": (original_sync, original_submit),
        "no hand-off": (original_sync, inline),
        "no fdatasync": (no_sync, original_submit),
        "neither": (no_sync, inline),
    }
    memory = sum(await _least("memory", base, steps))
    print(f"jsonl CPU per step above memory ({memory:.0f} µs), {steps}-step runs (least of 3), µs")
    try:
        for name, (sync, submit) in variants.items():
            jsonl_store._sync_data = sync
            jsonl_store.JsonlRunStore._submit = submit  # type: ignore[method-assign]
            user, system = await _least("jsonl", os.path.join(base, name), steps)
            print(f"{name:<14}{user + system - memory:>6.0f}")
    finally:
        jsonl_store._sync_data = original_sync
        jsonl_store.JsonlRunStore._submit = original_submit  # type: ignore[method-assign]


async def _least(kind: str, base: str, steps: int) -> tuple[float, float]:
    runs = [
        await _one(kind, os.path.join(base, f"{kind}-{n}"), steps, f"cpu-{n}") for n in range(3)
    ]
    return min(runs, key=sum)  # the least disturbed of three (a shared machine)


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
    parser.add_argument("--parts", action="store_true", help="split jsonl's cost into parts")
    arguments = parser.parse_args()
    with tempfile.TemporaryDirectory() as base:
        if arguments.profile:
            profile(arguments.profile, arguments.steps, base)
        elif arguments.parts:
            asyncio.run(parts(arguments.steps, base))
        else:
            asyncio.run(main(arguments.steps, base))
