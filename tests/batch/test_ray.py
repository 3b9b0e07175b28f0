"""``polyloop batch --ray`` on a real local Ray cluster of two nodes (see ``_ray_cluster``)."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import pytest

from polyloop.adapters.otel import run_trace_id
from tests.adapters.otel._receiver import metrics_receiver
from tests.batch._kit import (
    assert_batch_error,
    batch_args,
    batch_env,
    episodes_of,
    finish,
    read_logs,
    results,
    start_batch,
    write_episodes,
)
from tests.batch._ray_cluster import RayCluster
from tests.cli._kit import clean_env, polyloop
from tests.stores._agent import ledger_effects as read_lines

pytestmark = pytest.mark.slow


def _env(cluster: RayCluster, home: Path) -> dict[str, str]:
    env = cluster.environment()
    env.update({k: v for k, v in clean_env(home).items() if k.startswith("POLYLOOP_")})
    return env


def _ray_args(episodes: Path, store: Path, cluster: RayCluster, *extra: str) -> list[str]:
    return [*batch_args(episodes, store, concurrency=4), "--ray", cluster.address, *extra]


def test_episodes_spread_over_two_workers_on_two_nodes(
    ray_cluster: RayCluster, tmp_path: Path
) -> None:
    """Two worker processes (one per node) share the episodes on one SQLite store, each driving
    several at once (never more than --concurrency); every episode runs once; a second pass
    finds them all recorded."""
    opens = tmp_path / "opens"
    rows = episodes_of(16, steps=2, model_sleep=0.05, opens=str(opens))
    episodes = write_episodes(tmp_path / "eps.jsonl", rows)
    store = tmp_path / "runs.sqlite"
    env = _env(ray_cluster, tmp_path / "home")
    first = polyloop(*_ray_args(episodes, store, ray_cluster), env=env, cwd=tmp_path, timeout=300)
    assert 0 == first.code, first.stderr
    lines = results(tmp_path / "eps-results.jsonl")
    assert ({row["run_id"] for row in rows}, {"ran"}) == (
        set(lines),
        {line["status"] for line in lines.values()},
    )
    assert 2 == len({line["worker"] for line in lines.values()})
    open_now: dict[int, int] = {}
    most: dict[int, int] = {}
    for event in read_lines(str(opens)):
        pid = event["pid"]
        open_now[pid] = open_now.get(pid, 0) + (1 if event["event"] == "open" else -1)
        most[pid] = max(most.get(pid, 0), open_now[pid])
    assert (2, True) == (len(most), all(2 <= n <= 4 for n in most.values())), most
    again = polyloop(*_ray_args(episodes, store, ray_cluster), env=env, cwd=tmp_path, timeout=300)
    assert 0 == again.code, again.stderr
    assert {"recorded"} == {
        line["status"] for line in results(tmp_path / "eps-results.jsonl").values()
    }


def test_with_otlp_the_workers_send_every_episodes_trace(
    ray_cluster: RayCluster, tmp_path: Path
) -> None:
    """`batch --ray --otlp URL` with a real OTLP/HTTP receiver on loopback: the batch's
    metrics come from the driver, and each worker, on both nodes, sends the traces of the
    episodes it drove (each run's invocation in its run id's trace, its chat spans beside)."""
    rows = episodes_of(6, steps=2)
    episodes = write_episodes(tmp_path / "traced.jsonl", rows)
    env = _env(ray_cluster, tmp_path / "home")
    with metrics_receiver() as (receiver, url):
        args = _ray_args(episodes, tmp_path / "runs.sqlite", ray_cluster, "--otlp", url)
        done = polyloop(*args, env=env, cwd=tmp_path, timeout=300)
        assert 0 == done.code, done.stderr
        spans = list(receiver.spans)
        episodes_done = receiver.last("polyloop.batch.episodes")
    lines = results(tmp_path / "traced-results.jsonl")
    assert 2 == len({line["worker"] for line in lines.values()})
    invocations = {trace for name, trace in spans if name == "invoke_agent polyloop"}
    assert {f"{run_trace_id(row['run_id']):032x}" for row in rows} == invocations
    chats = [trace for name, trace in spans if name.startswith("chat")]
    assert 3 * len(rows) == len(chats)
    assert set(chats) == invocations
    by_outcome = {dict(key)["polyloop.batch.outcome"]: n for key, n in episodes_done.items()}
    assert {"done": 6.0} == by_outcome


@pytest.mark.crash
def test_a_worker_killed_mid_episode_is_replaced_and_the_batch_completes(
    ray_cluster: RayCluster, tmp_path: Path
) -> None:
    """SIGKILL one worker while it drives episodes: its episodes are sent again and resumed
    (the lease died with the worker), every episode finishes once, and every `never` action
    (pay) ran at most once per run and step, by the fsynced ledger."""
    ledger = tmp_path / "ledger"
    rows = episodes_of(24, steps=4, model_sleep=0.05, ledger=str(ledger))
    episodes = write_episodes(tmp_path / "eps.jsonl", rows)
    store = tmp_path / "runs.sqlite"
    env = _env(ray_cluster, tmp_path / "home")
    process = start_batch(_ray_args(episodes, store, ray_cluster), env, tmp_path)
    deadline = time.monotonic() + 240
    while time.monotonic() < deadline:
        pids = {effect["pid"] for effect in read_lines(str(ledger))}
        if len(pids) >= 2 and len(read_lines(str(ledger))) >= 12:
            break
        time.sleep(0.05)
    else:
        process.kill()
        raise AssertionError(f"both workers never got going: {finish(process).stderr}")
    victim = min(pids)
    os.kill(victim, signal.SIGKILL)
    done = finish(process, timeout=300)
    assert 0 == done.code, done.stderr
    lines = results(tmp_path / "eps-results.jsonl")
    assert {row["run_id"] for row in rows} == set(lines)
    assert {"ran", "resumed"} >= {line["status"] for line in lines.values()}
    lost = [line for line in lines.values() if line["attempts"] > 1]
    assert lost, "no episode was in flight on the killed worker"
    assert all(f"{victim}@" not in line["worker"] for line in lost)
    logs = read_logs(store, [row["run_id"] for row in rows])
    assert set() == {run_id for run_id, log in logs.items() if log.finished is None}
    pays = [(e["run_id"], e["n"]) for e in read_lines(str(ledger)) if e["tool"] == "pay"]
    assert sorted(set(pays)) == sorted(pays), "a never action ran twice"


def test_workers_that_cannot_import_the_factory_refuse_the_batch(
    ray_cluster: RayCluster, tmp_path: Path
) -> None:
    """A factory this machine imports but the workers cannot: exit 23 naming the module, and
    no episode starts."""
    private = tmp_path / "private"
    private.mkdir()
    (private / "only_here.py").write_text("from tests.batch._agents import factory\n")
    episodes = write_episodes(tmp_path / "eps.jsonl", episodes_of(2))
    env = _env(ray_cluster, tmp_path / "home")
    env["PYTHONPATH"] = os.pathsep.join([str(private), env["PYTHONPATH"]])
    args = _ray_args(episodes, tmp_path / "runs.sqlite", ray_cluster)
    args[args.index("tests.batch._agents:factory")] = "only_here:factory"
    result = polyloop(*args, env=env, cwd=tmp_path, timeout=300)
    error = assert_batch_error(result, 23)
    assert "cannot load the factory: cannot import module 'only_here'" in error
    assert [] == [line for line in read_lines(str(tmp_path / "eps-results.jsonl"))]


def test_a_cluster_that_is_not_there_is_one_error(tmp_path: Path) -> None:
    """--ray at an address where no cluster listens: exit 23 saying how to start one."""
    episodes = write_episodes(tmp_path / "eps.jsonl", episodes_of(1))
    env = batch_env(tmp_path / "home")
    result = polyloop(
        *batch_args(episodes, tmp_path / "runs.sqlite"),
        "--ray",
        "127.0.0.1:9",
        env=env,
        cwd=tmp_path,
        timeout=300,
    )
    error = assert_batch_error(result, 23)
    assert error.startswith("cannot connect to the Ray cluster at '127.0.0.1:9'")
