"""A failing test never crashes the run on CPython 3.11 (gh-106905; design record 0042).

A real pytest run in a subprocess, on this suite's Python and on Debian's /usr/bin/python3:
three failing tests whose module leaves garbage behind that parses again when it is collected,
so pytest's own traceback formatting meets the spurious ``SystemError``. Without the guard the
run ends in ``INTERNALERROR`` on every interpreter that has the bug; with tests/conftest.py
(which installs the guard) it reports the three failures, with their tracebacks.

Debian's python3 has no pytest of its own (nor should it need one): its runs use an environment
built from that interpreter once per session, holding the lock's pytest and hypothesis, installed
by the pinned uv from its cache (the workspace's sync has just put them there; no network).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from tests.ast_parse_guard import MISMATCH

ROOT = Path(__file__).resolve().parents[2]
INTERPRETERS = (sys.executable, "/usr/bin/python3")
#: What a pytest run with tests/conftest.py imports beyond the standard library.
RUNNER = ("pytest", "hypothesis")
EXPORT = ("--only-group", "dev", "--no-emit-workspace", "--directory")

# Garbage that re-arms itself: each collection runs a finalizer that parses again at another
# stack depth, as a second thread's parse would. The long list makes pytest's parse of this
# module allocate enough nodes for collections to happen while its tree is built.
FAILING_MODULE = """
import ast
import gc


class Rearm:
    def __del__(self):
        def deeper(n):
            return deeper(n - 1) if n else ast.parse("y = 1")

        deeper(30)
        arm()


def arm():
    garbage = Rearm()
    garbage.cycle = garbage


def setup_module():
    arm()
    gc.set_threshold(20)


NUMBERS = [{numbers}]


def test_first():
    assert NUMBERS[0] == -1


def test_second():
    assert NUMBERS[1] == -1


def test_third():
    assert NUMBERS[2] == -1
""".format(numbers=", ".join(f"({i}, [{i}])" for i in range(400)))

BUGGY_PARSE = """
import ast, gc, sys
class Rearm:
    def __del__(self):
        (lambda: ast.parse("y = 1"))()
        arm()
def arm():
    garbage = Rearm(); garbage.cycle = garbage
arm(); gc.set_threshold(20)
try:
    ast.parse("x = [" + ", ".join("(%d, [%d])" % (i, i) for i in range(400)) + "]")
except SystemError as error:
    print(error)
"""


def _environment() -> dict[str, str]:
    env = {key: value for key, value in os.environ.items() if not key.startswith("PYTEST")}
    env["PYTHONPATH"] = str(ROOT)
    return env


def _pytest(python: str, directory: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [python, "-m", "pytest", "-p", "no:cacheprovider", "-q", "test_failing.py"],
        cwd=directory,
        env=_environment(),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def _uv() -> str:
    """The pinned uv: the one scripts/test.sh names, else the bootstrap's (installed on first use)."""
    if os.environ.get("UV"):
        return os.environ["UV"]
    found = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "bootstrap_uv.py")],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert found.returncode == 0, f"scripts/bootstrap_uv.py found no uv: {found.stderr}"
    return found.stdout.strip()


def _closure(names: tuple[str, ...]) -> set[str]:
    """The lock's packages that ``names`` need (on Linux), themselves included."""
    lock = tomllib.loads((ROOT / "uv.lock").read_text(encoding="utf-8"))
    needs = {
        package["name"]: [
            dependency["name"]
            for dependency in package.get("dependencies", [])
            if "win32" not in dependency.get("marker", "")
        ]
        for package in lock["package"]
    }
    wanted: set[str] = set()
    todo = list(names)
    while todo:
        name = todo.pop()
        if name not in wanted:
            wanted.add(name)
            todo.extend(needs[name])
    return wanted


def _pylock_of(names: set[str], pylock: str) -> str:
    """``pylock`` (uv's export of the lock) with only the packages named."""
    head, *entries = pylock.split("[[packages]]\n")
    kept = [entry for entry in entries if entry.split("\n", 1)[0].split('"')[1] in names]
    assert {entry.split("\n", 1)[0].split('"')[1] for entry in kept} == names, "uv's export changed"
    return head + "".join("[[packages]]\n" + entry for entry in kept)


@pytest.fixture(scope="session")
def debian_python(tmp_path_factory: pytest.TempPathFactory) -> str:
    """An environment of /usr/bin/python3 holding the lock's pytest and hypothesis: its python."""
    found = shutil.which("/usr/bin/python3")
    assert found is not None, "/usr/bin/python3 is needed (Debian 12: apt-get install python3)"
    uv, where = _uv(), tmp_path_factory.mktemp("debian-python")
    exported = subprocess.run(
        [uv, "export", "--frozen", "--quiet", "--format", "pylock.toml", *EXPORT, str(ROOT)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert exported.returncode == 0, exported.stderr
    (where / "pylock.toml").write_text(_pylock_of(_closure(RUNNER), exported.stdout))
    env, pylock = str(where / "env"), str(where / "pylock.toml")
    for command in (
        [uv, "venv", "--quiet", "--python", found, env],
        # --offline: the workspace's sync has put these wheels in uv's cache.
        [uv, "pip", "install", "--quiet", "--offline", "--python", env, "-r", pylock],
    ):
        done = subprocess.run(command, capture_output=True, text=True, timeout=300, check=False)
        assert done.returncode == 0, f"{command}: {done.stderr}"
    return str(Path(env, "bin", "python"))


@pytest.fixture(params=INTERPRETERS)
def python(request: pytest.FixtureRequest) -> str:
    if request.param == sys.executable:
        return sys.executable
    return str(request.getfixturevalue("debian_python"))


def _has_the_bug(python: str) -> bool:
    done = subprocess.run(
        [python, "-I", "-c", BUGGY_PARSE], capture_output=True, text=True, timeout=60, check=True
    )
    return done.stdout.startswith(MISMATCH)


def test_this_suites_python_has_the_bug_or_is_not_3_11() -> None:
    """The reproduction below is real on this machine: Debian 12's 3.11 has the bug."""
    if sys.version_info[:2] == (3, 11):
        assert _has_the_bug(sys.executable), "a 3.11 without gh-106905: update this test"


def test_without_the_guard_a_failure_crashes_pytest(python: str, tmp_path: Path) -> None:
    (tmp_path / "pytest.ini").write_text("[pytest]\n")
    (tmp_path / "test_failing.py").write_text(FAILING_MODULE)

    done = _pytest(python, tmp_path)

    if _has_the_bug(python):
        assert done.returncode == 3, done.stdout[-3000:]
        assert f"INTERNALERROR> SystemError: {MISMATCH}" in done.stdout
    else:
        assert done.returncode == 1, done.stdout[-3000:]


def test_with_the_suites_conftest_failures_are_reported_not_crashed(
    python: str, tmp_path: Path
) -> None:
    (tmp_path / "pytest.ini").write_text("[pytest]\n")
    (tmp_path / "test_failing.py").write_text(FAILING_MODULE)
    shutil.copy(ROOT / "tests" / "conftest.py", tmp_path / "conftest.py")

    done = _pytest(python, tmp_path)

    assert done.returncode == 1, done.stdout[-3000:]
    assert "INTERNALERROR" not in done.stdout
    assert MISMATCH not in done.stdout
    assert "3 failed" in done.stdout
    # The tracebacks are pytest's full ones: the failing statement, then the values.
    assert ">       assert NUMBERS[2] == -1" in done.stdout
    assert "E       assert (2, [2]) == -1" in done.stdout
