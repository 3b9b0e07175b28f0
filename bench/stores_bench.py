"""Durable stores under the loop (issue 4): W1, W2, W3 next to the physical floors.

    uv run python bench/stores_bench.py [--quick] [--dir DIR]

- floor (a): 4 sequential appends per step, each followed by ``fdatasync``; and 4 SQLite
  commits per step (WAL, ``synchronous=FULL``), one row each.
- floor (b): the same writes from 50 concurrent writers sharing one sync per round: 50
  appends + one ``fdatasync``, or one transaction of 50 rows + one commit, 4 rounds per step.
- W1: one run of 200 and 1,000 steps (scripted model calling a ``noop`` tool that returns
  "ok"), median µs per step, and fsync + fdatasync calls per step counted with ``strace -f -c``.
- W2: 50 concurrent runs x 40 steps in one process: aggregate steps per second.
- W3: a 1,000-step run whose process is SIGKILLed inside the next model call; a fresh process
  opens the store, resumes and takes one more step: milliseconds (imports excluded).
- bytes on disk per step after runs of 200 and 2,000 steps.

The memory store appears as a reference row: its time is the loop's own cost.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
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
from collections.abc import Mapping

from polyloop.ports import ModelCall, RunStore
from polyloop.session import AgentDefinition, RunRequest, resume, run
from polyloop.stores.jsonl import JsonlRunStore
from polyloop.stores.memory import MemoryRunStore
from polyloop.stores.sqlite import SqliteRunStore
from polyloop.testing import LineDecisionParser, NullEventSink
from polyloop.tools import Tool, ToolRegistry, ToolSpec
from polyloop.types import (
    Budget,
    Context,
    Message,
    ModelReply,
    ReplayPolicy,
    Role,
    SyntheticObservations,
    TextBlock,
)

TOOL_CALL = ModelReply(call_id=None, content="CALL noop {}", thinking="")
FINAL = ModelReply(call_id=None, content="FINAL: done", thinking="")
SYNTHETIC = SyntheticObservations("rejected", "env failed", "model failed")
CONTEXT = Context(
    (Message(Role.SYSTEM, (TextBlock("You call tools."),)),),
    (Message(Role.USER, (TextBlock("Call noop until told to stop."),)),),
)
TOOLS = ToolRegistry(
    [Tool(ToolSpec("noop", "Does nothing.", {"type": "object"}, ReplayPolicy.SAFE), lambda a: "ok")]
)
LINE = b'{"type":"intent","record":{"run_id":"bench","kind":"model_call","call_index":7,' + (
    b'"result_id":"model-7","replay_policy":"safe"}}\n'
)


class NoopCaller:
    """Asks for the ``noop`` tool until the last step, then answers. With ``hang_at`` it
    announces that call on stdout and never returns (the process is killed there)."""

    def __init__(self, steps: int, hang_at: int | None = None) -> None:
        self._last = steps - 1
        self._hang_at = hang_at

    async def call(self, call: ModelCall) -> ModelReply:
        if call.call_index == self._hang_at:
            print(f"hanging in call {call.call_index}", flush=True)
            await asyncio.sleep(3600)
        return FINAL if call.call_index >= self._last else TOOL_CALL

    def parameters(self) -> Mapping[str, str]:
        return {"kind": "noop_caller", "steps": str(self._last + 1)}


def setup(
    store: RunStore, steps: int, run_id: str, hang_at: int | None = None
) -> tuple[AgentDefinition, RunRequest]:
    definition = AgentDefinition(
        NoopCaller(steps, hang_at), LineDecisionParser(), store, NullEventSink(), SYNTHETIC
    )
    request = RunRequest(
        run_id=run_id,
        budget=Budget(steps + 1, steps + 1, 3, 10**12),
        action_executor=TOOLS.executor(),
        tools=TOOLS,
        context=CONTEXT,
        injections={},
        model_binding={},
        model_replay_policy=ReplayPolicy.SAFE,
        observation_template="{observation}",
        tool_section_template="{tools}",
        cancel_grace_seconds=1.0,
    )
    return definition, request


def make_store(kind: str, where: str) -> RunStore:
    if kind == "jsonl":
        return JsonlRunStore(os.path.join(where, "runs"))
    if kind == "sqlite":
        return SqliteRunStore(os.path.join(where, "runs.db"))
    return MemoryRunStore()


async def close(store: RunStore) -> None:
    if isinstance(store, JsonlRunStore | SqliteRunStore):
        await store.__aexit__(None, None, None)


def fresh_dir(base: str) -> str:
    return tempfile.mkdtemp(dir=base)


# ---------------------------------------------------------------------------------------
# physical floors
# ---------------------------------------------------------------------------------------


def floor_a_file(base: str, steps: int) -> float:
    """µs per step: 4 appends, each followed by fdatasync."""
    path = os.path.join(fresh_dir(base), "floor.jsonl")
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    try:
        began = time.perf_counter()
        for _ in range(steps * 4):
            os.write(fd, LINE)
            os.fdatasync(fd)
        return (time.perf_counter() - began) / steps * 1e6
    finally:
        os.close(fd)


def _sqlite(base: str) -> sqlite3.Connection:
    connection = sqlite3.connect(os.path.join(fresh_dir(base), "floor.db"), isolation_level=None)
    connection.execute("PRAGMA journal_mode = WAL")
    connection.execute("PRAGMA synchronous = FULL")
    connection.execute(
        "CREATE TABLE r (seq INTEGER PRIMARY KEY, run_id TEXT, kind TEXT, body TEXT)"
    )
    return connection


def floor_a_sqlite(base: str, steps: int) -> float:
    """µs per step: 4 commits of one row each."""
    connection = _sqlite(base)
    body = LINE.decode()
    began = time.perf_counter()
    for _ in range(steps * 4):
        connection.execute("BEGIN IMMEDIATE")
        connection.execute("INSERT INTO r (run_id, kind, body) VALUES ('b', 'intent', ?)", (body,))
        connection.execute("COMMIT")
    elapsed = time.perf_counter() - began
    connection.close()
    return elapsed / steps * 1e6


def floor_b_file(base: str, writers: int, rounds: int) -> float:
    """steps/s: each round, one append per writer and one fdatasync for all; 4 rounds a step."""
    path = os.path.join(fresh_dir(base), "floor.jsonl")
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    try:
        began = time.perf_counter()
        for _ in range(rounds):
            for _ in range(writers):
                os.write(fd, LINE)
            os.fdatasync(fd)
        elapsed = time.perf_counter() - began
    finally:
        os.close(fd)
    return writers * rounds / 4 / elapsed


def floor_b_sqlite(base: str, writers: int, rounds: int) -> float:
    """steps/s: each round, one transaction with one row per writer; 4 rounds a step."""
    connection = _sqlite(base)
    body = LINE.decode()
    began = time.perf_counter()
    for _ in range(rounds):
        connection.execute("BEGIN IMMEDIATE")
        for _ in range(writers):
            connection.execute(
                "INSERT INTO r (run_id, kind, body) VALUES ('b', 'intent', ?)", (body,)
            )
        connection.execute("COMMIT")
    elapsed = time.perf_counter() - began
    connection.close()
    return writers * rounds / 4 / elapsed


# ---------------------------------------------------------------------------------------
# workloads
# ---------------------------------------------------------------------------------------


async def w1_once(kind: str, where: str, steps: int, run_id: str = "w1") -> float:
    """Seconds for one run of ``steps`` steps on a fresh store."""
    store = make_store(kind, where)
    definition, request = setup(store, steps, run_id)
    gc.collect()
    began = time.perf_counter()
    result = await run(definition, request)
    elapsed = time.perf_counter() - began
    assert len(result.steps) == steps, result.stop_reason
    await close(store)
    return elapsed


async def w2_once(kind: str, where: str, runs: int, steps: int) -> float:
    """Aggregate steps per second of ``runs`` concurrent runs on one store."""
    store = make_store(kind, where)
    definition, _ = setup(store, steps, "unused")
    requests = [setup(store, steps, f"w2-{i}")[1] for i in range(runs)]
    gc.collect()
    began = time.perf_counter()
    results = await asyncio.gather(*(run(definition, r) for r in requests))
    elapsed = time.perf_counter() - began
    assert all(len(r.steps) == steps for r in results)
    await close(store)
    return runs * steps / elapsed


def disk_bytes(where: str) -> int:
    total = 0
    for root, _dirs, files in os.walk(where):
        total += sum(os.path.getsize(os.path.join(root, name)) for name in files)
    return total


def child(*args: str, strace_out: str | None = None) -> subprocess.Popen[str]:
    command = [sys.executable, os.path.abspath(__file__), "--child", *args]
    if strace_out is not None:
        command = ["strace", "-f", "-c", "-e", "trace=fsync,fdatasync", "-o", strace_out, *command]
    return subprocess.Popen(command, stdout=subprocess.PIPE, text=True)


def syncs_per_step(kind: str, base: str, steps: int) -> float:
    """fsync + fdatasync calls per step of one W1 run, counted by strace in a child."""
    if shutil.which("strace") is None:
        return float("nan")
    out = os.path.join(fresh_dir(base), "strace.txt")
    process = child("w1", kind, fresh_dir(base), str(steps), strace_out=out)
    process.communicate()
    with open(out) as handle:
        text = handle.read()
    calls = 0
    for name in ("fsync", "fdatasync"):
        match = re.search(rf"^\s*[\d.]+\s+[\d.]+\s+\d+\s+(\d+)\s+(?:\d+\s+)?{name}\s*$", text, re.M)
        if match:
            calls += int(match.group(1))
    return calls / steps


def w3(kind: str, base: str, steps: int) -> float:
    """ms to open the store in a fresh process, resume and take one more step."""
    where = fresh_dir(base)
    doomed = child("w3-run", kind, where, str(steps))
    assert doomed.stdout is not None
    for line in doomed.stdout:
        if line.startswith("hanging"):
            break
    doomed.send_signal(signal.SIGKILL)
    doomed.wait()
    doomed.stdout.close()
    resumer = child("w3-resume", kind, where, str(steps))
    out, _ = resumer.communicate()
    return float(out.split()[-1])


# ---------------------------------------------------------------------------------------
# child modes
# ---------------------------------------------------------------------------------------


async def child_main(mode: str, kind: str, where: str, steps: int) -> None:
    if mode == "w1":
        await w1_once(kind, where, steps)
    elif mode == "w3-run":
        store = make_store(kind, where)
        definition, request = setup(store, steps + 1, "w3", hang_at=steps)
        await run(definition, request)
    elif mode == "w3-resume":
        began = time.perf_counter()
        store = make_store(kind, where)
        definition, request = setup(store, steps + 1, "w3", hang_at=None)
        result = await resume(definition, request)
        elapsed = time.perf_counter() - began
        assert len(result.steps) == steps + 1, (result.stop_reason, len(result.steps))
        await close(store)
        print(f"resumed {elapsed * 1e3:.2f}")


# ---------------------------------------------------------------------------------------
# report
# ---------------------------------------------------------------------------------------


async def paired_w1(kind: str, base: str, steps: int, pairs: int) -> tuple[float, float, float]:
    """Median µs/step of W1, of floor (a) measured right before each W1 run, and of their
    ratio per pair: the disk's latency drifts (other tenants), pairs cancel most of that."""
    floor = floor_a_file if kind == "jsonl" else floor_a_sqlite
    await w1_once(kind, fresh_dir(base), 20)  # warm-up
    w1s, floors, ratios = [], [], []
    for _ in range(pairs):
        f = floor(base, steps)
        w = await w1_once(kind, fresh_dir(base), steps) / steps * 1e6
        w1s.append(w)
        floors.append(f)
        ratios.append(w / f)
    return statistics.median(w1s), statistics.median(floors), statistics.median(ratios)


async def paired_w2(kind: str, base: str, pairs: int) -> tuple[float, float, float]:
    """Median steps/s of W2, of its floor (sqlite: (b); jsonl: (a)), and of their ratio."""
    w2s, floors, ratios = [], [], []
    for _ in range(pairs):
        if kind == "sqlite":
            f = floor_b_sqlite(base, 50, 160)
        elif kind == "jsonl":
            f = 1e6 / floor_a_file(base, 200)
        else:
            f = float("nan")
        w = await w2_once(kind, fresh_dir(base), 50, 40)
        w2s.append(w)
        floors.append(f)
        ratios.append(w / f)
    return statistics.median(w2s), statistics.median(floors), statistics.median(ratios)


async def main(quick: bool, base: str) -> None:
    pairs = 3 if quick else 7
    print(f"PolyLoop durable stores — {base} ({os.uname().sysname}, {os.cpu_count()} CPUs)")
    print("Every workload sample is paired with a floor sample taken just before it; the")
    print("columns are medians over the pairs (ratio = median of per-pair ratios).")

    print()
    print("physical floors (medians of separate samples)")
    fa_file = statistics.median(floor_a_file(base, 200) for _ in range(pairs))
    fa_sql = statistics.median(floor_a_sqlite(base, 200) for _ in range(pairs))
    fb_file = statistics.median(floor_b_file(base, 50, 160) for _ in range(pairs))
    fb_sql = statistics.median(floor_b_sqlite(base, 50, 160) for _ in range(pairs))
    print(
        f"  (a) 4 appends+fdatasync per step : {fa_file:8.0f} µs/step = {1e6 / fa_file:6.0f} steps/s"
    )
    print(
        f"  (a) 4 SQLite commits per step    : {fa_sql:8.0f} µs/step = {1e6 / fa_sql:6.0f} steps/s"
    )
    print(f"  (b) 50 writers, shared fdatasync : {fb_file:8.0f} steps/s")
    print(f"  (b) 50 writers, shared commit    : {fb_sql:8.0f} steps/s")

    print()
    print("W1: one run, µs per step (floor (a) of the same store, paired)")
    print(f"  {'store':<7} {'steps':>5} {'W1 µs/step':>11} {'floor (a)':>10} {'ratio':>6}")
    for kind in ("memory", "jsonl", "sqlite"):
        for steps in (200, 1_000):
            if kind == "memory":
                await w1_once(kind, fresh_dir(base), 20)
                w = statistics.median(
                    [
                        await w1_once(kind, fresh_dir(base), steps) / steps * 1e6
                        for _ in range(pairs)
                    ]
                )
                print(f"  {kind:<7} {steps:>5} {w:>11.0f} {'-':>10} {'-':>6}")
                continue
            n = pairs if steps == 200 else max(3, pairs // 2)
            w, f, r = await paired_w1(kind, base, steps, n)
            print(f"  {kind:<7} {steps:>5} {w:>11.0f} {f:>10.0f} {r:>6.2f}")

    print()
    print("fsync + fdatasync calls per step (strace -f -c, one 200-step W1 run)")
    for kind in ("jsonl", "sqlite"):
        print(f"  {kind:<7} {syncs_per_step(kind, base, 200):.2f}")

    print()
    print("W2: 50 concurrent runs x 40 steps, aggregate steps/s (paired with its floor)")
    print(f"  {'store':<7} {'W2 steps/s':>11} {'floor':>16} {'ratio':>6}")
    for kind in ("memory", "jsonl", "sqlite"):
        w, f, r = await paired_w2(kind, base, max(3, pairs // 2))
        label = {"memory": "-", "jsonl": f"(a) {f:.0f}", "sqlite": f"(b) {f:.0f}"}[kind]
        ratio = "-" if kind == "memory" else f"{r:.2f}"
        print(f"  {kind:<7} {w:>11.0f} {label:>16} {ratio:>6}")

    print()
    print("W3: fresh process, open + resume a 1,000-step run killed in its next model call")
    print("    + one more step (imports excluded); bytes on disk per step")
    print(f"  {'store':<7} {'W3 ms':>7} {'B/step @200':>12} {'B/step @2000':>13}")
    for kind in ("jsonl", "sqlite"):
        w3_ms = statistics.median(w3(kind, base, 1_000) for _ in range(3))
        per_step: dict[int, float] = {}
        for steps in (200, 2_000):
            where = fresh_dir(base)
            await w1_once(kind, where, steps)
            per_step[steps] = disk_bytes(where) / steps
        print(f"  {kind:<7} {w3_ms:>7.1f} {per_step[200]:>12.0f} {per_step[2_000]:>13.0f}")

    print()
    print("targets: W1 ratio <= 1.3 at 200 and 1,000 steps; W2 sqlite >= 0.60 of (b),")
    print("jsonl >= 2.0 x (a); W3 < 50 ms; bytes per step constant.")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer repeats (smoke run)")
    parser.add_argument("--dir", default=None, help="where to put the files (default: a temp dir)")
    parser.add_argument("--child", nargs=4, metavar=("MODE", "KIND", "WHERE", "STEPS"))
    arguments = parser.parse_args()
    if arguments.child:
        mode, kind, where, steps = arguments.child
        asyncio.run(child_main(mode, kind, where, int(steps)))
    else:
        base = tempfile.mkdtemp(prefix="polyloop-bench-", dir=arguments.dir)
        try:
            asyncio.run(main(arguments.quick, base))
        finally:
            shutil.rmtree(base, ignore_errors=True)
