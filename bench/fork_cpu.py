"""CPU of a fork against a resume at the same step (issue 40, design 0067).

    uv run python bench/fork_cpu.py [--steps 1000] [--at 900] [--repeat 3] [--profile KIND]

Per store (memory, jsonl, sqlite; postgres too when ``POLYLOOP_TEST_POSTGRES_URL`` names a
server), in one process: a ``--steps``-step run (the scripted ``noop`` caller of
``bench/stores_bench.py``) is forked at step ``--at`` and the fork takes one new step (a final
answer); against it, a run of the same agent that crashed at step ``--at`` (its model call
there announced, never answered) is resumed and takes that one step. The figure is the
process's CPU time (all threads, ``getrusage``: user + system) of the ``fork``/``resume`` call
alone, the least of ``--repeat`` tries; the target is a ratio below 2. ``--profile jsonl``
prints the cProfile table of one fork (``SORT=tottime`` sorts it by own time); the durable
stores' threads do part of the work, which the table shows as waits.
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
from collections.abc import Mapping

sys.path.insert(0, os.path.dirname(__file__))

import contextlib

from polyloop.ports import ModelCall, RunStore
from polyloop.session import AgentDefinition, fork, resume, run
from polyloop.testing import LineDecisionParser, NullEventSink
from polyloop.types import ModelReply
from stores_bench import FINAL, SYNTHETIC, TOOL_CALL, close, make_store, setup


class _Crash(BaseException):
    """The process dying at the model call of the crash step."""


class _Caller:
    """``noop`` calls, a final answer from step ``final_at``, and a crash at ``crash_at``."""

    def __init__(self, steps: int, final_at: int, crash_at: int | None = None) -> None:
        self._steps, self._final_at, self._crash_at = steps, final_at, crash_at

    async def call(self, call: ModelCall) -> ModelReply:
        if call.call_index == self._crash_at:
            raise _Crash()
        return FINAL if call.call_index >= self._final_at else TOOL_CALL

    def parameters(self) -> Mapping[str, str]:
        return {"kind": "noop_caller", "steps": str(self._steps)}


def _definition(store: RunStore, caller: _Caller) -> AgentDefinition:
    return AgentDefinition(caller, LineDecisionParser(), store, NullEventSink(), SYNTHETIC)


def _cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def _store(kind: str, where: str) -> RunStore:
    if kind == "postgres":
        from polyloop.stores.postgres import PostgresRunStore

        return PostgresRunStore(os.environ["POLYLOOP_TEST_POSTGRES_URL"], schema=_schema(where))
    return make_store(kind, where)


async def _close(store: RunStore) -> None:
    aclose = getattr(store, "aclose", None)
    if aclose is not None and not hasattr(store, "__aexit__"):
        await aclose()
        return
    await close(store)


async def _measure(kind: str, base: str, steps: int, at: int, repeat: int) -> tuple[float, float]:
    """Least CPU seconds of a fork and of a resume, over ``repeat`` tries each."""
    where = tempfile.mkdtemp(dir=base)
    store = _store(kind, where)
    try:
        _, request = setup(store, steps, "source")
        await run(_definition(store, _Caller(steps, steps - 1)), request)
        forks: list[float] = []
        resumes: list[float] = []
        for attempt in range(repeat):
            crashed_id = f"crashed-{attempt}"
            _, crashed = setup(store, steps, crashed_id)
            with contextlib.suppress(_Crash):
                await run(_definition(store, _Caller(steps, at, crash_at=at)), crashed)
            before = _cpu()
            result = await resume(_definition(store, _Caller(steps, at)), crashed)
            resumes.append(_cpu() - before)
            assert at + 1 == len(result.steps), result.stop_reason
            _, forked = setup(store, steps, f"fork-{attempt}")
            before = _cpu()
            outcome = await fork(
                _definition(store, _Caller(steps, at)), forked, source_run_id="source", at_step=at
            )
            forks.append(_cpu() - before)
            assert at + 1 == len(outcome.steps)  # type: ignore[union-attr]
        return min(forks), min(resumes)
    finally:
        await _close(store)
        if kind == "postgres":
            _drop_schema(where)


def _drop_schema(where: str) -> None:
    import psycopg
    from psycopg import sql

    with psycopg.connect(os.environ["POLYLOOP_TEST_POSTGRES_URL"], autocommit=True) as connection:
        connection.execute(
            sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(_schema(where)))
        )


def _schema(where: str) -> str:
    return "fork_bench_" + os.path.basename(where).replace("-", "_").lower()


async def main(steps: int, at: int, repeat: int) -> None:
    kinds = ["memory", "jsonl", "sqlite"]
    if os.environ.get("POLYLOOP_TEST_POSTGRES_URL"):
        kinds.append("postgres")
    print(
        f"CPU of fork at step {at} of a {steps}-step run + one step, vs resume of the same run "
        f"crashed at step {at} + one step (least of {repeat}), ms:"
    )
    with tempfile.TemporaryDirectory() as base:
        for kind in kinds:
            forked, resumed = await _measure(kind, base, steps, at, repeat)
            print(
                f"{kind:<9} fork {forked * 1e3:8.1f}   resume {resumed * 1e3:8.1f}   "
                f"ratio {forked / resumed:5.2f}"
            )


async def profile(kind: str, steps: int, at: int) -> None:
    with tempfile.TemporaryDirectory() as base:
        where = tempfile.mkdtemp(dir=base)
        store = _store(kind, where)
        _, request = setup(store, steps, "source")
        await run(_definition(store, _Caller(steps, steps - 1)), request)
        _, forked = setup(store, steps, "fork")
        profiler = cProfile.Profile()
        profiler.enable()
        await fork(
            _definition(store, _Caller(steps, at)), forked, source_run_id="source", at_step=at
        )
        profiler.disable()
        await _close(store)
    pstats.Stats(profiler).sort_stats(os.environ.get("SORT", "cumulative")).print_stats(30)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--steps", type=int, default=1000)
    parser.add_argument("--at", type=int, default=900)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--profile", choices=("memory", "jsonl", "sqlite"))
    options = parser.parse_args()
    if options.profile:
        asyncio.run(profile(options.profile, options.steps, options.at))
    else:
        asyncio.run(main(options.steps, options.at, options.repeat))
