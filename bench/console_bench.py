"""The operator console (issue 39) on a store of many runs: how long its pages take.

    uv run python bench/console_bench.py [--runs 10000] [--parked 20] [--repeat 5]

Writes ``--runs`` finished two-step runs and ``--parked`` runs parked on an approval into one
SQLite file, starts a real ``polyloop serve`` on a loopback port, signs in over HTTP and times
(median of ``--repeat``) the runs page (first page, a later page by keyset, a search, a status
filter) and the inbox, each a full HTTP round trip. Timings on a shared machine are noisy.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.cli._kit import finished, started, tool_step, tool_step_records, write
from tests.console._agents import ONE_REFUND
from tests.console._kit import park, serve, signed_in

from polyloop.stores.sqlite import SqliteRunStore
from polyloop.types import ReplayPolicy, StopReason


async def fill(store: Path, runs: int, parked: int, ledger: Path) -> None:
    async with SqliteRunStore(store) as opened:
        for index in range(runs):
            run_id = f"run-{index:06d}"
            await write(  # type: ignore[arg-type]
                opened,
                [
                    started(run_id),
                    *tool_step_records(run_id, 0, "lookup", ReplayPolicy.SAFE),
                    finished(run_id, StopReason.TASK_COMPLETED, [tool_step(0, "lookup")]),
                ],
            )
    for index in range(parked):
        await park(store, f"parked-{index:03d}", ledger, ONE_REFUND)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=10_000)
    parser.add_argument("--parked", type=int, default=20)
    parser.add_argument("--repeat", type=int, default=5)
    options = parser.parse_args()
    with tempfile.TemporaryDirectory() as scratch:
        home = Path(scratch) / "home"
        home.mkdir()
        store = home / "runs.sqlite"
        began = time.perf_counter()
        asyncio.run(fill(store, options.runs, options.parked, Path(scratch) / "ledger"))
        print(
            f"wrote {options.runs} + {options.parked} runs in {time.perf_counter() - began:.1f} s"
        )
        served = serve(home, store)
        try:
            with signed_in(served) as client:
                pages = {
                    "runs, first page": ("/runs", {}),
                    "runs, keyset page": ("/runs", {"after": f"run-{options.runs // 2:06d}"}),
                    "runs, search": ("/runs", {"q": "run-00999"}),
                    "runs, status waiting_approval": ("/runs", {"status": "waiting_approval"}),
                    "inbox": ("/", {}),
                }
                for name, (path, params) in pages.items():
                    times = []
                    for _ in range(options.repeat):
                        start = time.perf_counter()
                        answer = client.get(path, params=params)
                        times.append(time.perf_counter() - start)
                        assert 200 == answer.status_code, answer.text[:200]
                    print(f"{name:32s} median {statistics.median(times) * 1000:8.0f} ms")
        finally:
            served.stop()


if __name__ == "__main__":
    main()
