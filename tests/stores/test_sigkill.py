"""Durability under SIGKILL: real runs through ``polyloop.session``, killed at seeded moments.

A child process drives several concurrent runs on a durable store and prints each store
write once it is acknowledged (it is forked from a warmed-up "zygote", so a round costs a run
rather than an interpreter start). The parent kills it with SIGKILL after a seeded number of
acknowledged writes plus a seeded jitter of up to 2 ms (so the kill also lands between an
acknowledgement and the next write, or inside a write). After every kill the parent checks,
with a fresh store on the same storage:

- prefix durability: per run, every acknowledged record is present, in order, and at most one
  more (the write that was in flight) follows it — with batching (design 0055, the
  ``batching`` variant) at most the records of the batch in flight, a prefix of it;
- the log passes ``polyloop.recovery.validate_log``;
- ``resume`` does what the recovery table (``plan_resume``) says: it returns the recorded
  result, stops ``resume_state_unknown`` for an in-doubt NEVER call, or completes the run.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import queue
import random
import signal
import threading
import time
from collections import Counter
from dataclasses import dataclass, field

import pytest

from polyloop.ports import RunLog
from polyloop.recovery import ResumeMove, plan_resume, validate_log
from polyloop.serialization import LogRecord, loads_log_record
from polyloop.session import resume
from polyloop.types import Intent, ModelCallResult, RunFinished, RunStarted, StopReason
from tests.stores import _agent
from tests.stores._helpers import DURABLE_KINDS, FILE_KINDS, close_store, open_store
from tests.stores._postgres import wait_until_sessions_end
from tests.stores._procs import child

#: Real processes killed with SIGKILL, many rounds per store.
pytestmark = [pytest.mark.slow, pytest.mark.crash]

KILLS_PER_STORE = int(os.environ.get("POLYLOOP_KILLS", "50"))
RUNS = 4


@dataclass
class Acked:
    """The acknowledged writes of one run, by kind, in order."""

    started: list[RunStarted] = field(default_factory=list)
    intents: list[Intent] = field(default_factory=list)
    results: list[ModelCallResult] = field(default_factory=list)
    steps: list[object] = field(default_factory=list)
    finished: list[RunFinished] = field(default_factory=list)

    def add(self, record: LogRecord) -> None:
        kind = type(record).__name__
        bucket = {
            "RunStarted": self.started,
            "Intent": self.intents,
            "ModelCallResult": self.results,
            "StepCompleted": self.steps,
            "RunFinished": self.finished,
        }[kind]
        bucket.append(record)

    def count(self) -> int:
        return sum(map(len, (self.started, self.intents, self.results, self.steps, self.finished)))


def _log_size(log: RunLog) -> int:
    return (
        (log.started is not None)
        + len(log.intents)
        + len(log.model_results)
        + len(log.steps)
        + (log.finished is not None)
    )


class Zygote:
    """A warmed-up child that forks one driver per round (see ``tests.stores._child``)."""

    def __init__(self, kind: str, where: str, *, batching: bool = False) -> None:
        self.process = child("zygote-batching" if batching else "zygote", kind, where, stdin=True)
        self.lines: queue.Queue[str | None] = queue.Queue()
        self.last_pid = 0
        self.reader = threading.Thread(target=self._pump, daemon=True)
        self.reader.start()
        assert self._next() == "ready"

    def _pump(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            self.lines.put(line.rstrip("\n"))
        self.lines.put(None)

    def _next(self) -> str:
        line = self.lines.get(timeout=60)
        if line is None:
            assert self.process.stderr is not None
            raise AssertionError(f"zygote died:\n{self.process.stderr.read()}")
        return line

    def kill_round(self, prefix: str, steps: int, rng: random.Random) -> list[str]:
        """Drive one round, SIGKILL it after a seeded number of acknowledged writes plus a
        seeded jitter, and return the acknowledged-write lines it printed."""
        total_writes = RUNS * (1 + 4 * (steps - 1) + 3 + 1)
        target = rng.randrange(total_writes)
        jitter = rng.uniform(0, 0.002)
        assert self.process.stdin is not None
        self.process.stdin.write(f"{prefix} {RUNS} {steps}\n")
        self.process.stdin.flush()
        records: list[str] = []
        pid: int | None = None
        killed = False
        while True:
            line = self._next()
            if line.startswith("pid "):
                pid = int(line.split()[1])
            elif line.startswith("reaped "):
                assert pid == int(line.split()[1])
                self.last_pid = pid
                return records
            elif line.startswith("{"):
                try:
                    json.loads(line)
                except ValueError:
                    continue  # the line being printed when the kill landed
                records.append(line)
            if not killed and pid is not None and (len(records) > target or line == "done"):
                time.sleep(jitter)
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
                killed = True

    def close(self) -> None:
        assert self.process.stdin is not None
        self.process.stdin.close()
        self.process.wait(timeout=60)
        self.reader.join(timeout=60)
        for stream in (self.process.stdout, self.process.stderr):
            if stream is not None:
                stream.close()


def _acknowledged(lines: list[str]) -> dict[str, Acked]:
    acked: dict[str, Acked] = {}
    for line in lines:
        record = loads_log_record(json.loads(line)["rec"])
        acked.setdefault(record.run_id, Acked()).add(record)
    return acked


#: The most records one write of the loop holds (a result, a step and the next model intent).
BATCH_AT_MOST = 3


async def _check_round(
    kind: str,
    where: str,
    prefix: str,
    steps: int,
    acked: dict[str, Acked],
    tally: Counter[str],
    in_flight: int = 1,
) -> None:
    store = open_store(kind, where)
    try:
        definition = _agent.definition(store, steps)

        async def check_run(index: int) -> None:
            run_id = f"{prefix}-{index}"
            mine = acked.get(run_id, Acked())
            log = await store.read_log(run_id)
            # prefix durability: everything acknowledged is there, in order ...
            assert list(log.intents[: len(mine.intents)]) == mine.intents, run_id
            assert list(log.model_results[: len(mine.results)]) == mine.results, run_id
            assert list(log.steps[: len(mine.steps)]) == mine.steps, run_id
            if mine.started:
                assert log.started == mine.started[0], run_id
            if mine.finished:
                assert log.finished == mine.finished[0], run_id
            # ... followed by at most the one write that was in flight (a batch: a prefix of it,
            # which the per-kind prefixes above and validate_log below hold to the loop's order)
            assert mine.count() <= _log_size(log) <= mine.count() + in_flight, run_id
            validate_log(log, run_id)
            if log.started is None:
                assert log == RunLog(), run_id
                tally["never_started"] += 1
                return
            plan = plan_resume(log, max_consecutive_parse_failures=3, completing_tools=())
            result = await resume(definition, _agent.request(run_id, index, steps))
            if plan.move is ResumeMove.RETURN_RECORDED_RESULT:
                assert log.finished is not None
                assert result == log.finished.result
            elif plan.move is ResumeMove.STOP_STATE_UNKNOWN:
                assert result.stop_reason is StopReason.RESUME_STATE_UNKNOWN, plan.reason
            else:
                assert result.stop_reason is StopReason.AGENT_FINISHED, plan.reason
                assert len(result.steps) == steps
            tally[plan.move.value] += 1
            after = await store.read_log(run_id)
            validate_log(after, run_id)
            assert after.finished is not None
            assert after.finished.result == result

        await asyncio.gather(*(check_run(index) for index in range(RUNS)))
    finally:
        await close_store(store)


@pytest.mark.parametrize("kind", DURABLE_KINDS)
def test_sigkill_at_random_moments_loses_no_acknowledged_write(kind: str, tmp_path: object) -> None:
    """Writers killed with SIGKILL at random moments lose no acknowledged write, and every crashed
    run resumes by the recovery table (both to completion and to resume_state_unknown)."""
    _kill_rounds(kind, str(tmp_path), batching=False)


@pytest.mark.parametrize("kind", FILE_KINDS)
def test_sigkill_inside_batched_writes_loses_no_acknowledged_write(
    kind: str, tmp_path: object
) -> None:
    """The same when the store takes the loop's batches (design 0055): a kill lands inside a
    batched write as often as anywhere else, and what survives of the batch is a prefix of it."""
    _kill_rounds(kind, str(tmp_path), batching=True)


def _kill_rounds(kind: str, tmp_path: str, *, batching: bool) -> None:
    rng = random.Random(f"polyloop-sigkill-{kind}{'-batching' if batching else ''}")
    where = os.path.join(str(tmp_path), kind)
    os.makedirs(where)
    tally: Counter[str] = Counter()
    zygote = Zygote(kind, where, batching=batching)
    try:
        for round_index in range(KILLS_PER_STORE):
            prefix = f"k{round_index}"
            steps = rng.randint(2, 8)
            lines = zygote.kill_round(prefix, steps, rng)
            if kind == "postgres":
                # The server may still commit the statement the killed process had sent; it
                # frees that process's sessions (and leases) only afterwards.
                wait_until_sessions_end(zygote.last_pid)
            in_flight = BATCH_AT_MOST if batching else 1
            acked = _acknowledged(lines)
            asyncio.run(_check_round(kind, where, prefix, steps, acked, tally, in_flight))
    finally:
        zygote.close()
    # Both ends of the recovery table were exercised: runs that resumed to completion and
    # in-doubt NEVER calls that stopped as unknown.
    completed = sum(
        tally[m.value]
        for m in (
            ResumeMove.START_STEP,
            ResumeMove.CALL_MODEL_AGAIN,
            ResumeMove.REUSE_MODEL_RESULT,
            ResumeMove.EXECUTE_ACTION_AGAIN,
        )
    )
    assert completed > 0, tally
    assert tally[ResumeMove.STOP_STATE_UNKNOWN.value] > 0, tally
