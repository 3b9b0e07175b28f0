"""Batch episodes that name a fork point (design 0067): "N models x M sources, each from step
K of its source" as one episodes file, locally and on a Ray cluster; nothing of a source's
prefix runs again (fsynced ledger)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from polyloop.batch import EpisodesFileError, check_episodes_file
from tests.batch._kit import batch_args, batch_env, read_logs, results, write_episodes
from tests.batch._ray_cluster import RayCluster
from tests.cli._kit import clean_env, polyloop
from tests.stores._agent import ledger_effects

pytestmark = pytest.mark.slow

SOURCES = ("src-0", "src-1")
VARIANTS = ("a", "b", "c")


def _forks(ledger: Path) -> list[dict[str, Any]]:
    """Three variants of each source, each from step 2 (look 0 and pay 1 inherited)."""
    return [
        {
            "run_id": f"{source}/{variant}",
            "fork_of": source,
            "fork_at": 2,
            "steps": 4,
            "variant": variant,
            "ledger": str(ledger),
        }
        for source in SOURCES
        for variant in VARIANTS
    ]


def _batch(tmp_path: Path, *extra: str, env: dict[str, str], cwd: Path) -> list[dict[str, Any]]:
    ledger = tmp_path / "ledger"
    store = tmp_path / "runs.sqlite"
    sources = write_episodes(
        tmp_path / "sources.jsonl",
        [{"run_id": s, "steps": 3, "ledger": str(ledger)} for s in SOURCES],
    )
    first = polyloop(*batch_args(sources, store), *extra, env=env, cwd=cwd, timeout=300)
    assert 0 == first.code, first.stderr
    forks = write_episodes(tmp_path / "forks.jsonl", _forks(ledger))
    done = polyloop(*batch_args(forks, store), *extra, env=env, cwd=cwd, timeout=300)
    assert 0 == done.code, done.stderr
    lines = results(tmp_path / "forks-results.jsonl")
    assert {"ran"} == {line["status"] for line in lines.values()}
    logs = read_logs(store, [row["run_id"] for row in _forks(ledger)])
    for run_id, log in logs.items():
        assert log.started is not None
        assert (run_id.split("/")[0], 2) == (
            log.started.forked_from_run_id,
            log.started.forked_at_step,
        )
        assert log.finished is not None
        assert 5 == len(log.steps)  # 2 inherited, then look 2, pay 3, final
    effects = ledger_effects(str(ledger))
    by_fork = sorted((e["run_id"], e["tool"], e["n"]) for e in effects if "/" in str(e["run_id"]))
    assert (
        sorted(
            (f"{s}/{v}", tool, n)
            for s in SOURCES
            for v in VARIANTS
            for tool, n in (("look", 2), ("pay", 3))
        )
        == by_fork
    )
    again = polyloop(*batch_args(forks, store), *extra, env=env, cwd=cwd, timeout=300)
    assert 0 == again.code, again.stderr
    assert {"recorded"} == {
        line["status"] for line in results(tmp_path / "forks-results.jsonl").values()
    }
    return effects


def test_a_fork_batch_runs_each_branch_once_locally(tmp_path: Path) -> None:
    effects = _batch(tmp_path, env=batch_env(tmp_path / "home"), cwd=tmp_path)
    assert 6 == sum(1 for e in effects if e["run_id"] in SOURCES)  # each source: look, pay, look


def test_a_fork_batch_on_ray(ray_cluster: RayCluster, tmp_path: Path) -> None:
    env = ray_cluster.environment()
    env.update({k: v for k, v in clean_env(tmp_path / "home").items() if k.startswith("POLYLOOP_")})
    _batch(tmp_path, "--ray", ray_cluster.address, env=env, cwd=tmp_path)
    workers = {line["worker"] for line in results(tmp_path / "forks-results.jsonl").values()}
    assert all(worker and not worker.startswith(f"{os.getpid()}@") for worker in workers)


@pytest.mark.parametrize(
    "line",
    [
        {"run_id": "f", "fork_of": "s"},
        {"run_id": "f", "fork_at": 1},
        {"run_id": "f", "fork_of": "f", "fork_at": 1},
        {"run_id": "f", "fork_of": "s", "fork_at": -1},
        {"run_id": "f", "fork_of": "s", "fork_at": True},
        {"run_id": "f", "fork_of": "s", "fork_at": 1, "fork_in_doubt_observation": 3},
    ],
)
def test_a_bad_fork_point_is_refused_by_line(line: dict[str, Any], tmp_path: Path) -> None:
    path = write_episodes(tmp_path / "eps.jsonl", [{"run_id": "ok"}, line])
    with pytest.raises(EpisodesFileError, match=r"line 2: a fork episode needs"):
        check_episodes_file(path)
