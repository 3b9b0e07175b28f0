"""A real local Ray cluster for the batch tests: a head and a second node, on loopback.

``ray start`` refuses ``127.0.0.1`` (it swaps it for the machine's address), so the head runs on
``127.0.0.2`` and the second node on ``127.0.0.3``: both loopback, two raylets, one CPU each, so
two workers land on two nodes. Each ``ray start`` is started in a session of its own, and every
Ray process it leaves behind (GCS, raylet, agents, workers) stays in that session: stopping the
cluster kills exactly those processes, by pid, and waits until none is left. ``ray stop`` is
never used (it stops every Ray cluster of the machine).

Workers inherit the raylet's environment, so ``PYTHONPATH`` names the repository root: they
import ``tests.batch._agents`` as a user's workers import an installed package.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
RAY = str(Path(sys.executable).with_name("ray"))
HEAD_IP = "127.0.0.2"
WORKER_IP = "127.0.0.3"
START_TIMEOUT = 300.0


def _free_port(host: str) -> int:
    with socket.socket() as probe:
        probe.bind((host, 0))
        return int(probe.getsockname()[1])


def _processes() -> dict[int, tuple[int, int]]:
    """``pid → (parent pid, session id)`` of every live process."""
    found = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", encoding="utf-8") as handle:
                fields = handle.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        # After the command: state, ppid, pgrp, session, ...
        if fields[0] != "Z":
            found[int(entry)] = (int(fields[1]), int(fields[3]))
    return found


def cluster_pids(sessions: list[int]) -> set[int]:
    """The live processes of the cluster: its starters' sessions, and every descendant of
    theirs (the raylet starts each worker in a session of its own)."""
    table = _processes()
    pids = {pid for pid, (_, session) in table.items() if session in sessions}
    grew = True
    while grew:
        more = {pid for pid, (parent, _) in table.items() if parent in pids} - pids
        pids |= more
        grew = bool(more)
    return pids


@dataclass
class RayCluster:
    address: str
    temp_dir: Path
    python_paths: tuple[str, ...] = ()
    sessions: list[int] = field(default_factory=list)

    def environment(self) -> dict[str, str]:
        return cluster_environment(*self.python_paths)

    def stop(self) -> None:
        """Kill every process of the cluster (TERM, then KILL) and remove its files."""
        known = cluster_pids(self.sessions)
        for sig, grace in ((signal.SIGTERM, 5.0), (signal.SIGKILL, 10.0)):
            deadline = time.monotonic() + grace
            known |= cluster_pids(self.sessions)
            for pid in known:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, sig)
            while time.monotonic() < deadline and known & set(_processes()):
                time.sleep(0.1)
        left = sorted(known & set(_processes()))
        shutil.rmtree(self.temp_dir, ignore_errors=True)
        assert [] == left, f"Ray processes left running: {left}"


def cluster_environment(*python_paths: str) -> dict[str, str]:
    """This process's environment for the cluster: no usage stats, the repository (and
    ``python_paths``) importable."""
    env = dict(os.environ)
    env["RAY_USAGE_STATS_ENABLED"] = "0"
    env["PYTHONPATH"] = os.pathsep.join(
        filter(None, [str(ROOT), *python_paths, env.get("PYTHONPATH")])
    )
    for name in ("RAY_ADDRESS", "PYTEST_CURRENT_TEST"):
        env.pop(name, None)
    return env


def _start(arguments: list[str], log: Path, cluster: RayCluster) -> None:
    with open(log, "ab") as output:
        process = subprocess.Popen(
            [RAY, "start", *arguments],
            stdin=subprocess.DEVNULL,
            stdout=output,
            stderr=subprocess.STDOUT,
            env=cluster.environment(),
            cwd=cluster.temp_dir,
            start_new_session=True,
        )
        cluster.sessions.append(process.pid)
        code = process.wait(timeout=START_TIMEOUT)
    if code != 0:
        raise RuntimeError(f"`ray start {' '.join(arguments)}` failed ({code}):\n{log.read_text()}")


def start_cluster(*python_paths: str) -> RayCluster:
    """A head on 127.0.0.2 and a second node on 127.0.0.3 (one CPU each), whose workers can
    import the repository and ``python_paths``; stop it after."""
    # Short: Ray's Unix socket paths live under it.
    temp_dir = Path(tempfile.mkdtemp(prefix="plr-", dir="/tmp"))
    port = _free_port(HEAD_IP)
    cluster = RayCluster(f"{HEAD_IP}:{port}", temp_dir, python_paths)
    common = [
        "--num-cpus=1",
        "--disable-usage-stats",
        f"--temp-dir={temp_dir}",
        f"--dashboard-agent-listen-port={_free_port(HEAD_IP)}",
    ]
    try:
        _start(
            [
                "--head",
                f"--node-ip-address={HEAD_IP}",
                f"--port={port}",
                "--include-dashboard=false",
                *common,
            ],
            temp_dir / "head.log",
            cluster,
        )
        common[-1] = f"--dashboard-agent-listen-port={_free_port(WORKER_IP)}"
        _start(
            [f"--address={cluster.address}", f"--node-ip-address={WORKER_IP}", *common],
            temp_dir / "worker.log",
            cluster,
        )
    except BaseException:
        cluster.stop()
        raise
    return cluster
