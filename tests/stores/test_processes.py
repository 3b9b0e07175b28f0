"""Several processes on one storage: racing starts, and concurrent writers of different runs."""

from __future__ import annotations

import os

import pytest

from polyloop.recovery import validate_log
from polyloop.types import StopReason
from tests.stores._helpers import DURABLE_KINDS, close_store, expected_log, open_store
from tests.stores._procs import child, finish

#: Real processes racing on one storage.
pytestmark = [pytest.mark.slow, pytest.mark.race]


@pytest.mark.parametrize("kind", DURABLE_KINDS)
async def test_two_processes_racing_run_on_one_run_id_let_exactly_one_proceed(
    kind: str, tmp_path: object
) -> None:
    """Of two processes calling run() on one run_id, one drives it; the other is refused with
    the lease error (the winner held the lease) or RunAlreadyStartedError (it had started)."""
    where = str(tmp_path)
    for attempt in range(3):
        run_id = f"contested-{attempt}"
        racers = [child("race", kind, where, run_id, label, stdin=True) for label in "AB"]
        for racer in racers:
            assert racer.stdout is not None
            assert racer.stdout.readline().strip() == "ready"
        for racer in racers:  # release both as close together as two writes allow
            assert racer.stdin is not None
            racer.stdin.write("go\n")
            racer.stdin.flush()
        outcomes = [finish(racer).split() for racer in racers]
        winners = [label for label, out in zip("AB", outcomes, strict=True) if out[0] == "won"]
        losers = [out for out in outcomes if out[0] == "lost"]
        assert len(winners) == 1, outcomes
        assert len(losers) == 1, outcomes
        assert losers[0][1] in ("RunLeaseHeldError", "RunAlreadyStartedError"), outcomes
        assert outcomes[0 if winners == ["A"] else 1] == ["won", StopReason.AGENT_FINISHED.value]
        store = open_store(kind, where)
        try:
            log = await store.read_log(run_id)
        finally:
            await close_store(store)
        validate_log(log, run_id)
        assert log.started is not None
        assert log.started.parameter_snapshot["request.model_binding.who"] == winners[0]
        assert log.finished is not None
        assert len(log.steps) == 3


@pytest.mark.parametrize("kind", DURABLE_KINDS)
async def test_processes_writing_different_runs_to_one_storage_lose_nothing(
    kind: str, tmp_path: object
) -> None:
    """Three processes writing eight runs each to one storage: all 24 runs read back whole."""
    where = str(tmp_path)
    writers = [child("write", kind, where, f"p{n}", "8", "6") for n in range(3)]
    for writer in writers:
        assert finish(writer).strip() == "done"
    store = open_store(kind, where)
    try:
        for n in range(3):
            for i in range(8):
                run_id = f"p{n}-{i}"
                assert await store.read_log(run_id) == expected_log(run_id, 6)
    finally:
        await close_store(store)
    if kind == "jsonl":
        assert len(os.listdir(os.path.join(where, "runs"))) == 24
