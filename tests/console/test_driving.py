"""Runs continue by themselves: ``polyloop worker`` resumes decided runs under the run lease.

Real worker processes on a real SQLite store: a decided run is carried out once and finishes;
two workers racing over the same runs still execute each approved refund exactly once (the
lease: one driver per run); a worker, or the console resuming after a click, SIGKILLed inside
the approved refund leaves the run to the next worker, which does not run the refund again
(replay policy ``never``); a decision made in a console without ``--agent`` is carried out by
a worker.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
from pathlib import Path

import pytest

from polyloop.session import approve
from polyloop.stores.sqlite import SqliteRunStore
from polyloop.types import StopReason
from tests.cli._kit import POLYLOOP, clean_env
from tests.console._agents import ONE_REFUND
from tests.console._kit import AGENT, ROOT, episode, ledger_lines, park, wait_for

pytestmark = [pytest.mark.slow, pytest.mark.race, pytest.mark.crash]


async def _approve(store: Path, run_id: str) -> None:
    async with SqliteRunStore(store) as opened:
        log = await opened.read_log(run_id)
        ask = log.asks[-1]
        await approve(
            opened, run_id, step=ask.step, arguments_sha256=ask.arguments_sha256, decided_by="t"
        )


def _finished(store: Path, run_id: str) -> StopReason | None:
    async def read() -> StopReason | None:
        async with SqliteRunStore(store) as opened:
            log = await opened.read_log(run_id)
        return None if log.finished is None else log.finished.result.stop_reason

    return asyncio.run(read())


def _worker(home: Path, store: Path, data: str, *extra: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [
            POLYLOOP,
            "worker",
            "--store",
            f"sqlite:{store}",
            "--agent",
            AGENT,
            "--episode",
            data,
            "--poll",
            "0.1",
            *extra,
        ],
        cwd=ROOT,
        env=clean_env(home),
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
    )


def _stop(process: subprocess.Popen[bytes]) -> None:
    if process.poll() is None:
        process.terminate()
        process.wait(timeout=30)
    if process.stdout is not None:
        process.stdout.close()


def test_two_workers_carry_each_decision_out_exactly_once(tmp_path: Path) -> None:
    store, ledger = tmp_path / "runs.sqlite", tmp_path / "ledger"
    run_ids = [f"r-{index}" for index in range(4)]
    for run_id in run_ids:
        asyncio.run(park(store, run_id, ledger, ONE_REFUND))
    # A run left undecided is not touched.
    asyncio.run(park(store, "r-undecided", ledger, ONE_REFUND))
    for run_id in run_ids:
        asyncio.run(_approve(store, run_id))
    data = episode(ledger, ONE_REFUND)
    workers = [_worker(tmp_path / "home", store, data) for _ in range(2)]
    try:
        for run_id in run_ids:
            wait_for(lambda run_id=run_id: _finished(store, run_id), f"{run_id} to finish")
    finally:
        for process in workers:
            _stop(process)
    assert all(StopReason.TASK_COMPLETED == _finished(store, run_id) for run_id in run_ids)
    # One refund and one submit per decided run (the ledger has no run ids: count them).
    assert 4 == ledger_lines(ledger).count("refund:80")
    assert 4 == ledger_lines(ledger).count("submit")
    assert _finished(store, "r-undecided") is None


def test_a_worker_killed_inside_the_refund_does_not_refund_twice(tmp_path: Path) -> None:
    store, ledger = tmp_path / "runs.sqlite", tmp_path / "ledger"
    asyncio.run(park(store, "r-kill", ledger, ONE_REFUND))
    asyncio.run(_approve(store, "r-kill"))
    hanging = _worker(tmp_path / "home", store, episode(ledger, ONE_REFUND, hang_on="refund:80"))
    try:
        assert hanging.stdout is not None
        while b"in-action" not in hanging.stdout.readline():
            assert hanging.poll() is None, "the worker exited before the refund"
        os.kill(hanging.pid, signal.SIGKILL)
        hanging.wait()
    finally:
        _stop(hanging)
    assert ["refund:80"] == ledger_lines(ledger)
    # The next worker takes the run over (the dead one's lease is gone with it) and, the
    # refund being `never` replayed, stops the run rather than refund again.
    following = _worker(tmp_path / "home", store, episode(ledger, ONE_REFUND), "--once")
    try:
        assert 0 == following.wait(timeout=120)
    finally:
        _stop(following)
    assert StopReason.RESUME_STATE_UNKNOWN == _finished(store, "r-kill")
    assert ["refund:80"] == ledger_lines(ledger)


def test_a_decision_made_in_the_console_is_carried_out_by_the_worker(tmp_path: Path) -> None:
    """The console without --agent only records; a separate worker continues the run, once."""
    from tests.console._kit import serve, signed_in

    home, ledger = tmp_path / "home", tmp_path / "ledger"
    store = home / "runs.sqlite"
    home.mkdir()
    asyncio.run(park(store, "r-web", ledger, ONE_REFUND))
    served = serve(home, store)
    working = _worker(home, store, episode(ledger, ONE_REFUND))
    try:
        with signed_in(served) as client:
            page = client.get("/").text
            assert "goes on when a worker" in page
            log = asyncio.run(_read(store, "r-web"))
            ask = log.asks[0]
            fields = {
                "csrf": page.split('name="csrf" value="', 1)[1].split('"', 1)[0],
                "run_id": "r-web",
                "step": str(ask.step),
                "arguments_sha256": ask.arguments_sha256,
                "verdict": "approve",
            }
            assert 303 == client.post("/decide", data=fields).status_code
        wait_for(lambda: _finished(store, "r-web"), "the worker to finish the run")
    finally:
        _stop(working)
        served.stop()
    assert StopReason.TASK_COMPLETED == _finished(store, "r-web")
    assert ["refund:80", "submit"] == ledger_lines(ledger)


async def _read(store: Path, run_id: str):  # type: ignore[no-untyped-def]
    async with SqliteRunStore(store) as opened:
        return await opened.read_log(run_id)


def test_a_console_killed_inside_the_refund_leaves_the_run_to_a_worker(tmp_path: Path) -> None:
    """The server resumes after the click and is SIGKILLed inside the approved refund; a
    worker then takes the run over and does not refund again."""
    from tests.console._kit import serve, signed_in

    home, ledger = tmp_path / "home", tmp_path / "ledger"
    store = home / "runs.sqlite"
    home.mkdir()
    asyncio.run(park(store, "r-server", ledger, ONE_REFUND))
    hanging = episode(ledger, ONE_REFUND, hang_on="refund:80")
    served = serve(home, store, "--agent", AGENT, "--episode", hanging)
    try:
        with signed_in(served) as client:
            page = client.get("/").text
            ask = asyncio.run(_read(store, "r-server")).asks[0]
            fields = {
                "csrf": page.split('name="csrf" value="', 1)[1].split('"', 1)[0],
                "run_id": "r-server",
                "step": str(ask.step),
                "arguments_sha256": ask.arguments_sha256,
                "verdict": "approve",
            }
            assert 303 == client.post("/decide", data=fields).status_code
        wait_for(lambda: "in-action" in served.stdout.read_text(), "the refund to start")
        os.kill(served.process.pid, signal.SIGKILL)
        served.process.wait()
    finally:
        served.stop()
    assert ["refund:80"] == ledger_lines(ledger)
    following = _worker(home, store, episode(ledger, ONE_REFUND), "--once")
    try:
        assert 0 == following.wait(timeout=120)
    finally:
        _stop(following)
    assert StopReason.RESUME_STATE_UNKNOWN == _finished(store, "r-server")
    assert ["refund:80"] == ledger_lines(ledger)
