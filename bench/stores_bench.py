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


async def main(quick: bool, base: str) -> None:
    repeats = 3 if quick else 7
    floor_steps = 100 if quick else 400
    print(f"PolyLoop durable stores — {base} ({os.uname().sysname}, {os.cpu_count()} CPUs)")

    fa_file = statistics.median(floor_a_file(base, floor_steps) for _ in range(repeats))
    fa_sql = statistics.median(floor_a_sqlite(base, floor_steps) for _ in range(repeats))
    rounds = 40 if quick else 160
    fb_file = statistics.median(floor_b_file(base, 50, rounds) for _ in range(repeats))
    fb_sql = statistics.median(floor_b_sqlite(base, 50, rounds) for _ in range(repeats))
    print()
    print("physical floors")
    print(
        f"  (a) 4 appends+fdatasync per step : {fa_file:8.0f} µs/step  = {1e6 / fa_file:7.0f} steps/s"
    )
    print(
        f"  (a) 4 SQLite commits per step    : {fa_sql:8.0f} µs/step  = {1e6 / fa_sql:7.0f} steps/s"
    )
    print(f"  (b) 50 writers, shared fdatasync : {fb_file:8.0f} steps/s")
    print(f"  (b) 50 writers, shared commit    : {fb_sql:8.0f} steps/s")
    floors_a = {"jsonl": fa_file, "sqlite": fa_sql}

    print()
    header = (
        f"{'store':<7} {'W1 200':>9} {'x(a)':>5} {'W1 1000':>9} {'x(a)':>5} {'syncs/step':>10}"
        f" {'W2 steps/s':>11} {'vs floor':>14} {'W3 ms':>7} {'B/step 200':>10} {'B/step 2000':>11}"
    )
    print(header)
    print("-" * len(header))
    for kind in ("memory", "jsonl", "sqlite"):
        w1: dict[int, float] = {}
        for steps in (200, 1_000):
            await w1_once(kind, fresh_dir(base), 20)  # warm-up
            n = repeats if steps == 200 else max(3, repeats // 2)
            samples = [await w1_once(kind, fresh_dir(base), steps) / steps * 1e6 for _ in range(n)]
            w1[steps] = statistics.median(samples)
        w2 = statistics.median(
            [await w2_once(kind, fresh_dir(base), 50, 40) for _ in range(max(3, repeats // 2))]
        )
        if kind == "memory":
            print(
                f"{kind:<7} {w1[200]:>7.0f}µs {'':>5} {w1[1_000]:>7.0f}µs {'':>5} {'':>10}"
                f" {w2:>11.0f} {'':>14} {'':>7} {'':>10} {'':>11}"
            )
            continue
        syncs = syncs_per_step(kind, base, 200)
        floor = floors_a[kind]
        if kind == "sqlite":
            versus = f"{w2 / fb_sql * 100:5.0f}% of (b)"
        else:
            versus = f"{w2 / (1e6 / fa_file):5.1f}x (a)"
        w3_ms = statistics.median(w3(kind, base, 1_000) for _ in range(3))
        per_step_bytes = {}
        for steps in (200, 2_000):
            where = fresh_dir(base)
            await w1_once(kind, where, steps)
            per_step_bytes[steps] = disk_bytes(where) / steps
        print(
            f"{kind:<7} {w1[200]:>7.0f}µs {w1[200] / floor:>5.2f} {w1[1_000]:>7.0f}µs"
            f" {w1[1_000] / floor:>5.2f} {syncs:>10.2f} {w2:>11.0f} {versus:>14}"
            f" {w3_ms:>7.1f} {per_step_bytes[200]:>10.0f} {per_step_bytes[2_000]:>11.0f}"
        )
    print()
    print("x(a): W1 time per step over floor (a) of the same store (target <= 1.3).")
    print("W2 target: sqlite >= 60% of floor (b); jsonl >= 2x floor (a) steps/s.")
    print("W3 target: < 50 ms. B/step: bytes on disk per step (target: constant).")


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
