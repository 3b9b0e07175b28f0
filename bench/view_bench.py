"""`polyloop view` (issue 29): how long a 1,000-step run with 20,000-character observations
takes to write, and to open in a real browser (target: under 2 s).

    uv run python bench/view_bench.py [--steps 1000] [--chars 20000] [--repeat 5]

The run is written through ``SqliteRunStore``; the page by the ``polyloop view`` command; it is
opened from disk in Debian's headless ``chromium`` (playwright driving ``/usr/bin/chromium``),
a fresh page each time. "Opened" is the navigation's ``loadEventEnd`` (HTML parsed, the page's
script run, the step list built) and the first contentful paint, from the Navigation Timing and
Paint Timing entries of the page itself.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from playwright.sync_api import sync_playwright

from polyloop import testing
from polyloop.serialization import LogRecord
from polyloop.stores.sqlite import SqliteRunStore
from polyloop.types import StopReason

POLYLOOP = str(Path(sys.executable).with_name("polyloop"))
CHROMIUM = "/usr/bin/chromium"


async def _write(path: Path, steps: int, chars: int) -> None:
    writes = [
        testing.tool_step(
            "long", k, observation=(f"{k:04d} " + "lorem ipsum " * (chars // 12 + 1))[:chars]
        )
        for k in range(steps)
    ]
    records: list[LogRecord] = [testing.run_started("long")]
    for step in writes:
        records += step.records
    records.append(testing.run_finished("long", writes, StopReason.STEP_BUDGET))
    async with SqliteRunStore(path) as store:
        await testing.write_records(store, records)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--steps", type=int, default=1000)
    parser.add_argument("--chars", type=int, default=20_000)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="polyloop-view-bench-") as directory:
        store = Path(directory) / "runs.sqlite"
        asyncio.run(_write(store, args.steps, args.chars))
        page_path = Path(directory) / "long.html"
        started = time.perf_counter()
        subprocess.run(
            [POLYLOOP, "view", "long", "--store", f"sqlite://{store}", "-o", str(page_path)],
            check=True,
            stdout=subprocess.DEVNULL,
        )
        written = time.perf_counter() - started
        print(
            f"{args.steps} steps x {args.chars:,}-char observations: page "
            f"{page_path.stat().st_size / 2**20:.1f} MB, written by `polyloop view` in "
            f"{written:.2f} s (process included)"
        )
        loads: list[float] = []
        paints: list[float] = []
        with sync_playwright() as driver:
            browser = driver.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
            for _ in range(args.repeat):
                page = browser.new_page(viewport={"width": 1366, "height": 768})
                page.goto(page_path.as_uri(), wait_until="load")
                timing = page.evaluate(
                    """() => {
                      const nav = performance.getEntriesByType("navigation")[0];
                      const paint = performance.getEntriesByName("first-contentful-paint")[0];
                      return [nav.loadEventEnd, paint ? paint.startTime : -1,
                              document.querySelectorAll("main section.step").length];
                    }"""
                )
                load_ms, paint_ms, shown = timing
                assert shown == args.steps, shown
                loads.append(load_ms / 1000)
                paints.append(paint_ms / 1000)
                page.close()
            browser.close()
        print(f"opened in chromium ({os.cpu_count()} cores, {args.repeat} times):")
        print(
            f"  load event:             median {statistics.median(loads):.2f} s, max "
            f"{max(loads):.2f} s"
        )
        print(
            f"  first contentful paint: median {statistics.median(paints):.2f} s, max "
            f"{max(paints):.2f} s"
        )
        print(f"  target < 2 s: {'met' if max(loads) < 2 else 'NOT met'}")


if __name__ == "__main__":
    main()
