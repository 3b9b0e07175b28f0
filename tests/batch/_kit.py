"""Helpers of the batch tests: episodes files, the real ``polyloop batch`` command, run logs."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from polyloop.ports import RunLog
from polyloop.stores.sqlite import SqliteRunStore
from tests.cli._kit import POLYLOOP, Completed, clean_env
from tests.stores._agent import ledger_effects as read_lines

ROOT = Path(__file__).resolve().parents[2]
FACTORY = "tests.batch._agents:factory"


def batch_env(home: Path, **extra: str) -> dict[str, str]:
    """A user's environment in which ``tests.batch._agents`` can be imported."""
    env = clean_env(home, **extra)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    return env


def write_episodes(path: Path, episodes: Iterable[Mapping[str, Any]]) -> Path:
    with open(path, "w", encoding="utf-8") as handle:
        for episode in episodes:
            handle.write(json.dumps(dict(episode)) + "\n")
    return path


def episodes_of(count: int, prefix: str = "ep", **data: Any) -> list[dict[str, Any]]:
    return [{"run_id": f"{prefix}-{index:04d}", **data} for index in range(count)]


def batch_args(episodes: Path, store: Path, *extra: str, concurrency: int = 4) -> list[str]:
    return [
        "batch",
        str(episodes),
        "--agent",
        FACTORY,
        "--store",
        f"sqlite://{store}",
        "--concurrency",
        str(concurrency),
        *extra,
    ]


def start_batch(args: Sequence[str], env: Mapping[str, str], cwd: Path) -> subprocess.Popen[str]:
    """``polyloop`` with ``args`` as a child process (stdout and stderr piped)."""
    return subprocess.Popen(
        [POLYLOOP, *args],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=dict(env),
        cwd=cwd,
    )


def finish(process: subprocess.Popen[str], timeout: float = 120) -> Completed:
    stdout, stderr = process.communicate(timeout=timeout)
    return Completed(process.returncode, stdout, stderr)


def results(path: Path) -> dict[str, dict[str, Any]]:
    """The results file by run_id (each run_id must appear once)."""
    lines = read_lines(str(path))
    by_run = {line["run_id"]: line for line in lines}
    assert len(by_run) == len(lines), "a run_id appears twice in the results file"
    return by_run


def read_logs(store: Path, run_ids: Iterable[str]) -> dict[str, RunLog]:
    """Every run's log, read by a fresh store object in this process."""

    async def read() -> dict[str, RunLog]:
        async with SqliteRunStore(store) as opened:
            return {run_id: await opened.read_log(run_id) for run_id in run_ids}

    return asyncio.run(read())


def assert_batch_error(result: Completed, code: int) -> str:
    """The batch ended in one error line (after its progress lines): exit ``code``, no
    traceback, the last stderr line the only error; returns its headline."""
    assert result.code == code, (result.code, result.stdout, result.stderr)
    assert "Traceback" not in result.stderr
    lines = result.stderr.strip().splitlines()
    errors = [line for line in lines if line.startswith("polyloop: error: ")]
    assert [lines[-1]] == errors, result.stderr
    return errors[0].removeprefix("polyloop: error: ").split(" Detail: ")[0]


def python(code: str, env: Mapping[str, str]) -> str:
    completed = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=dict(env), check=True
    )
    return completed.stdout.strip()
