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
    "bash", "cat", "chmod", "cut", "dirname", "env", "grep", "id", "ldd", "ls", "mktemp", "rm",
    "sed", "sleep", "sort", "tail", "tar", "timeout", "tr", "seq",
)  # fmt: skip
#: Debian's, as the scripts find it on a fresh machine (the throwaway cluster's port and password).
SYSTEM_PYTHON = "/usr/bin/python3"


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
        (bin_dir / "python3").symlink_to(SYSTEM_PYTHON)
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
    # runuser is in /usr/sbin, which PATH may lack (`env -i PATH=/usr/bin:/bin`).
    runuser = shutil.which("runuser") or "/usr/sbin/runuser"
    as_user = [runuser, "-u", "nobody", "--"] if os.geteuid() == 0 else []
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
    assert (
        "preflight: missing a C and C++ compiler (cc, c++: the test model's llama-cpp-python is"
        " built from source) -- run: sudo apt-get install -y g++"
    ) in lines
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
    stand_in(tree, "cc")
    stand_in(tree, "c++")
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
    for name in ("bwrap", "git", "dockerd", "cc", "c++"):
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
    for name in ("bwrap", "git", "dockerd", "cc", "c++"):
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


def _all_present(tree: Path) -> None:
    """Stand-ins that work for bubblewrap, git, the compilers and Docker (an engine that runs
    containers)."""
    for name in ("bwrap", "git", "dockerd", "cc", "c++"):
        stand_in(tree, name)
    stand_in(tree, "docker", 'if [ "$1" = import ]; then cat >/dev/null; fi; echo 27.5.1')


def _not_working(done: subprocess.CompletedProcess[str]) -> list[str]:
    return [line for line in done.stderr.splitlines() if line.startswith("preflight: not working")]


def test_a_bwrap_that_cannot_create_a_sandbox_stops_the_run_naming_it_and_the_fix(
    tree: Path,
) -> None:
    """Present is not enough: a bwrap refused user namespaces (Ubuntu 24.04's AppArmor rule, a
    container without them) is named with the fix before any test runs."""
    _all_present(tree)
    stand_in(tree, "bwrap", 'echo "bwrap: setting up uid map: Permission denied" >&2; exit 1')

    done = run_rootless(tree, "bash", "scripts/test.sh")

    assert done.returncode != 0
    [line] = _not_working(done)
    assert line.startswith(
        "preflight: not working: bubblewrap cannot create a sandbox:"
        " bwrap: setting up uid map: Permission denied -- fix: "
    ), line
    assert "userns" in line.split(" -- fix: ")[1] or "namespaces" in line
    assert not [line for line in done.stderr.splitlines() if "preflight: missing" in line]
    assert "test.sh: stopped before any test ran" in done.stderr.splitlines()
    assert (done.stdout, "bootstrap-uv" in done.stderr) == ("", False)


def test_an_engine_that_answers_but_runs_no_container_is_named(tree: Path) -> None:
    _all_present(tree)
    stand_in(
        tree,
        "docker",
        'case "$1" in\n'
        "  version) echo 27.5.1 ;;\n"
        "  image) exit 1 ;;\n"
        "  import) cat >/dev/null; echo sha256:0 ;;\n"
        '  run) echo "docker: Error response from daemon: failed to create task" >&2; exit 125 ;;\n'
        "esac",
    )

    done = run_rootless(tree, "bash", "scripts/preflight.sh", "check")

    assert done.returncode == 1
    [line] = _not_working(done)
    assert line.startswith(
        "preflight: not working: Docker Engine answers but cannot run a container:"
        " docker: Error response from daemon: failed to create task -- fix: "
    ), line


def test_a_chromium_that_renders_nothing_is_named(tree: Path) -> None:
    _all_present(tree)
    stand_in(
        tree,
        "chromium",
        'echo "chromium: error while loading shared libraries: libnss3.so" >&2; exit 127',
    )

    done = run_rootless(tree, "bash", "scripts/preflight.sh", "check")

    assert done.returncode == 1
    [line] = _not_working(done)
    assert line.startswith(
        "preflight: not working: chromium does not render a page (headless --dump-dom):"
        " chromium: error while loading shared libraries: libnss3.so -- fix: "
    ), line


def test_a_part_that_works_is_tried_not_just_found(tree: Path) -> None:
    """Every part is used once: the stand-ins log their calls (Docker runs its container),
    and this machine's PostgreSQL binaries and chromium do their real work."""
    _all_present(tree)
    log = tree / "calls"
    log.touch(mode=0o666)
    log.chmod(0o666)
    for name in ("bwrap", "docker"):
        body = (tree / "bin" / name).read_text().split("\n", 1)[1]
        stand_in(tree, name, f'echo "{name} $1" >>{log}\n{body}')

    done = run_rootless(tree, "bash", "scripts/preflight.sh", "check")

    assert (done.returncode, _not_working(done)) == (0, []), done.stderr
    calls = log.read_text().splitlines()
    assert {"bwrap --unshare-all", "docker run"} <= set(calls), calls
