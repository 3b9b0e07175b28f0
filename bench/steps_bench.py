"""`polyloop steps` (issue 29): peak memory and time of the StepRecord table, 1,000 against
10,000 runs of 30 steps.

    uv run python bench/steps_bench.py [--quick] [--runs 1000,10000] [--formats parquet,csv]

Each store is a real SQLite store: one run of 30 tool steps (400-character observations,
a model binding of three keys) is written through ``SqliteRunStore``; the others are its rows
copied with their ``run_id`` replaced, in SQL (writing 300,000 steps through the API would take
most of the bench's time and measure the store, not the table). Each export is a fresh
``polyloop steps`` process; its peak RSS comes from ``wait4``. Flat memory means the 10,000-run
figure is within a few MB of the 1,000-run one, while the table is ten times larger.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sqlite3
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from polyloop import testing
from polyloop.serialization import LogRecord
from polyloop.stores.sqlite import SqliteRunStore
from polyloop.types import StopReason

POLYLOOP = str(Path(sys.executable).with_name("polyloop"))
STEPS = 30
TEMPLATE = "run-000000"


def _template_records() -> list[LogRecord]:
    snapshot = {
        "model_client.kind": "scripted",
        "request.model_binding.task": "refund-ticket",
        "request.model_binding.seed": "7",
        "request.model_binding.variant": "b",
    }
    records: list[LogRecord] = [testing.run_started(TEMPLATE, snapshot)]
    steps = [
        testing.tool_step(TEMPLATE, k, arguments={"k": k}, observation=f"{k:03d}" + "o" * 397)
        for k in range(STEPS)
    ]
    for step in steps:
        records += step.records
    records.append(testing.run_finished(TEMPLATE, steps, StopReason.STEP_BUDGET))
    return records


async def _write_template(path: Path) -> None:
    async with SqliteRunStore(path) as store:
        await testing.write_records(store, _template_records())


def make_store(path: Path, runs: int) -> None:
    asyncio.run(_write_template(path))
    connection = sqlite3.connect(path)
    with connection:
        for index in range(1, runs):
            run_id = f"run-{index:06d}"
            connection.execute(
                "INSERT INTO run_records (run_id, kind, body, record_key) "
                "SELECT ?, kind, replace(body, ?, ?), record_key FROM run_records "
                "WHERE run_id = ? ORDER BY seq",
                (run_id, f'"run_id":"{TEMPLATE}"', f'"run_id":"{run_id}"', TEMPLATE),
            )
    connection.close()


def export(store: Path, fmt: str, output: Path) -> tuple[float, int]:
    """Wall seconds and peak RSS (bytes) of one `polyloop steps` process."""
    started = time.perf_counter()
    process = subprocess.Popen(
        [POLYLOOP, "steps", "--store", f"sqlite://{store}", "--format", fmt, "-o", str(output)],
        stdout=subprocess.DEVNULL,
    )
    _, status, usage = os.wait4(process.pid, 0)
    process.returncode = os.waitstatus_to_exitcode(status)
    elapsed = time.perf_counter() - started
    if process.returncode != 0:
        raise SystemExit(f"polyloop steps failed with exit {process.returncode}")
    return elapsed, usage.ru_maxrss * 1024


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="100 and 1,000 runs")
    parser.add_argument("--runs", default=None, help="comma-separated run counts")
    parser.add_argument("--formats", default="parquet,csv,jsonl")
    args = parser.parse_args()
    counts = [
        int(n) for n in (args.runs or ("100,1000" if args.quick else "1000,10000")).split(",")
    ]
    formats = args.formats.split(",")
    print(f"polyloop steps, SQLite store, {STEPS} steps per run, 400-char observations")
    print(
        f"{'runs':>7} {'rows':>8} {'format':>8} {'seconds':>8} {'rows/s':>9} {'peak RSS':>9} {'file':>9}"
    )
    with tempfile.TemporaryDirectory(prefix="polyloop-steps-bench-") as directory:
        for runs in counts:
            store = Path(directory) / f"runs-{runs}.sqlite"
            make_store(store, runs)
            for fmt in formats:
                output = Path(directory) / f"steps-{runs}.{fmt}"
                elapsed, peak = export(store, fmt, output)
                rows = runs * STEPS
                print(
                    f"{runs:>7} {rows:>8} {fmt:>8} {elapsed:>8.1f} {rows / elapsed:>9.0f} "
                    f"{peak / 2**20:>7.1f}MB {output.stat().st_size / 2**20:>7.1f}MB",
                    flush=True,
                )
                output.unlink()
            store.unlink()


if __name__ == "__main__":
    main()
