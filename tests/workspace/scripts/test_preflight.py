"""scripts/preflight.sh: what the tests need beyond Python, checked before any test runs.

Each test runs the real scripts in a real subprocess with a PATH of its own making: a directory
of the basic tools (symlinks to this machine's) plus, where a test says so, stand-ins for the
parts under test (a stand-in `docker` that answers, so the check sees a running engine without
one). Root-less runs are real: as root the scripts run as `nobody` (runuser), from a copy of
`scripts/` that `nobody` may read.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
SCRIPTS = ("preflight.sh", "sbin-path.sh", "postgres-test-cluster.sh", "test.sh")
# What the scripts themselves call; none of the parts the preflight looks for.
BASIC_TOOLS = (
    "bash", "cat", "cut", "dirname", "env", "grep", "id", "ls", "sed", "sleep", "sort", "tail",
    "timeout", "seq",
)  # fmt: skip


@pytest.fixture
def tree() -> Iterator[Path]:
    """A copy of scripts/ and a bin directory of basic tools, readable by every user."""
    base = Path(tempfile.mkdtemp(prefix="polyloop-preflight-"))
    try:
        (base / "scripts").mkdir()
        for name in SCRIPTS:
            shutil.copy(ROOT / "scripts" / name, base / "scripts" / name)
        bin_dir = base / "bin"
        bin_dir.mkdir()
        for tool in BASIC_TOOLS:
            found = shutil.which(tool)
            assert found is not None, f"{tool} is needed to run this test"
            (bin_dir / tool).symlink_to(found)
        for path in [base, *base.rglob("*")]:
            if not path.is_symlink():
                path.chmod(0o755)
        yield base
    finally:
        shutil.rmtree(base)


def stand_in(tree: Path, name: str, body: str = "exit 0") -> None:
    path = tree / "bin" / name
    path.write_text(f"#!/bin/bash\n{body}\n")
    path.chmod(0o755)


def run_rootless(tree: Path, *command: str) -> subprocess.CompletedProcess[str]:
    """``command`` in ``tree`` as a user who is not root, with PATH=tree/bin only."""
    as_user = ["runuser", "-u", "nobody", "--"] if os.geteuid() == 0 else []
    return subprocess.run(
        [*as_user, "/usr/bin/env", "-i", f"PATH={tree / 'bin'}", "HOME=/nonexistent", *command],
        cwd=tree,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_missing_parts_are_named_one_line_each_with_the_command_and_nothing_runs(
    tree: Path,
) -> None:
    done = run_rootless(tree, "bash", "scripts/test.sh")

    assert done.returncode != 0
    lines = done.stderr.splitlines()
    assert (
        "preflight: missing bubblewrap (bwrap, the container executor's light backend)"
        " -- run: sudo apt-get install -y bubblewrap"
    ) in lines
    assert (
        "preflight: missing Docker Engine (dockerd and docker, the container executor's docker"
        " backend) -- run: sudo apt-get install -y docker.io && sudo bash scripts/preflight.sh"
        " install"
    ) in lines
    assert (
        "preflight: missing git (the MCP git server's tests) -- run: sudo apt-get install -y git"
        in lines
    )
    assert [line for line in lines if line.startswith("preflight: missing")] == [
        line for line in lines if "-- run: " in line
    ]
    assert "test.sh: stopped before any test ran" in lines
    # Nothing after the preflight ran: no uv bootstrap, no gate, no pytest.
    assert done.stdout == ""
    assert "bootstrap-uv" not in done.stderr


def test_an_engine_that_does_not_answer_is_named_with_the_command_that_starts_it(
    tree: Path,
) -> None:
    stand_in(tree, "bwrap")
    stand_in(tree, "git")
    stand_in(tree, "dockerd")
    stand_in(tree, "docker", 'echo "Cannot connect to the Docker daemon" >&2; exit 1')

    done = run_rootless(tree, "bash", "scripts/preflight.sh", "check")

    assert done.returncode == 1
    missing = [line for line in done.stderr.splitlines() if line.startswith("preflight: missing")]
    assert missing == [
        "preflight: missing a running Docker Engine (docker version gets no answer from a daemon)"
        " -- run: sudo bash scripts/preflight.sh install"
    ]


def test_nothing_missing_passes_quietly_without_installing(tree: Path) -> None:
    for name in ("bwrap", "git", "dockerd"):
        stand_in(tree, name)
    stand_in(tree, "docker", "echo 27.5.1")
    assert (
        subprocess.run(
            ["bash", str(ROOT / "scripts" / "postgres-test-cluster.sh"), "bindir"],
            capture_output=True,
            check=False,
        ).returncode
        == 0
    ), (
        "PostgreSQL's server binaries are needed on this machine (scripts/preflight.sh installs them)"
    )

    done = run_rootless(tree, "bash", "scripts/preflight.sh")

    assert (done.returncode, done.stdout, done.stderr) == (0, "", "")


def test_system_tools_are_found_whatever_path_holds() -> None:
    """runuser and dockerd live in /usr/sbin, which cron's or `env -i`'s PATH lacks."""
    done = subprocess.run(
        [
            "/usr/bin/env",
            "-i",
            "PATH=/nonexistent",
            "/bin/bash",
            "-c",
            f"source {ROOT / 'scripts' / 'sbin-path.sh'}; echo $PATH; command -v runuser",
        ],
        capture_output=True,
        text=True,
        check=False,
    )

    assert done.returncode == 0, done.stderr
    path, runuser = done.stdout.splitlines()
    assert path == "/nonexistent:/usr/local/sbin:/usr/sbin:/sbin"
    assert runuser in {"/usr/sbin/runuser", "/sbin/runuser"}


def test_an_engine_that_refuses_this_user_is_named_with_the_group_to_join(tree: Path) -> None:
    for name in ("bwrap", "git", "dockerd"):
        stand_in(tree, name)
    stand_in(
        tree,
        "docker",
        'echo "permission denied while trying to connect to the Docker daemon socket" >&2; exit 1',
    )

    done = run_rootless(tree, "bash", "scripts/preflight.sh", "check")

    assert done.returncode == 1
    missing = [line for line in done.stderr.splitlines() if line.startswith("preflight: missing")]
    user = "nobody" if os.geteuid() == 0 else os.environ.get("USER", "")
    assert missing == [
        f"preflight: missing access to the running Docker Engine (its socket refuses {user})"
        f" -- run: sudo usermod -aG docker {user}, then log in again"
    ]
