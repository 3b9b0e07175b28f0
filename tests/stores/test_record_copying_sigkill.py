"""SIGKILL a process while it copies a source's records into forks (design 0072): each fork
it began is absent or whole on SQLite and PostgreSQL (one transaction), and on jsonl (one
append) absent, whole or a prefix of the copy; never anything else. The source is intact."""

from __future__ import annotations

import asyncio
import dataclasses
import os
import signal
import subprocess
import sys

import pytest

from polyloop.ports import BatchedRecord, RunLog
from polyloop.session import run
from polyloop.types import IntentKind, RunStarted
from tests.loop_kit import (
    Effects,
    MixedExecutor,
    make_definition,
    make_request,
    replies,
    scenario_tools,
)
from tests.stores import _postgres
from tests.stores._helpers import DURABLE_KINDS, close_store, open_store
from tests.stores._procs import ROOT

pytestmark = [pytest.mark.crash]

_postgres.claim_session_prefix()

#: The source's steps; the forks copy all of them (four records each).
STEPS = 400


@pytest.fixture(autouse=True)
def _drop_postgres_schemas() -> object:
    yield
    _postgres.drop_used_schemas()


def copied_records(log: RunLog, k: int) -> list[BatchedRecord]:
    """The records of steps ``0..k-1`` in the loop's write order (no asks in this source)."""
    model = {i.call_index: i for i in log.intents if i.kind is IntentKind.MODEL_CALL}
    action = {i.call_index: i for i in log.intents if i.kind is IntentKind.ACTION}
    results = {r.result_id: r for r in log.model_results}
    out: list[BatchedRecord] = []
    for step in range(k):
        out += [model[step], results[f"model-{step}"], action[step], log.steps[step]]
    return out


def fork_started(run_id: str, k: int) -> RunStarted:
    return RunStarted(run_id, {"model": "m"}, forked_from_run_id="source", forked_at_step=k)


async def _source(kind: str, where: str) -> RunLog:
    store = open_store(kind, where)
    try:
        effects = Effects()
        tools = scenario_tools(effects)
        script = replies(*["CALL noop {}"] * STEPS, "FINAL: done")
        request = make_request("source", tools=tools, executor=MixedExecutor(tools, effects))
        request = dataclasses.replace(
            request,
            budget=dataclasses.replace(request.budget, max_steps=STEPS + 1, max_actions=STEPS),
        )
        await run(make_definition(script, store), request)
        return await store.read_log("source")
    finally:
        await close_store(store)


async def _logs(kind: str, where: str, count: int) -> tuple[RunLog, list[RunLog]]:
    store = open_store(kind, where)
    try:
        source = await store.read_log("source")
        return source, [await store.read_log(f"copy-{n}") for n in range(count)]
    finally:
        await close_store(store)


def _log_of(records: list[BatchedRecord]) -> RunLog:
    from polyloop.session._fork import log_of

    return log_of(records)


@pytest.mark.parametrize("kind", DURABLE_KINDS)
def test_a_copy_killed_at_any_moment_leaves_no_fork_a_whole_one_or_on_jsonl_a_prefix(
    kind: str, tmp_path: object
) -> None:
    where = str(tmp_path)
    source = asyncio.run(_source(kind, where))
    assert STEPS == len(source.steps)
    expected = [fork_started("x", STEPS), *copied_records(source, STEPS)]
    child = subprocess.Popen(
        [sys.executable, "-m", "tests.stores._copy_child", kind, where, str(STEPS)],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert child.stdout is not None
        began = -1
        # several whole copies first, then the kill lands in whichever copy is under way
        while began < 3:
            line = child.stdout.readline()
            assert line.startswith("copying "), line + child.stderr.read()  # type: ignore[union-attr]
            began = int(line.split()[1])
    finally:
        os.kill(child.pid, signal.SIGKILL)
        child.communicate()
    source_after, logs = asyncio.run(_logs(kind, where, began + 2))
    assert source == source_after
    whole = 0
    for number, log in enumerate(logs):
        run_id = f"copy-{number}"
        moved = [dataclasses.replace(r, run_id=run_id) for r in expected]  # type: ignore[type-var]
        if log == RunLog():
            assert number >= began, f"{run_id} was acknowledged and is missing"
            continue
        if log == _log_of(moved):
            whole += 1
            continue
        assert kind == "jsonl", f"{run_id} holds part of its copy on {kind}"
        held = 1 + len(log.intents) + len(log.model_results) + len(log.steps)
        assert log == _log_of(moved[:held]), f"{run_id} is no prefix of its copy"
    assert whole >= began  # every copy acknowledged before the one under way is whole
