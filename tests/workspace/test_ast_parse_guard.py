"""A failing test never crashes the run on CPython 3.11 (gh-106905; design record 0042).

A real pytest run in a subprocess, on this suite's Python and on Debian's /usr/bin/python3:
three failing tests whose module leaves garbage behind that parses again when it is collected,
so pytest's own traceback formatting meets the spurious ``SystemError``. Without the guard the
run ends in ``INTERNALERROR`` on every interpreter that has the bug; with tests/conftest.py
(which installs the guard) it reports the three failures, with their tracebacks.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

from tests.ast_parse_guard import MISMATCH

ROOT = Path(__file__).resolve().parents[2]
INTERPRETERS = (sys.executable, "/usr/bin/python3")

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


def _environment(python: str) -> dict[str, str]:
    env = {key: value for key, value in os.environ.items() if not key.startswith("PYTEST")}
    if Path(python).resolve() == Path(sys.executable).resolve():
        env["PYTHONPATH"] = str(ROOT)
    else:
        # Debian's python3 with this suite's (pure-Python) pytest and hypothesis; only the
        # plugins named on the command line, since the workspace's own are not on this path.
        env["PYTHONPATH"] = os.pathsep.join([str(ROOT), sysconfig.get_paths()["purelib"]])
        env["PYTEST_DISABLE_PLUGIN_AUTOLOAD"] = "1"
    return env


def _pytest(python: str, directory: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [python, "-m", "pytest", "-p", "no:cacheprovider", "-q", "test_failing.py"],
        cwd=directory,
        env=_environment(python),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def _has_the_bug(python: str) -> bool:
    done = subprocess.run(
        [python, "-I", "-c", BUGGY_PARSE], capture_output=True, text=True, timeout=60, check=True
    )
    return done.stdout.startswith(MISMATCH)


@pytest.fixture(params=INTERPRETERS)
def python(request: pytest.FixtureRequest) -> str:
    found = shutil.which(str(request.param))
    assert found is not None, f"{request.param} is needed (Debian 12: apt-get install python3)"
    return found


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
