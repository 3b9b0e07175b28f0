"""The PostgreSQL store with several processes on one server, and with a server that stops,
restarts or is misconfigured.

The restart and configuration tests use a cluster of their own (``Cluster``, started with
``scripts/postgres-test-cluster.sh``), so they can stop it without disturbing other tests.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from collections.abc import Iterator, Mapping

import pytest

from polyloop.errors import LeaseLostError, StoreError
from polyloop.ports import ModelCall
from polyloop.recovery import validate_log
from polyloop.session import AgentDefinition, resume, run
from polyloop.stores.postgres import PostgresRunStore
from polyloop.types import ModelReply, StopReason
from tests.stores import _agent
from tests.stores._helpers import expected_log, finished, started
from tests.stores._postgres import ROOT, Cluster, admin, open_postgres_store, schema_for

pytestmark = pytest.mark.server

#: Runs per process, steps per run, contested runs.
COUNTS = ("100", "3", "20")


@pytest.fixture(scope="module")
def cluster() -> Iterator[Cluster]:
    own = Cluster()
    try:
        yield own
    finally:
        own.remove()


@pytest.mark.race
@pytest.mark.slow
def test_two_processes_writing_200_runs_at_once_and_contesting_20_lose_nothing(
    tmp_path: object,
) -> None:
    """Two processes, each with its own sessions, write 100 runs each at the same time and
    both try to start the same 20 runs: every run reads back whole, and each contested run has
    exactly one winner, whose records are the only ones in its log."""
    schema = schema_for(str(tmp_path))
    children = [
        subprocess.Popen(
            [
                sys.executable,
                "-m",
                "tests.stores._postgres_child",
                "write-many",
                schema,
                label,
                *COUNTS,
            ],
            cwd=ROOT,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for label in ("A", "B")
    ]
    for child in children:
        assert child.stdout is not None
        assert "ready" == child.stdout.readline().strip(), child.stderr
    for child in children:  # both go at once
        assert child.stdin is not None
        child.stdin.write("go\n")
        child.stdin.flush()
    reports = []
    for child in children:
        out, err = child.communicate(timeout=120)
        assert 0 == child.returncode, err
        reports.append(json.loads(out.strip().splitlines()[-1]))
    won = {label: set(report["won"]) for label, report in zip("AB", reports, strict=True)}
    assert set() == won["A"] & won["B"]
    assert {f"contested-{c}" for c in range(20)} == won["A"] | won["B"]
    asyncio.run(_check_200_runs(str(tmp_path), won))


async def _check_200_runs(where: str, won: dict[str, set[str]]) -> None:
    store = open_postgres_store(where)
    try:
        for label in "AB":
            for i in range(100):
                run_id = f"{label}-{i}"
                assert expected_log(run_id, 3) == await store.read_log(run_id)
            for run_id in won[label]:
                log = await store.read_log(run_id)
                assert expected_log(run_id, 3, finish=False).steps == log.steps
                assert started(run_id, who=label) == log.started
        assert 220 == len(await store.list_run_ids())
    finally:
        await store.aclose()


class _PausingModel:
    """Delegates to a scripted model; at call ``pause_at`` it says so and waits for ``go``."""

    def __init__(self, inner: object, pause_at: int) -> None:
        self._inner = inner
        self._pause_at = pause_at
        self.paused = asyncio.Event()
        self.go = asyncio.Event()

    async def call(self, call: ModelCall) -> ModelReply:
        if call.call_index == self._pause_at and not self.go.is_set():
            self.paused.set()
            await self.go.wait()
        reply: ModelReply = await self._inner.call(call)  # type: ignore[attr-defined]
        return reply

    def parameters(self) -> Mapping[str, str]:
        parameters: Mapping[str, str] = self._inner.parameters()  # type: ignore[attr-defined]
        return parameters


def _pausing_definition(
    store: PostgresRunStore, steps: int
) -> tuple[AgentDefinition, _PausingModel]:
    plain = _agent.definition(store, steps)
    model = _PausingModel(plain.model_client, pause_at=2)
    definition = AgentDefinition(
        model_client=model,  # type: ignore[arg-type]
        decision_parser=plain.decision_parser,
        store=store,
        event_sink=plain.event_sink,
        synthetic_observations=plain.synthetic_observations,
    )
    return definition, model


@pytest.mark.slow
async def test_a_server_restarted_mid_run_fails_the_write_and_the_run_resumes_after(
    cluster: Cluster,
) -> None:
    """The server stops while a run waits in a model call: the run's next write raises a
    StoreError (never success), and so does a read; once the server is back, resume completes
    the run from its log."""
    steps = 5
    store = PostgresRunStore(cluster.url, schema="restart")
    definition, model = _pausing_definition(store, steps)
    request = _agent.request("restarted", 0, steps)
    try:
        driving = asyncio.ensure_future(run(definition, request))
        await asyncio.wait_for(model.paused.wait(), 30)
        await asyncio.to_thread(cluster.pause)
        model.go.set()
        with pytest.raises(StoreError):
            await driving
        with pytest.raises(StoreError, match="cannot connect"):
            await store.read_log("restarted")
        await asyncio.to_thread(cluster.resume)
        result = await resume(_agent.definition(store, steps), request)
        assert StopReason.AGENT_FINISHED == result.stop_reason
        assert steps == len(result.steps)
        log = await store.read_log("restarted")
        validate_log(log, "restarted")
        assert log.finished is not None
        assert result == log.finished.result
    finally:
        await store.aclose()


@pytest.mark.slow
async def test_a_lease_held_across_a_server_restart_is_lost_and_can_be_taken_again(
    cluster: Cluster,
) -> None:
    """A restart ends the session holding a lease: the leased run's next write fails with
    LeaseLostError; after releasing, the lease is taken again on a new session and writes."""
    store = PostgresRunStore(cluster.url, schema="restart_lease")
    try:
        lease = await store.acquire_run_lease("leased")
        await store.write_run_started(started("leased"))
        await asyncio.to_thread(cluster.pause)
        await asyncio.to_thread(cluster.resume)
        with pytest.raises(LeaseLostError):
            await store.write_run_finished(finished("leased", 0))
        await lease.release()
        lease = await store.acquire_run_lease("leased")
        await store.write_run_finished(finished("leased", 0))
        await lease.release()
        assert (await store.read_log("leased")).finished == finished("leased", 0)
    finally:
        await store.aclose()


@pytest.mark.slow
async def test_a_server_running_without_fsync_is_refused_saying_why(cluster: Cluster) -> None:
    """With fsync = off on the server, the store refuses to write (its commits could be lost
    in a crash) and says how to fix it; with fsync back on, it writes."""
    with admin(cluster.url) as connection:
        connection.execute("ALTER SYSTEM SET fsync = off")
        connection.execute("SELECT pg_reload_conf()")
    try:
        for _ in range(100):
            with admin(cluster.url) as connection:
                if ("off",) == connection.execute("SHOW fsync").fetchone():
                    break
            await asyncio.sleep(0.05)
        store = PostgresRunStore(cluster.url, schema="unsafe")
        try:
            with pytest.raises(StoreError, match=r"fsync = off.*Turn fsync on"):
                await store.write_run_started(started("unsafe"))
        finally:
            await store.aclose()
    finally:
        with admin(cluster.url) as connection:
            connection.execute("ALTER SYSTEM RESET fsync")
            connection.execute("SELECT pg_reload_conf()")
    for _ in range(100):
        with admin(cluster.url) as connection:
            if ("on",) == connection.execute("SHOW fsync").fetchone():
                break
        await asyncio.sleep(0.05)
    store = PostgresRunStore(cluster.url, schema="unsafe")
    try:
        await store.write_run_started(started("unsafe"))
    finally:
        await store.aclose()
