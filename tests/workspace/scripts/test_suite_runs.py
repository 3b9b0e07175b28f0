"""scripts/fresh-clone-test.sh and scripts/loaded-test.sh: the suite as on a fresh machine, and
under full CPU load. Each is run for real with a small command in place of the suite."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
FRESH = ROOT / "scripts" / "fresh-clone-test.sh"
LOADED = ROOT / "scripts" / "loaded-test.sh"


def _run(*command: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["bash", *command], capture_output=True, text=True, timeout=120, check=False, cwd=ROOT
    )


def _commit(revision: str = "HEAD") -> str:
    return subprocess.run(
        ["git", "-C", str(ROOT), "rev-parse", revision],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()


def test_a_fresh_clone_runs_with_nothing_but_path_and_an_empty_home(tmp_path: Path) -> None:
    """The command runs in a clone of the commit asked for, under `env -i` with
    PATH=/usr/bin:/bin and a new empty HOME; the clone and HOME are gone afterwards."""
    seen = tmp_path / "seen"
    script = (
        f'env > {seen}; ls -A "$HOME" >> {seen}; git log -1 --format=%H >> {seen}; pwd >> {seen}'
    )
    commit = _commit("HEAD~1")

    done = _run(str(FRESH), commit, "--", "bash", "-c", script)

    assert done.returncode == 0, done.stdout + done.stderr
    *variables, head, where = seen.read_text().splitlines()
    environment = dict(line.split("=", 1) for line in variables)
    assert {"PATH", "HOME", "PWD", "SHLVL", "_"} >= set(environment), environment
    assert environment["PATH"] == "/usr/bin:/bin"
    assert (head, where) == (commit, environment["PWD"])
    assert Path(environment["HOME"]).parent == Path(where).parent
    assert not Path(where).parent.exists()
    assert re.fullmatch(
        rf"fresh-clone-test: PASSED in 0 min \d+ s \(\d+ s\), commit {commit}",
        done.stdout.splitlines()[-1],
    )


def test_a_fresh_clone_reports_the_commands_failure_and_its_status() -> None:
    done = _run(str(FRESH), "--", "bash", "-c", "exit 7")

    assert done.returncode == 7
    assert done.stdout.splitlines()[-1].startswith("fresh-clone-test: FAILED (exit 7) in 0 min ")


def test_an_unknown_commit_is_refused_before_anything_runs(tmp_path: Path) -> None:
    done = _run(str(FRESH), "no-such-commit", "--", "touch", str(tmp_path / "ran"))

    assert (done.returncode, done.stdout.strip()) == (
        2,
        f"fresh-clone-test: no commit no-such-commit in {ROOT}",
    )
    assert not (tmp_path / "ran").exists()


def _state(pid: str) -> str:
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]


def test_the_load_keeps_every_core_busy_while_the_command_runs_and_stops_after(
    tmp_path: Path,
) -> None:
    """One busy process per core is running (using the CPU) during the command; none is left
    once the script has exited, whatever the command's status."""
    seen = tmp_path / "seen"
    # Each load process's CPU time (utime, field 14) is read until it has grown (the process is
    # running, not only alive), then written with its pid.
    script = (
        "utime() { cut -d' ' -f14 /proc/$1/stat; }; for p in $POLYLOOP_LOAD_PIDS; do"
        " first=$(utime $p); n=0; while [ $(utime $p) -le $first ] && [ $n -lt 600 ]; do"
        f' sleep 0.1; n=$((n + 1)); done; echo "$p $first $(utime $p)" >> {seen}; done; exit 3'
    )

    done = _run(str(LOADED), "--", "bash", "-c", script)

    assert done.returncode == 3, done.stdout + done.stderr
    lines = [line.split() for line in seen.read_text().splitlines()]
    assert len(lines) == os.cpu_count()
    assert [] == [line for line in lines if int(line[2]) <= int(line[1])]
    before = [pid for pid, _, _ in lines]
    for pid in before:
        assert not Path(f"/proc/{pid}").exists() or _state(pid) == "Z"
    assert re.fullmatch(
        r"loaded-test: FAILED \(exit 3\) under load in 0 min \d+ s \(\d+ s\)",
        done.stdout.splitlines()[-1],
    )


def test_the_shared_uv_cache_is_the_only_thing_kept(tmp_path: Path) -> None:
    seen = tmp_path / "seen"

    done = _run(str(FRESH), "--shared-uv-cache", "--", "bash", "-c", f"env > {seen}")

    assert done.returncode == 0, done.stdout + done.stderr
    environment = dict(line.split("=", 1) for line in seen.read_text().splitlines())
    assert {"PATH", "HOME", "PWD", "SHLVL", "_", "UV_CACHE_DIR"} >= set(environment), environment
    assert Path(environment["UV_CACHE_DIR"]).is_dir()
    assert not environment["UV_CACHE_DIR"].startswith(environment["HOME"])
