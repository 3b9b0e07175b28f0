"""The worker reads only the runs written since its last pass (design 0069), on a real SQLite
store, in this process (an async test: kept apart from the browser tests, whose playwright
runs a loop of its own in the test's thread)."""

from __future__ import annotations

import asyncio
import contextlib
from pathlib import Path

from polyloop.session import approve
from polyloop.stores.sqlite import SqliteRunStore
from polyloop.types import StopReason
from polyloop_console.driving import Agent
from tests.console._agents import ONE_REFUND
from tests.console._kit import AGENT, DEADLINE, episode, ledger_lines
from tests.console.test_live import RUN, _park


async def test_a_worker_reads_only_the_runs_written_since_its_last_pass(tmp_path: Path) -> None:
    """On SQLite (markers, no notifications): the first pass reads every run, a pass with
    nothing written reads none, and after a decision the next pass reads that run alone and
    carries it out."""
    from polyloop_console.driving import _Looked, work
    from tests.cli._kit import finished as finished_record
    from tests.cli._kit import started as started_record
    from tests.cli._kit import write

    path = tmp_path / "runs.sqlite"
    ledger = tmp_path / "ledger"
    parked = await _park(f"sqlite:{path}", ledger)
    async with SqliteRunStore(path) as store:
        for index in range(20):
            run_id = f"done-{index:02}"
            await write(
                store,
                [started_record(run_id), finished_record(run_id, StopReason.TASK_COMPLETED, [])],
            )
        looked = _Looked()
        passes = 0

        async def run_ids() -> list[str]:
            nonlocal passes
            passes += 1
            return list(await store.list_run_ids())

        agent = Agent(AGENT, episode(ledger, ONE_REFUND))
        worker = asyncio.create_task(work(store, agent, run_ids, poll_seconds=0.05, looked=looked))
        try:
            await _until(lambda: looked.reads == 21, "the first pass to read every run")
            reads, first = looked.reads, looked.passes
            assert 21 == len(looked.markers)
            await _until(lambda: looked.passes >= first + 3, "three passes, nothing written")
            assert reads == looked.reads
            assert 0 == passes  # the markers list the runs: no listing read
            await approve(
                store,
                RUN,
                step=parked.ask.step,
                arguments_sha256=parked.ask.arguments_sha256,
                decided_by="tester",
            )
            end = asyncio.get_running_loop().time() + DEADLINE
            while (await store.read_log(RUN)).finished is None:
                assert asyncio.get_running_loop().time() < end, "the run was not carried out"
                await asyncio.sleep(0.02)
            assert ["refund:80", "submit"] == ledger_lines(ledger)
            # The decided run read (and, after the resume wrote, once more): no other run.
            assert looked.reads - reads <= 3
        finally:
            worker.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await worker


async def _until(condition, what: str) -> None:  # type: ignore[no-untyped-def]
    end = asyncio.get_running_loop().time() + DEADLINE
    while not condition():
        if asyncio.get_running_loop().time() > end:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.02)
